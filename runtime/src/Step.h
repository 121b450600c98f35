//===- Step.h - the host step library's loaded steps and sessions -*- C++ -*-=//
//
// What distopt_step.h's handles hold: a loaded step (its entry point, its
// validated interface and the logical tensors that interface describes),
// and a session (the step on a communicator, a buffer per argument, the
// learning rate and the steps done). Step.cpp loads and describes steps,
// Session.cpp creates sessions and runs them, SessionTensors.cpp maps
// logical tensors to and from this rank's buffers and checkpoints.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_RT_STEP_H
#define DISTOPT_RT_STEP_H

#include "Comm.h"
#include "distopt/Checkpoint/Checkpoint.h"
#include "distopt/StepInterface/StepInterface.h"
#include "distopt_step.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace distopt::rt {

/// A tensor as a model and a checkpoint name it (a parameter "w", its state
/// "w.exp_avg", its gradient), wherever the step's arguments hold it: a
/// whole argument, or an entry of a flat one (a gradient bucket, a flat
/// parameter, a ZeRO shard, greedy ownership).
struct LogicalTensor {
  step::Role role;
  std::string name;
  const step::DType *dtype;
  std::vector<int64_t> shape;
  int64_t numel;
  size_t arg;     // the argument that holds it
  int64_t entry;  // its layout entry there, or -1 for the whole argument
  int64_t offset; // in elements, in the whole flat buffer
  int64_t owner;  // greedy: the rank holding it; -1 otherwise
  bool perRank;   // a copy per rank (PowerSGD's error feedback)
  bool rankMean;  // ... standing for their mean (Dion's low-rank sync)
  bool savedPerRank() const { return perRank && !rankMean; }
  size_t bytes() const { return numel * dtype->bytes; }
};

/// The C strings and arrays distopt_step_value points at, per value.
struct ValueView {
  std::string role, init;
  std::vector<int64_t> shape;
};

/// Whether a flat argument's entries are all held whole by every rank (a
/// gradient bucket, a flat parameter): neither a flat shard nor greedy.
bool isReplicatedLayout(const step::Value &value);

/// A session starts or stops using `step`; the last to stop frees a step
/// already closed.
void retainStep(distopt_step *step);
void releaseStep(distopt_step *step);

/// Calls `fn(first, at, count)` for the elements [first, first + count) of
/// `t` that this rank holds, at [at, at + count) of its argument's buffer
/// (in elements).
template <typename Fn>
void forEachLocalPart(const LogicalTensor &t, const step::Value &arg,
                      int64_t rank, Fn fn) {
  if (t.entry < 0) {
    fn(0, 0, t.numel);
    return;
  }
  if (!arg.shardOf) {
    if (t.owner < 0 || t.owner == rank)
      fn(0, t.offset, t.numel);
    return;
  }
  int64_t size = arg.numel();
  int64_t begin = rank % arg.shardParts() * size;
  int64_t lo = std::max(t.offset, begin);
  int64_t hi = std::min(t.offset + t.numel, begin + size);
  if (lo < hi)
    fn(lo - t.offset, lo - begin, hi - lo);
}

/// The buffers a session gave up (destroyed, or an argument bound again)
/// while a host still holds views of them (distopt_session_retain_buffers):
/// freed with the last reference.
class BufferKeeper {
public:
  explicit BufferKeeper(bool device) : device(device) {}
  ~BufferKeeper();
  BufferKeeper(const BufferKeeper &) = delete;
  BufferKeeper &operator=(const BufferKeeper &) = delete;
  /// Frees `buffer` now, or with the last reference when one is held.
  static void release(const std::shared_ptr<BufferKeeper> &keeper,
                      void *buffer);

private:
  bool device;
  std::vector<void *> kept;
};

/// A session's communication thread: it runs the reduce entry points of a
/// split step a driver starts (distopt_session_start_entry) in order, while
/// the driver's thread goes on with its backward pass; wait() returns when
/// all have run, with the first failure's status and message.
class CommThread {
public:
  CommThread() = default;
  CommThread(const CommThread &) = delete;
  CommThread &operator=(const CommThread &) = delete;
  ~CommThread();
  void start(distopt_session *session, size_t entry);
  distopt_rt_status wait();
  /// Waits until the first `count` entries started have finished (they
  /// run in the order started); a failure is returned as wait() returns it.
  distopt_rt_status waitFor(int64_t count);
  int64_t startedCount();
  int64_t finishedCount();
  /// The entries started and not finished (running or queued).
  std::vector<size_t> inFlight();

private:
  void serve(distopt_session *session);
  std::mutex mutex;
  std::condition_variable wake, done;
  std::deque<size_t> queue;
  std::optional<size_t> running;
  size_t pending = 0;                // started and not finished
  int64_t started = 0, finished = 0; // since the session was created
  bool stopping = false;
  distopt_rt_status status = DISTOPT_RT_OK;
  std::string error;
  std::thread worker;
};

/// A packed entry point (distopt_step_packed): returns 0, or the status of
/// the runtime call that failed.
using PackedEntry = int32_t (*)(void **);

} // namespace distopt::rt

struct distopt_session_buffers {
  std::shared_ptr<distopt::rt::BufferKeeper> keeper;
};

struct distopt_step {
  void *handle = nullptr;
  distopt::rt::PackedEntry entry = nullptr; // distopt_step_packed
  /// A split step's entry points, as abi.entries lists them
  /// (distopt_step_packed_<name>).
  std::vector<distopt::rt::PackedEntry> entries;
  std::string json;
  distopt::step::Interface abi;
  std::vector<distopt::rt::LogicalTensor> tensors;
  std::vector<distopt::rt::ValueView> argViews, resultViews;
  /// A step closed while sessions still use it is freed with the last one.
  std::mutex lifetime;
  int64_t sessions = 0;
  bool closed = false;

  ~distopt_step();

  /// The logical tensor (role, name), or null.
  const distopt::rt::LogicalTensor *find(std::string_view role,
                                         std::string_view name) const;
};

struct distopt_session {
  distopt_step *step = nullptr;
  /// The host communicator (checks, checkpoints) and the one the step's
  /// collectives run on (the same but for a CUDA step: NCCL).
  distopt_rt_comm *comm = nullptr, *stepComm = nullptr;
  bool ownsComm = false; // the step's is the process's world, or `comm`
  bool device = false;   // buffers in device memory (a CUDA step)
  int64_t rank = 0, size = 1;
  double lr = 1e-3;
  uint64_t seed = 42;
  int64_t threads = 1; // of the step's parallel loops (CPU)
  int64_t stepsDone = 0;
  /// A step has run (skipped or not): its scalars can be read.
  bool ran = false;
  /// accumulate() calls since the last step (a step compiled with
  /// grad_accumulation K takes exactly K - 1).
  int64_t accumulated = 0;
  double lastSeconds = 0;
  /// Per argument: the buffer the step reads and updates, and whether the
  /// session allocated it.
  std::vector<void *> data;
  std::vector<bool> owned;
  /// Where the owned buffers go when the session gives them up.
  std::shared_ptr<distopt::rt::BufferKeeper> keeper;
  /// Per result: its value as a double, for scalars.
  std::vector<double> scalars;
  /// For the step's results and each entry point's: the argument each
  /// result updates (matchResults), found once rather than every step.
  std::unordered_map<const std::vector<distopt::step::Value> *,
                     std::vector<size_t>>
      resultArgs;
  /// Per argument: the value of scalar state (a loss scale, its growth
  /// tracker), fed back from the result of the same role and name, and of
  /// each hyperparameter.
  std::vector<double> scalarState;
  /// A step, or a collective of a save, load or read, failed: the
  /// communicator may be unusable, the buffers partly updated.
  bool broken = false;
  /// Gradient accumulation: (accumulator argument, gradient argument).
  std::vector<std::pair<size_t, size_t>> accumulators;
  /// Per argument: the program wrote it, or took a view or bound memory it
  /// may write through (main parameters it did not write start from their
  /// parameters at the first step).
  std::vector<bool> programWrote;
  bool mainParamsStarted = false;
  /// The reduce entry points started and not yet waited for.
  distopt::rt::CommThread comms;

  /// Records `message` as the last error, naming this rank once (as the
  /// runtime's own messages do), and returns `status`.
  distopt_rt_status error(distopt_rt_status status,
                          const std::string &message) const {
    if (message.rfind("rank ", 0) == 0)
      return distopt::rt::fail(status, message);
    return distopt::rt::fail(status,
                             "rank " + std::to_string(rank) + ": " + message);
  }
  distopt_rt_status invalid(const std::string &message) const {
    return error(DISTOPT_RT_INVALID_ARGUMENT, message);
  }
  /// The status of a collective the session ran: one that failed other
  /// than for an argument (a timeout, a dead peer, a mismatch) breaks the
  /// session, as a failed step does.
  distopt_rt_status collective(distopt_rt_status status) {
    if (status != DISTOPT_RT_OK && status != DISTOPT_RT_INVALID_ARGUMENT)
      broken = true;
    return status;
  }

  ~distopt_session();
};

namespace distopt::rt {
/// Sets the learning rate of the next steps: the `lr` argument's, and every
/// group's rate among the hyperparameters (`<group>.lr`).
void setSessionRate(distopt_session *session, double lr);
/// Before the first step: each main parameter the program did not write is
/// its parameter's value in f32, as torch's fp32 main copy is made from
/// the model (never zero). Local: every rank fills the parts it holds.
distopt_rt_status startMainParams(distopt_session *session);
/// Which argument each of `results` (the step's, or an entry's) updates:
/// the one of the same role and name (SIZE_MAX: none, as for a loss).
distopt_rt_status matchResults(const step::Interface &abi,
                               const std::vector<step::Value> &results,
                               std::vector<size_t> &resultArg);
/// A standard normal draw for `v` from `seed`, the same on every rank
/// (PowerSGD's Q).
void drawNormal(const step::Value &v, void *out, uint64_t seed);
/// Whether argument `arg` may be left without a buffer
/// (distopt_session_release): a gathered parameter, or a gradient that a
/// reduce entry leaves reduced in another argument (a bucket a ZeRO-3
/// driver holds only around its unit's backward). In a step with gather
/// entries they start without one.
bool releasable(const step::Interface &abi, size_t arg);
/// An error naming the first argument without a buffer that `entry`
/// (null: the whole step) reads or writes; OK when there is none.
distopt_rt_status checkBuffers(distopt_session *session,
                               const step::Entry *entry);
/// An error when an entry started and not finished reads or writes
/// argument `arg` (which `what` would change under it).
distopt_rt_status requireIdle(distopt_session *session, size_t arg,
                              const std::string &what);
/// An error when argument `arg` has no buffer (released), for `what`.
distopt_rt_status requireBuffer(distopt_session *session, size_t arg,
                                const std::string &what);
} // namespace distopt::rt

#endif // DISTOPT_RT_STEP_H
