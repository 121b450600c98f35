//===- Run.h - distopt-run over the host step library -----------*- C++ -*-===//
//
// distopt-run is a client of the host step library (runtime/distopt_step.h)
// like any training program: the library loads the step, gives it its
// buffers, runs it and saves checkpoints; distopt-run feeds synthetic
// parameters and gradients (Fills.cpp) and checks and reports the run
// (Report.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_TOOLS_DISTOPT_RUN_RUN_H
#define DISTOPT_TOOLS_DISTOPT_RUN_RUN_H

#include "distopt_step.h"

#include <cstdint>
#include <string>
#include <vector>

namespace distopt::run {

/// Prints `message` naming this rank (once) and ends every rank of the run.
[[noreturn]] void die(const std::string &message);
/// die() with the runtime's last error unless `status` is OK.
void check(distopt_rt_status status, const char *what);

/// A step running in a session, with its interface as the library
/// describes it.
struct Run {
  distopt_step *step = nullptr;
  distopt_session *session = nullptr;
  int64_t rank = 0, size = 1;
  std::vector<distopt_step_value> args, results;
  std::vector<distopt_step_tensor> tensors;
  /// Per step run: its time in seconds; the loss, where the step has one.
  std::vector<double> times, losses;
  // Kernels launched by the last step (steps compiled for cuda).
  uint64_t launches = 0;
  /// Fills' buffers, kept from step to step: fresh ones of a large
  /// gradient's size each step cost page faults that slow the step too.
  std::vector<double> fillValues;
  std::vector<char> fillBytes;
  /// The last step's other scalar results (a gradient norm, a loss scale),
  /// labelled by name, role or position.
  std::vector<std::pair<std::string, double>> scalars;

  void describe();
  distopt_rt_comm *comm() const { return distopt_session_comm(session); }
};

// Fills.cpp: the synthetic inputs (docs/step-abi.md).

/// Parameters and main parameters: a pattern per tensor, the same on every
/// rank, written into whatever part of it this rank holds.
void fillParameters(Run &run);
/// Gradients of step `step` (1-based): a pattern per tensor and step,
/// different per rank, averaging to the same values at any world size.
/// With `overflow`, the first gradient's first element is an infinity (a
/// loss-scaling overflow on this rank). `micro`: the micro-batch, under
/// gradient accumulation (each gets its own values; 0 is the last).
void fillGradients(Run &run, int64_t step, bool overflow = false,
                   int64_t micro = 0);
/// The elements of a floating-point buffer that are inf or NaN.
int64_t countNonFinite(const char *dtype, const void *data, int64_t numel);
/// FNV-1a of `bytes` bytes.
uint64_t hashBytes(const void *data, size_t bytes);

// Report.cpp: the checks after the run.

/// Every rank compares the hash of each replicated parameter with the
/// others'; rank 0 names those that differ (and prints each hash with
/// `printHashes`). Returns {tensors compared, tensors that differ}.
std::pair<int64_t, int64_t> compareReplicas(Run &run, bool printHashes);
/// Rank 0 prints every parameter, shards gathered, as the bit patterns of
/// its elements: "param NAME: b0 b1 ...", signed integers of the width.
void printParameterBits(Run &run);
/// The parameter elements that are inf or NaN on any rank.
int64_t countNonFiniteParameters(Run &run);
/// Rank 0 prints the most memory any rank holds, by role, and its peak.
void printMemory(Run &run);

} // namespace distopt::run

#endif // DISTOPT_TOOLS_DISTOPT_RUN_RUN_H
