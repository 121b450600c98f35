//===- Elements.h - element types and fused reduction kernels ---*- C++ -*-===//
//
// The element types of the runtime (f32, f64, bf16, f16, i32, i64), their
// conversion to and from the wire type, and the one-pass kernels that the
// ring algorithms run on each chunk: accumulate what arrived with the local
// contribution, scaling the local part (premul_sum) or the result (avg) in
// the same loop.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_RT_ELEMENTS_H
#define DISTOPT_RT_ELEMENTS_H

#include "distopt_rt.h"

#include <cstddef>
#include <cstdint>

namespace distopt::rt {

size_t elementSize(distopt_rt_dtype type);
bool isFloat(distopt_rt_dtype type);
bool isValid(distopt_rt_dtype type);
bool isValid(distopt_rt_reduction op);
const char *name(distopt_rt_dtype type);
const char *name(distopt_rt_reduction op);

/// How a chunk's local contribution enters, and how the result leaves.
struct Combine {
  distopt_rt_reduction op;
  double localScale = 1.0;    // premul_sum: scale * local
  double resultDivisor = 1.0; // avg, on the last step: result / size
  double wireScale = 1.0;     // premul_sum: scale * received, when a peer
                              // sent its input unscaled (f32/f64 only)
};

/// out[i] = combine(wire[i], local[i]) for n elements: `wire` holds what a
/// peer sent, in `wireType`; `local` and `out` are in `type` (`out` may alias
/// `local`). `wire` null means "nothing received yet" (the first
/// contribution: out = scaled local).
void combineChunk(const void *wire, distopt_rt_dtype wireType,
                  const void *local, void *out, int64_t n,
                  distopt_rt_dtype type, const Combine &combine);

/// Converts n elements between types (identical types: a copy).
void convert(const void *in, distopt_rt_dtype inType, void *out,
             distopt_rt_dtype outType, int64_t n);

} // namespace distopt::rt

#endif // DISTOPT_RT_ELEMENTS_H
