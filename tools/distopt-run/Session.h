//===- Session.h - a loaded step and the buffers of its run -----*- C++ -*-===//
//
// What distopt-run holds while it runs a step: the step's entry point and
// interface, the communicator, a host buffer per argument (mirrored on the
// device for a CUDA step), and where each result goes back. Session.cpp
// builds it, runs one step at a time and frees it; distopt-run.cpp drives
// it and reports.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_TOOLS_DISTOPT_RUN_SESSION_H
#define DISTOPT_TOOLS_DISTOPT_RUN_SESSION_H

#include "Driver.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace distopt::run {

/// For a step compiled for CUDA: a device buffer for each tensor argument.
/// The host buffers stay the driver's copies (filled, checkpointed, hashed);
/// they are uploaded when the host writes them and downloaded at the end.
struct DeviceMirror {
  bool enabled = false;
  /// Per argument: the data the step is handed, and the allocation it lies
  /// in (a result may be a view into a buffer the step allocated).
  std::vector<void *> buffers, bases;

  void upload(size_t i, const Slot &slot, const Buffer &host);
  void download(size_t i, const Slot &slot, Buffer &host);
  /// Frees each allocation in `allocations` (once) unless an argument still
  /// lies in it.
  void release(std::vector<void *> allocations);
};

/// A step loaded from a library distopt-compile wrote.
struct LoadedStep {
  void (*entry)(void **) = nullptr; // distopt_step_packed
  step::Interface abi;
};

/// Loads `library`; prints why and returns false if it cannot.
bool loadStep(const std::string &library, LoadedStep &step);

struct Session {
  LoadedStep step;
  distopt_rt_comm *comm = nullptr; // the run's world, host buffers
  DeviceMirror device;
  double lr = 0;
  std::vector<Slot> args, results;
  /// Per argument, its host buffer; per result, the argument it replaces
  /// (SIZE_MAX for one that replaces none: a loss).
  std::vector<Buffer> buffers;
  std::vector<size_t> resultArg;
  /// Per step run: its time in seconds; the loss, where the step has one.
  std::vector<double> times, losses;

  /// Starts the communicator, checks that every rank runs the same step,
  /// allocates the arguments and fills parameters and seeded state.
  void open(LoadedStep loaded, double lrOverride, bool lrGiven);
  /// Copies every tensor argument to the device (a CUDA step).
  void upload();
  /// Fills the gradients of step `step` (1-based), runs it and feeds each
  /// result back to its argument.
  void run(int64_t step);
  /// Copies every tensor argument back from the device (a CUDA step).
  void download();
  /// Frees the buffers.
  void close();

private:
  void placeResults(const std::vector<int64_t> &resultStorage);
};

/// Ranks running different compiled steps would issue different collectives
/// and hang or compute garbage: every rank compares the fingerprint of its
/// step's collective sequence (distopt-compile) with the others' first.
void checkSameCollectives(distopt_rt_comm *comm, const step::Interface &abi);

// After the run (Report.cpp).

/// Every rank compares the hash of each replicated parameter tensor with the
/// others'; rank 0 names those that differ (and prints each hash with
/// `printHashes`). Returns {tensors compared, tensors that differ}.
std::pair<int64_t, int64_t> compareReplicas(const Session &session,
                                            bool printHashes);
/// Rank 0 prints every parameter (role param), sharded ones gathered, as
/// the bit patterns of its elements: "param NAME: b0 b1 ...", each a signed
/// integer of the element's width.
void printParameterBits(const Session &session);
/// The parameter elements that are inf or NaN on any rank (rank 0 names
/// the tensors of its own).
int64_t countNonFiniteParameters(const Session &session);
/// Rank 0 prints the most memory any rank holds, by role, and its peak.
void printMemory(const Session &session);

} // namespace distopt::run

#endif // DISTOPT_TOOLS_DISTOPT_RUN_SESSION_H
