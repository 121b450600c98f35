//===- Limits.h - the sizes distopt accepts ---------------------*- C++ -*-===//
//
// Every size read from input (a spec, a checkpoint, a step's interface, a
// command line) is checked against these before it is used, so that sums,
// products and offsets computed from them cannot overflow 64 bits.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_SUPPORT_LIMITS_H
#define DISTOPT_SUPPORT_LIMITS_H

#include <cstdint>

namespace distopt {

/// The most ranks a step may be compiled for (2^20; the largest training
/// runs use about 10^5).
constexpr int64_t kMaxWorldSize = int64_t(1) << 20;

/// The most elements one tensor, or a model's parameters together, may have
/// (2^53: every count is exact in a double, and bytes of 8-byte elements,
/// padded for 2^20 ranks, fit in an int64).
constexpr int64_t kMaxElements = int64_t(1) << 53;

/// The product of `dims`, or -1 when a dimension is negative or the product
/// exceeds kMaxElements.
template <typename Range> int64_t checkedNumElements(const Range &dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0)
      return -1;
    if (d != 0 && n > kMaxElements / d)
      return -1;
    n *= d;
  }
  return n;
}

} // namespace distopt

#endif // DISTOPT_SUPPORT_LIMITS_H
