//===- Threads.h - threads inside a rank -----------------------*- C++ -*-===//
//
// How many threads a rank's work runs on: a CPU step's parallel loops
// (OpenMP) and the runtime's own element-wise passes over large buffers
// (combining chunks in reductions, converting to and from the wire type).
// The count belongs to the thread that runs the step, as OpenMP's does.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_RT_THREADS_H
#define DISTOPT_RT_THREADS_H

#include <cstdint>
#include <functional>
#include <string>

namespace distopt::rt {

/// The most threads a rank may ask for: more than the hardware threads of
/// a two-socket server today, and few enough that the OS grants them.
/// Beyond what the OS grants, OpenMP aborts the process when the first
/// parallel loop starts.
constexpr int64_t kMaxThreads = 1024;

/// The threads a rank gets by default: DISTOPT_THREADS, else this process's
/// cores divided among the ranks on its node (at least one).
int64_t defaultThreads();

/// Sets `threads` to what a session asking for `requested` runs on (0: the
/// default); returns why that cannot be (negative, or above kMaxThreads,
/// naming the option or DISTOPT_THREADS), or "".
std::string resolveThreads(int64_t requested, int64_t &threads);

/// Gives the work this thread runs next (a step, its collectives)
/// `threads` threads.
void useThreads(int64_t threads);

/// This thread's count, as useThreads set it (1 before): what a collective
/// started here takes along to the communicator's worker thread.
int64_t currentThreads();

/// Runs body(begin, end) over contiguous parts of [0, count) that cover it,
/// on this thread's share of threads when count is large enough to repay
/// starting them, else in one call. Parts start at multiples of 16.
void parallelFor(int64_t count,
                 const std::function<void(int64_t, int64_t)> &body);

} // namespace distopt::rt

#endif // DISTOPT_RT_THREADS_H
