//===- Buffers.cpp - filling and reading a step's buffers ------*- C++ -*-===//
//
// distopt-run's synthetic inputs (docs/step-abi.md): parameters from a
// fixed pattern, gradients that differ per rank and step but average to
// the same values at any world size, seeded normal draws; and what it reads
// back (descriptors, non-finite counts, hashes).
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace distopt::run {

int64_t myRank = -1, worldSize = 1;

[[noreturn]] void die(const std::string &message) {
  // Name this rank once: the runtime's messages start with it already, and
  // before the communicator exists it is not known.
  llvm::errs() << "distopt-run: ";
  if (myRank >= 0 && message.rfind("rank ", 0) != 0)
    llvm::errs() << "rank " << myRank << ": ";
  llvm::errs() << message << "\n";
  llvm::errs().flush();
  distopt_rt_abort(); // every rank ends, none waits for this one
  std::_Exit(1);      // not reached
}

void check(distopt_rt_status status, const char *what) {
  if (status == DISTOPT_RT_OK)
    return;
  std::string error = distopt_rt_last_error();
  if (error.rfind("rank ", 0) == 0)
    die(error + " (" + what + ")");
  die(std::string(what) + ": " + error);
}

/// The driver's view of an argument or result, from the validated
/// interface (distopt/StepInterface).
Slot toSlot(const distopt::step::Value &value) {
  Slot slot;
  slot.role = distopt::step::roleName(value.role).str();
  slot.name = value.name;
  slot.dtype = value.dtype->name.str();
  slot.type = value.dtype;
  slot.init = distopt::step::initName(value.init).str();
  slot.perRank = value.perRank;
  slot.tensor = value.isTensor();
  if (value.shape)
    slot.shape = *value.shape;
  slot.shardOf = value.shardOf;
  slot.inPlaceArg = value.inPlaceArg.value_or(-1);
  for (const distopt::step::LayoutEntry &e : value.layout)
    slot.layout.push_back({e.name, e.offset, e.owner.value_or(-1), e.shape});
  return slot;
}

distopt_rt_dtype rtDtype(const Slot &slot) {
  if (!slot.type || slot.type->runtimeCode < 0)
    die("unsupported element type " + slot.dtype);
  return static_cast<distopt_rt_dtype>(slot.type->runtimeCode);
}

namespace {

/// Writes elements of one floating-point type: f32 and f64 natively; bf16
/// and f16 rounded from float. Resolved once per tensor, not per element:
/// the fills write every gradient every step.
class ElementWriter {
public:
  ElementWriter(const Slot &slot, void *base)
      : base(static_cast<char *>(base)), kind(kindOf(slot.dtype)) {}

  void store(int64_t i, double value) const {
    float f = static_cast<float>(value);
    switch (kind) {
    case Kind::F32:
      std::memcpy(base + i * 4, &f, 4);
      return;
    case Kind::F64:
      std::memcpy(base + i * 8, &value, 8);
      return;
    case Kind::BF16: {
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      bits += 0x7FFF + ((bits >> 16) & 1);
      uint16_t h = static_cast<uint16_t>(bits >> 16);
      std::memcpy(base + i * 2, &h, 2);
      return;
    }
    case Kind::F16: {
      _Float16 h = static_cast<_Float16>(f);
      std::memcpy(base + i * 2, &h, 2);
      return;
    }
    }
  }

private:
  enum class Kind { F32, F64, BF16, F16 };
  static Kind kindOf(const std::string &dtype) {
    if (dtype == "f32")
      return Kind::F32;
    if (dtype == "f64")
      return Kind::F64;
    if (dtype == "bf16")
      return Kind::BF16;
    if (dtype == "f16")
      return Kind::F16;
    die("unsupported element type " + dtype);
  }

  char *base;
  Kind kind;
};

/// The parameters' initial values: small, the same on every rank, different
/// per tensor (the pattern test/Integration/step_harness.py uses too).
struct Pattern {
  int64_t seed = 0;
  explicit Pattern(const std::string &name) {
    for (char c : name)
      seed += static_cast<unsigned char>(c);
  }
  double operator()(int64_t i) const {
    return static_cast<double>(((i * 7 + seed) % 13) - 6) / 8.0;
  }
};

/// A standard normal draw from a seeded generator (the same on all ranks).
struct Normal {
  uint64_t state;
  double uniform() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (static_cast<double>(state >> 11) + 0.5) / 9007199254740992.0;
  }
  double next() {
    return std::sqrt(-2 * std::log(uniform())) *
           std::cos(6.283185307179586 * uniform());
  }
};

} // namespace

Buffer allocate(size_t bytes) {
  size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  void *p = _mlir_memref_to_llvm_aligned_alloc(64, rounded);
  if (!p)
    die("out of memory allocating " + std::to_string(bytes) + " bytes");
  std::memset(p, 0, rounded);
  return {p, p, true};
}

int64_t numelOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// Whether every rank holds all of a laid-out slot's tensors (a gradient
/// bucket or flat parameter): neither a flat shard nor greedy ownership.
bool isReplicatedLayout(const Slot &slot) {
  return !slot.shardOf &&
         std::all_of(slot.layout.begin(), slot.layout.end(),
                     [](const Entry &e) { return e.owner < 0; });
}

/// The parts of a laid-out slot's tensors this rank holds: `fn(entry, first,
/// at, count)` for elements [first, first + count) of the entry's tensor at
/// [at, at + count) of this rank's buffer. A flat shard holds elements
/// [rank * S, (rank + 1) * S) of the laid-out buffer; greedy, this rank's
/// own tensors at their offsets; a gradient bucket, every tensor.
void forEachLocalRange(
    const Slot &slot,
    llvm::function_ref<void(const Entry &, int64_t, int64_t, int64_t)> fn) {
  int64_t size = slot.numel();
  int64_t begin = slot.shardOf ? myRank * size : 0;
  for (const Entry &e : slot.layout) {
    if (!slot.shardOf && e.owner >= 0 && e.owner != myRank)
      continue;
    int64_t lo = std::max(e.offset, begin);
    int64_t hi = std::min(e.offset + numelOf(e.shape), begin + size);
    if (lo < hi)
      fn(e, lo - e.offset, lo - begin, hi - lo);
  }
}

/// Fills a parameter, main parameter or its shard with the pattern.
void fillParameter(const Slot &slot, Buffer &buffer) {
  ElementWriter out(slot, buffer.aligned);
  if (slot.layout.empty()) {
    Pattern pattern(slot.name);
    for (int64_t i = 0; i < slot.numel(); ++i)
      out.store(i, pattern(i));
    return;
  }
  forEachLocalRange(
      slot, [&](const Entry &e, int64_t first, int64_t at, int64_t count) {
        Pattern pattern(e.name);
        for (int64_t i = 0; i < count; ++i)
          out.store(at + i, pattern(first + i));
      });
}

/// Gradients: a pattern per tensor and step, times 1 + (rank - (N-1)/2) / 4,
/// so that ranks differ, every sum over ranks is exact, and their average is
/// the pattern at any world size N (a run resumed at another size continues
/// the same trajectory).
/// A gradient bucket (--distopt-grad-as-bucket-view) holds each gradient at
/// its offset, as its own argument would, and zeros in between.
void fillGradient(const Slot &slot, Buffer &buffer, int64_t step) {
  double factor = 1.0 + (myRank - (worldSize - 1) / 2.0) / 4.0;
  ElementWriter out(slot, buffer.aligned);
  auto fill = [&](const std::string &name, int64_t first, int64_t at,
                  int64_t count) {
    Pattern pattern(name + "g" + std::to_string(step));
    for (int64_t i = 0; i < count; ++i)
      out.store(at + i,
                static_cast<double>(static_cast<float>(pattern(first + i))) *
                    factor);
  };
  if (slot.layout.empty())
    return fill(slot.name, 0, 0, slot.numel());
  std::memset(buffer.aligned, 0, slot.bytes());
  forEachLocalRange(slot,
                    [&](const Entry &e, int64_t first, int64_t at,
                        int64_t count) { fill(e.name, first, at, count); });
}

void fillNormal(const Slot &slot, Buffer &buffer, uint64_t seed) {
  Normal normal{seed};
  for (char c : slot.name)
    normal.state = normal.state * 31 + static_cast<unsigned char>(c);
  ElementWriter out(slot, buffer.aligned);
  for (int64_t i = 0; i < slot.numel(); ++i)
    out.store(i, normal.next());
}

/// A memref descriptor as the compiled code reads it.
std::vector<int64_t> descriptor(const Slot &slot, const Buffer &buffer) {
  std::vector<int64_t> words = {reinterpret_cast<int64_t>(buffer.allocated),
                                reinterpret_cast<int64_t>(buffer.aligned), 0};
  for (int64_t d : slot.shape)
    words.push_back(d);
  int64_t stride = 1;
  std::vector<int64_t> strides(slot.shape.size());
  for (int64_t d = static_cast<int64_t>(slot.shape.size()) - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= slot.shape[d];
  }
  words.insert(words.end(), strides.begin(), strides.end());
  return words;
}

/// The elements of a floating-point slot that are inf or NaN (0 for
/// integers).
int64_t countNonFinite(const Slot &slot, const void *data) {
  int64_t count = 0;
  auto bits = [&](auto word, unsigned exponentShift, uint64_t exponentMask) {
    using Word = decltype(word);
    const Word *p = static_cast<const Word *>(data);
    for (int64_t i = 0, n = slot.numel(); i < n; ++i)
      count += ((static_cast<uint64_t>(p[i]) >> exponentShift) &
                exponentMask) == exponentMask;
  };
  if (slot.dtype == "f32")
    bits(uint32_t(), 23, 0xff);
  else if (slot.dtype == "f64")
    bits(uint64_t(), 52, 0x7ff);
  else if (slot.dtype == "bf16")
    bits(uint16_t(), 7, 0xff);
  else if (slot.dtype == "f16")
    bits(uint16_t(), 10, 0x1f);
  return count;
}

uint64_t hashBytes(const void *data, size_t bytes) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < bytes; ++i) {
    h ^= static_cast<const unsigned char *>(data)[i];
    h *= 1099511628211ULL;
  }
  return h;
}

} // namespace distopt::run
