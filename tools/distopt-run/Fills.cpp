//===- Fills.cpp - distopt-run's synthetic parameters and gradients -------===//
//
// Parameters from a fixed pattern, the same on every rank; gradients that
// differ per rank and per step but average to the same values at any world
// size, so that a run resumed at another size continues the same
// trajectory. Each is computed whole, in f64, rounded to the tensor's type
// (bf16 and f16 through float), and handed to the library, which writes it
// where this
// rank holds it (a ZeRO shard, a bucket entry, a whole argument).
//
//===----------------------------------------------------------------------===//

#include "Run.h"

#include <cmath>
#include <cstring>

namespace distopt::run {

namespace {

/// Small values, different per tensor, the same on every rank (the pattern
/// test/Integration/step_harness.py's references use too).
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

/// Writes `values` into tensor `index`, rounded to its type.
void write(Run &run, size_t index, const std::vector<double> &values) {
  const distopt_step_tensor &t = run.tensors[index];
  std::vector<char> &bytes = run.fillBytes;
  bytes.resize(t.bytes);
  check(distopt_rt_convert(values.data(), DISTOPT_RT_F64, bytes.data(),
                           static_cast<distopt_rt_dtype>(t.dtype_code),
                           t.numel),
        "converting a fill");
  check(distopt_session_write_tensor(run.session, index, bytes.data(), t.bytes),
        "filling a tensor");
}

} // namespace

void fillParameters(Run &run) {
  for (size_t i = 0; i < run.tensors.size(); ++i) {
    const distopt_step_tensor &t = run.tensors[i];
    if (std::strcmp(t.role, "param") && std::strcmp(t.role, "main_param"))
      continue;
    Pattern pattern(t.name);
    std::vector<double> values(t.numel);
    for (int64_t k = 0; k < t.numel; ++k)
      values[k] = pattern(k);
    write(run, i, values);
  }
}

/// A pattern per tensor and step, times 1 + (rank - (N-1)/2) / 4: ranks
/// differ, every sum over ranks is exact, and their average is the pattern.
void fillGradients(Run &run, int64_t step, bool overflow, int64_t micro) {
  double factor = 1.0 + (run.rank - (run.size - 1) / 2.0) / 4.0;
  for (size_t i = 0; i < run.tensors.size(); ++i) {
    const distopt_step_tensor &t = run.tensors[i];
    if (std::strcmp(t.role, "grad"))
      continue;
    Pattern pattern(std::string(t.name) + "g" + std::to_string(step - 1) +
                    (micro ? "m" + std::to_string(micro) : ""));
    std::vector<double> &values = run.fillValues;
    values.resize(t.numel);
    for (int64_t k = 0; k < t.numel; ++k)
      values[k] = static_cast<double>(static_cast<float>(pattern(k))) * factor;
    if (overflow && t.numel > 0) {
      values[0] = INFINITY; // once: the first gradient's first element
      overflow = false;
    }
    write(run, i, values);
  }
}

int64_t countNonFinite(const char *dtype, const void *data, int64_t numel) {
  int64_t count = 0;
  auto bits = [&](auto word, unsigned exponentShift, uint64_t exponentMask) {
    using Word = decltype(word);
    const Word *p = static_cast<const Word *>(data);
    for (int64_t i = 0; i < numel; ++i)
      count += ((static_cast<uint64_t>(p[i]) >> exponentShift) &
                exponentMask) == exponentMask;
  };
  std::string type = dtype;
  if (type == "f32")
    bits(uint32_t(), 23, 0xff);
  else if (type == "f64")
    bits(uint64_t(), 52, 0x7ff);
  else if (type == "bf16")
    bits(uint16_t(), 7, 0xff);
  else if (type == "f16")
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
