//===- Threads.cpp - threads inside a rank --------------------------------===//
//
// A CPU step runs its large element-wise loops as OpenMP work-sharing loops
// (--distopt-parallelize-loops); the runtime splits its own large
// element-wise passes (combining received chunks, wire conversions) the
// same way. How many threads share them is the session's choice, set on
// the thread that runs the step just before it runs: OpenMP's thread count
// is a per-thread setting, and so is the runtime's.
//
// The default gives each rank its share of the cores this process may run
// on: ranks on one node under mpirun see the same cores, and two ranks each
// running two threads on two cores would only take turns.
//
//===----------------------------------------------------------------------===//

#include "Threads.h"

#include <algorithm>
#include <cstdlib>
#include <sched.h>
#include <thread>
#include <vector>

#ifdef DISTOPT_RT_HAVE_OPENMP
extern "C" void omp_set_num_threads(int);
#endif

namespace {

/// Elements below which a pass stays on one thread: starting a thread
/// costs tens of microseconds, the time to stream about a megabyte.
constexpr int64_t kParallelElements = 1 << 18;

/// This thread's count (useThreads); 1 until a session sets it.
thread_local int64_t threadsOfThisThread = 1;

/// Ranks on this node, as the launcher tells them (OpenMPI, MPICH, Slurm);
/// 1 when no launcher says.
int64_t ranksOnThisNode() {
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                           "SLURM_NTASKS_PER_NODE"}) {
    if (const char *text = std::getenv(name)) {
      long value = std::strtol(text, nullptr, 10);
      if (value > 0)
        return value;
    }
  }
  return 1;
}

/// Cores this process may run on (its affinity mask).
int64_t coresOfThisProcess() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    return 1;
  return std::max(1, CPU_COUNT(&set));
}

} // namespace

int64_t distopt::rt::defaultThreads() {
  if (const char *text = std::getenv("DISTOPT_THREADS")) {
    long value = std::strtol(text, nullptr, 10);
    if (value > 0)
      return value;
  }
  return std::max<int64_t>(1, coresOfThisProcess() / ranksOnThisNode());
}

std::string distopt::rt::resolveThreads(int64_t requested, int64_t &threads) {
  if (requested < 0)
    return "the number of threads must be positive (0: the default), not " +
           std::to_string(requested);
  threads = requested > 0 ? requested : defaultThreads();
  if (threads <= kMaxThreads)
    return "";
  return std::string(requested > 0 ? "the number of threads"
                                   : "DISTOPT_THREADS") +
         " must be at most " + std::to_string(kMaxThreads) + ", not " +
         std::to_string(threads);
}

void distopt::rt::useThreads(int64_t threads) {
  threadsOfThisThread = std::max<int64_t>(1, threads);
#ifdef DISTOPT_RT_HAVE_OPENMP
  omp_set_num_threads(static_cast<int>(threadsOfThisThread));
#endif
}

int64_t distopt::rt::currentThreads() { return threadsOfThisThread; }

void distopt::rt::parallelFor(
    int64_t count, const std::function<void(int64_t, int64_t)> &body) {
  int64_t parts =
      std::min(threadsOfThisThread, count / (kParallelElements / 2));
  if (parts <= 1) { // below kParallelElements, or one thread
    body(0, count);
    return;
  }
  auto begin = [&](int64_t part) {
    return part == parts ? count : (count * part / parts) & ~int64_t(15);
  };
  std::vector<std::thread> helpers;
  helpers.reserve(parts - 1);
  for (int64_t part = 1; part < parts; ++part)
    helpers.emplace_back(body, begin(part), begin(part + 1));
  body(0, begin(1));
  for (std::thread &helper : helpers)
    helper.join();
}
