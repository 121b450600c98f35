//===- Elements.cpp - element types and fused reduction kernels -*- C++ -*-===//

#include "Elements.h"
#include "Threads.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace distopt::rt {

namespace {

// bf16 and f16 are stored as uint16_t and computed in float.
struct BF16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

float toFloat(BF16 v) {
  uint32_t bits = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

BF16 toBF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f))
    return {static_cast<uint16_t>((bits >> 16) | 0x40)}; // quiet NaN
  bits += 0x7FFF + ((bits >> 16) & 1);                   // nearest even
  return {static_cast<uint16_t>(bits >> 16)};
}

float toFloat(F16 v) {
  uint32_t sign = (v.bits >> 15) & 1, exp = (v.bits >> 10) & 0x1F,
           mant = v.bits & 0x3FF;
  float magnitude;
  if (exp == 0)
    magnitude = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31)
    magnitude = mant ? NAN : INFINITY;
  else
    magnitude = std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
  return sign ? -magnitude : magnitude;
}

F16 toF16(float f) {
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  float a = std::fabs(f);
  if (std::isnan(f))
    return {static_cast<uint16_t>(sign | 0x7E00)};
  if (a >= 65520.0f) // rounds to infinity
    return {static_cast<uint16_t>(sign | 0x7C00)};
  if (a < std::ldexp(1.0f, -14)) { // subnormal: multiples of 2^-24
    float q = std::nearbyint(std::ldexp(a, 24)); // ties to even
    return {static_cast<uint16_t>(sign | static_cast<uint16_t>(q))};
  }
  int e;
  std::frexp(a, &e);                               // a = m * 2^e, m in [0.5, 1)
  float q = std::nearbyint(std::ldexp(a, 11 - e)); // 11 significant bits
  if (q >= 2048.0f) {
    q /= 2;
    ++e;
  }
  uint16_t exp = static_cast<uint16_t>(e + 14);
  if (exp >= 31)
    return {static_cast<uint16_t>(sign | 0x7C00)};
  return {static_cast<uint16_t>(sign | (exp << 10) |
                                (static_cast<uint16_t>(q) & 0x3FF))};
}

// The type arithmetic happens in, per storage type.
template <typename T> struct Compute {
  using type = T;
  static T load(T v) { return v; }
  static T store(T v) { return v; }
};
template <> struct Compute<BF16> {
  using type = float;
  static float load(BF16 v) { return toFloat(v); }
  static BF16 store(float v) { return toBF16(v); }
};
template <> struct Compute<F16> {
  using type = float;
  static float load(F16 v) { return toFloat(v); }
  static F16 store(float v) { return toF16(v); }
};

template <typename C> C apply(distopt_rt_reduction op, C a, C b) {
  switch (op) {
  case DISTOPT_RT_MIN:
    return std::min(a, b);
  case DISTOPT_RT_MAX:
    return std::max(a, b);
  case DISTOPT_RT_PROD:
    return a * b;
  default: // sum, avg, premul_sum
    return a + b;
  }
}

/// The kernel, specialised on what it does so that the loop has no branch
/// and vectorises: one read of each input, one write, per element.
template <typename T, typename W, bool HasWire, bool Premul, bool Divide>
void combineLoop(const W *wire, const T *local, T *out, int64_t n,
                 distopt_rt_reduction op, typename Compute<T>::type scale,
                 typename Compute<T>::type divisor,
                 typename Compute<T>::type wireScale) {
  using C = typename Compute<T>::type;
  for (int64_t i = 0; i < n; ++i) {
    C x = Compute<T>::load(local[i]);
    if constexpr (Premul)
      x = x * scale;
    if constexpr (HasWire) {
      C received = static_cast<C>(Compute<W>::load(wire[i]));
      if constexpr (Premul) // x * 1 == x: exact when the peer scaled
        received = received * wireScale;
      x = apply<C>(op, received, x);
    }
    if constexpr (Divide)
      x = x / divisor;
    out[i] = Compute<T>::store(x);
  }
}

template <typename T, typename W, bool HasWire>
void combineTyped(const W *wire, const T *local, T *out, int64_t n,
                  const Combine &c) {
  using C = typename Compute<T>::type;
  C scale = static_cast<C>(c.localScale);
  C divisor = static_cast<C>(c.resultDivisor);
  C wireScale = static_cast<C>(c.wireScale);
  bool premul = c.op == DISTOPT_RT_PREMUL_SUM, divide = c.resultDivisor != 1.0;
  // Sum-like reductions get a loop without the switch on the operation.
  auto run = [&](distopt_rt_reduction op) {
    if (premul && divide)
      combineLoop<T, W, HasWire, true, true>(wire, local, out, n, op, scale,
                                             divisor, wireScale);
    else if (premul)
      combineLoop<T, W, HasWire, true, false>(wire, local, out, n, op, scale,
                                              divisor, wireScale);
    else if (divide)
      combineLoop<T, W, HasWire, false, true>(wire, local, out, n, op, scale,
                                              divisor, wireScale);
    else
      combineLoop<T, W, HasWire, false, false>(wire, local, out, n, op, scale,
                                               divisor, wireScale);
  };
  switch (c.op) {
  case DISTOPT_RT_MIN:
  case DISTOPT_RT_MAX:
  case DISTOPT_RT_PROD:
    return run(c.op);
  default:
    return run(DISTOPT_RT_SUM);
  }
}

template <typename T>
void combineWithWire(const void *wire, distopt_rt_dtype wireType,
                     const void *local, void *out, int64_t n,
                     distopt_rt_dtype type, const Combine &c) {
  auto *l = static_cast<const T *>(local);
  auto *o = static_cast<T *>(out);
  if (!wire)
    return combineTyped<T, T, false>(nullptr, l, o, n, c);
  if (wireType == type)
    return combineTyped<T, T, true>(static_cast<const T *>(wire), l, o, n, c);
  if (wireType == DISTOPT_RT_BF16)
    return combineTyped<T, BF16, true>(static_cast<const BF16 *>(wire), l, o, n,
                                       c);
  return combineTyped<T, F16, true>(static_cast<const F16 *>(wire), l, o, n, c);
}

template <typename In, typename Out>
void convertTyped(const In *in, Out *out, int64_t n) {
  using CI = Compute<In>;
  using CO = Compute<Out>;
  using C = typename CO::type;
  for (int64_t i = 0; i < n; ++i)
    out[i] = CO::store(static_cast<C>(CI::load(in[i])));
}

template <typename In>
void convertFrom(const In *in, void *out, distopt_rt_dtype outType, int64_t n) {
  switch (outType) {
  case DISTOPT_RT_F32:
    return convertTyped(in, static_cast<float *>(out), n);
  case DISTOPT_RT_F64:
    return convertTyped(in, static_cast<double *>(out), n);
  case DISTOPT_RT_BF16:
    return convertTyped(in, static_cast<BF16 *>(out), n);
  case DISTOPT_RT_F16:
    return convertTyped(in, static_cast<F16 *>(out), n);
  case DISTOPT_RT_I32:
    return convertTyped(in, static_cast<int32_t *>(out), n);
  case DISTOPT_RT_I64:
    return convertTyped(in, static_cast<int64_t *>(out), n);
  }
}

} // namespace

size_t elementSize(distopt_rt_dtype type) {
  switch (type) {
  case DISTOPT_RT_F32:
  case DISTOPT_RT_I32:
    return 4;
  case DISTOPT_RT_F64:
  case DISTOPT_RT_I64:
    return 8;
  case DISTOPT_RT_BF16:
  case DISTOPT_RT_F16:
    return 2;
  }
  return 0;
}

bool isFloat(distopt_rt_dtype type) {
  return type == DISTOPT_RT_F32 || type == DISTOPT_RT_F64 ||
         type == DISTOPT_RT_BF16 || type == DISTOPT_RT_F16;
}

bool isValid(distopt_rt_dtype type) {
  return type >= DISTOPT_RT_F32 && type <= DISTOPT_RT_I64;
}

bool isValid(distopt_rt_reduction op) {
  return op >= DISTOPT_RT_SUM && op <= DISTOPT_RT_PREMUL_SUM;
}

const char *name(distopt_rt_dtype type) {
  static const char *names[] = {"f32", "f64", "bf16", "f16", "i32", "i64"};
  return isValid(type) ? names[type] : "invalid-dtype";
}

const char *name(distopt_rt_reduction op) {
  static const char *names[] = {"sum", "avg",  "min",
                                "max", "prod", "premul_sum"};
  return isValid(op) ? names[op] : "invalid-reduction";
}

/// combineChunk on one thread.
static void combineRange(const void *wire, distopt_rt_dtype wireType,
                         const void *local, void *out, int64_t n,
                         distopt_rt_dtype type, const Combine &c) {
  switch (type) {
  case DISTOPT_RT_F32:
    return combineWithWire<float>(wire, wireType, local, out, n, type, c);
  case DISTOPT_RT_F64:
    return combineWithWire<double>(wire, wireType, local, out, n, type, c);
  case DISTOPT_RT_BF16:
    return combineWithWire<BF16>(wire, wireType, local, out, n, type, c);
  case DISTOPT_RT_F16:
    return combineWithWire<F16>(wire, wireType, local, out, n, type, c);
  case DISTOPT_RT_I32:
    return combineWithWire<int32_t>(wire, wireType, local, out, n, type, c);
  case DISTOPT_RT_I64:
    return combineWithWire<int64_t>(wire, wireType, local, out, n, type, c);
  }
}

/// convert on one thread.
static void convertRange(const void *in, distopt_rt_dtype inType, void *out,
                         distopt_rt_dtype outType, int64_t n) {
  if (inType == outType) {
    if (in != out)
      std::memmove(out, in, n * elementSize(inType));
    return;
  }
  switch (inType) {
  case DISTOPT_RT_F32:
    return convertFrom(static_cast<const float *>(in), out, outType, n);
  case DISTOPT_RT_F64:
    return convertFrom(static_cast<const double *>(in), out, outType, n);
  case DISTOPT_RT_BF16:
    return convertFrom(static_cast<const BF16 *>(in), out, outType, n);
  case DISTOPT_RT_F16:
    return convertFrom(static_cast<const F16 *>(in), out, outType, n);
  case DISTOPT_RT_I32:
    return convertFrom(static_cast<const int32_t *>(in), out, outType, n);
  case DISTOPT_RT_I64:
    return convertFrom(static_cast<const int64_t *>(in), out, outType, n);
  }
}

// Both split large buffers among this thread's share of threads: each
// element is computed as on one thread, so the results do not depend on it.
void combineChunk(const void *wire, distopt_rt_dtype wireType,
                  const void *local, void *out, int64_t n,
                  distopt_rt_dtype type, const Combine &c) {
  size_t wireSize = elementSize(wireType), size = elementSize(type);
  parallelFor(n, [&](int64_t begin, int64_t end) {
    combineRange(wire ? static_cast<const char *>(wire) + begin * wireSize
                      : nullptr,
                 wireType, static_cast<const char *>(local) + begin * size,
                 static_cast<char *>(out) + begin * size, end - begin, type, c);
  });
}

void convert(const void *in, distopt_rt_dtype inType, void *out,
             distopt_rt_dtype outType, int64_t n) {
  if (inType == outType) // a copy, which may overlap: one memmove
    return convertRange(in, inType, out, outType, n);
  size_t inSize = elementSize(inType), outSize = elementSize(outType);
  parallelFor(n, [&](int64_t begin, int64_t end) {
    convertRange(static_cast<const char *>(in) + begin * inSize, inType,
                 static_cast<char *>(out) + begin * outSize, outType,
                 end - begin);
  });
}

} // namespace distopt::rt
