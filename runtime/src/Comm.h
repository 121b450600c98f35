//===- Comm.h - communicators, collectives, requests ------------*- C++ -*-===//
//
// A communicator is a Transport (point-to-point exchange with a deadline:
// MPI, or nothing for a single process) plus the collective algorithms built
// on it, and a worker thread that runs asynchronous collectives in the order
// they were started.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_RT_COMM_H
#define DISTOPT_RT_COMM_H

#include "Elements.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace distopt::rt {

/// DISTOPT_RT_TIMEOUT seconds, or 300.
double defaultTimeout();
/// The longest timeout (about 31 years): a deadline further away would
/// overflow the clock's nanoseconds.
constexpr double kMaxTimeoutSeconds = 1e9;
/// "" if `seconds` is a valid timeout, else why not (naming `what`).
std::string checkTimeout(double seconds, const std::string &what);
/// `value` as %g prints it ("nan", "-0.5", "inf", "1e+300").
std::string formatNumber(double value);

/// Records `message` as this thread's last error and returns `status`.
distopt_rt_status fail(distopt_rt_status status, std::string message);
const std::string &lastError();

/// Names an operation for error messages ("rank 0 of 2: all_reduce of 1024
/// f32 (sum) (ring step 1 of 2)"), formatted only when one is written: at
/// small sizes, formatting it on every call cost as much as the transfer.
class What {
public:
  /// From a callable returning the text; it must outlive this object.
  template <typename Describe>
  What(const Describe &describe)
      : object(&describe), call([](const void *o) -> std::string {
          return (*static_cast<const Describe *>(o))();
        }) {}
  std::string str() const { return call(object); }

private:
  const void *object;
  std::string (*call)(const void *);
};

/// The host library's operation a collective belongs to: a rank that runs
/// a step while another saves a checkpoint is an error, not mixed data.
enum class Operation : uint8_t {
  Direct, // called through distopt_rt.h, outside any session operation
  Create, // distopt_session_create: its checks and groups
  Step,   // distopt_session_run
  Save,
  Load,
  Read, // distopt_session_read_tensor of a tensor no rank holds whole
};
const char *name(Operation operation);

/// The operation this thread's collectives belong to.
Operation currentOperation();
/// Makes `operation` this thread's for the scope's life (the session's
/// entry points open one).
class OperationScope {
public:
  explicit OperationScope(Operation operation);
  ~OperationScope();
  OperationScope(const OperationScope &) = delete;
  OperationScope &operator=(const OperationScope &) = delete;

private:
  Operation saved;
};

/// Whether this thread's waits for collectives should let others run between
/// polls (the session's communication thread, while the program's backward
/// pass computes).
bool backgroundWaits();
/// Makes this thread's waits background ones for the scope's life.
class BackgroundWaitScope {
public:
  BackgroundWaitScope();
  ~BackgroundWaitScope();
  BackgroundWaitScope(const BackgroundWaitScope &) = delete;
  BackgroundWaitScope &operator=(const BackgroundWaitScope &) = delete;

private:
  bool saved;
};

/// What every message of a collective belongs to: its sequence number on
/// its communicator, its kind and its operation. MpiTransport puts it in
/// the MPI tag, so that a message of another collective is never taken for
/// this one's, and a rank that receives one fails at once.
struct Stamp {
  /// Kinds beyond Collective::Kind: a split's agreement, and the exchanges
  /// of a transport before its first collective (NCCL's bootstrap).
  enum : uint8_t { kSplitAgreement = 5, kBootstrap = 6 };
  uint64_t sequence = 0;
  uint8_t kind = kBootstrap;
  Operation operation = Operation::Direct;
  /// "all_reduce #12 of a step".
  std::string str() const;
};

/// Point-to-point messages between the ranks of a run.
class Transport {
public:
  virtual ~Transport() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t size() const = 0;
  /// Sends `sendBytes` to `to` while receiving `recvBytes` from `from`
  /// (either may be 0 bytes / -1 rank to skip), failing with
  /// DISTOPT_RT_TIMEOUT after `timeout` seconds. `what` names the operation
  /// for messages.
  virtual distopt_rt_status exchange(const void *send, size_t sendBytes,
                                     int64_t to, void *recv, size_t recvBytes,
                                     int64_t from, const What &what) = 0;
  /// A transport over this one's ranks that pass the same `color`, ordered
  /// by `key` (then by rank here). Every rank of this transport calls it,
  /// between the same two exchanges. Null, with the last error set in
  /// `status`, on failure.
  virtual std::unique_ptr<Transport> split(int64_t color, int64_t key,
                                           distopt_rt_status *status) = 0;
  /// "rank 2", or "rank 2 (world rank 5)" on a transport split from the
  /// world: errors name a peer both ways.
  std::string peer(int64_t rank) const;
  double timeout = 60;
  /// The collective the next exchanges belong to (set by the Communicator
  /// before each): every rank's messages of one collective carry the same.
  Stamp stamp;
  /// The world rank of each rank of a split transport (empty: the world).
  std::vector<int64_t> worldRanks;
};

std::unique_ptr<Transport> createSingleTransport();
/// Ends the whole run now: MPI_Abort when MPI is up, else exit(1).
[[noreturn]] void abortRun();
/// Null (with the last error set) when MPI is not built in or fails.
/// Over a duplicate of `*parent` (an MPI_Comm the caller owns; MPI must be
/// initialised), or of MPI_COMM_WORLD when `parent` is null (initialising
/// MPI if needed).
std::unique_ptr<Transport> createMpiTransport(distopt_rt_status *status,
                                              const void *parent = nullptr);

/// Arguments of one collective call.
struct Collective {
  enum Kind { AllReduce, ReduceScatter, AllGather, Broadcast, Reduce } kind;
  const void *send;
  void *recv;
  int64_t count; // all_reduce/broadcast/reduce: elements; reduce_scatter:
                 // per rank received; all_gather: per rank sent
  distopt_rt_dtype type;
  distopt_rt_reduction op = DISTOPT_RT_SUM;
  double scale = 1.0;
  int64_t root = 0;
  distopt_rt_dtype wire;
  /// Threads for its element-wise passes when the worker thread runs it:
  /// the share of the thread that started it (set by Communicator::start).
  int64_t threads = 1;
  /// The operation of the thread that started it (set by run and start).
  Operation operation = Operation::Direct;
};

const char *name(Collective::Kind kind);

/// Collectives on device buffers, run by a library such as NCCL.
class DeviceCollectives {
public:
  virtual ~DeviceCollectives() = default;
  /// Runs `c` to completion or fails naming `what` (rank, operation, sizes),
  /// with DISTOPT_RT_TIMEOUT after the communicator's timeout.
  virtual distopt_rt_status execute(const Collective &c, const What &what) = 0;
  /// The same kind of collectives over the ranks of `part` (a group split
  /// from this one's ranks), or null with the last error set in `status`.
  virtual std::unique_ptr<DeviceCollectives>
  over(Transport &part, distopt_rt_status *status) = 0;
};

/// NCCL over the ranks of `bootstrap`, which carries its unique id. Null
/// (with the last error set in `status`) when CUDA or NCCL is unavailable.
std::unique_ptr<DeviceCollectives>
createNcclCollectives(Transport &bootstrap, distopt_rt_status *status);
/// The host-staged backend over the ranks of `bootstrap`
/// (StagedCollectives.cpp). Null (with the last error set in `status`)
/// without CUDA.
std::unique_ptr<DeviceCollectives>
createStagedCollectives(Transport &bootstrap, distopt_rt_status *status);

struct Request {
  std::mutex mutex;
  std::condition_variable done;
  bool finished = false;
  distopt_rt_status status = DISTOPT_RT_OK;
  std::string error;
};

class Communicator {
public:
  /// With `device`, collectives take device buffers and run there; the
  /// transport only bootstrapped it.
  Communicator(std::unique_ptr<Transport> transport,
               std::unique_ptr<DeviceCollectives> device = nullptr);
  ~Communicator();

  int64_t rank() const { return transport->rank(); }
  int64_t size() const { return transport->size(); }
  /// Collectives take device buffers (nccl, host-staged).
  bool onDevice() const { return device != nullptr; }

  /// A communicator over the ranks that pass the same `color`, ordered by
  /// `key`, after the collectives started here have completed; `name` names
  /// it in error messages. Every rank of this communicator calls it; when
  /// any passes a non-empty `invalid` (why its part is wrong), or a color or
  /// key out of range, every rank fails with DISTOPT_RT_INVALID_ARGUMENT.
  std::unique_ptr<Communicator> split(int64_t color, int64_t key,
                                      std::string name, std::string invalid,
                                      distopt_rt_status *status);

  /// Runs `c` now, after any started requests (every rank sees one order).
  distopt_rt_status run(const Collective &c);
  /// Starts `c` on the worker thread.
  std::shared_ptr<Request> start(const Collective &c);
  static distopt_rt_status wait(const std::shared_ptr<Request> &request);
  /// Waits until no collective started here is queued or running, or
  /// `deadline` passes; whether none is.
  bool waitIdle(std::chrono::steady_clock::time_point deadline);

private:
  distopt_rt_status execute(const Collective &c);
  distopt_rt_status allReduce(const Collective &c, const What &what);
  /// Small all-reduces on a power-of-two number of ranks.
  distopt_rt_status recursiveDoublingAllReduce(const Collective &c,
                                               const What &what);
  /// Ring reduce-scatter of `count` elements of `send` into `work`, which
  /// ends holding rank r's reduced chunk r (chunk bounds from chunkBegin).
  distopt_rt_status ringReduceScatter(const Collective &c, int64_t count,
                                      void *work, const What &what);
  /// Ring all-gather: each rank's chunk r of `buffer` goes to every rank.
  distopt_rt_status ringAllGather(void *buffer, int64_t count,
                                  distopt_rt_dtype type, distopt_rt_dtype wire,
                                  const What &what);
  distopt_rt_status broadcast(const Collective &c, const What &what);
  distopt_rt_status reduce(const Collective &c, const What &what);
  /// Elements per slice of a broadcast's or a reduce's chain.
  int64_t chainSlice(int64_t count, size_t elementBytes) const;
  int64_t chunkBegin(int64_t count, int64_t chunk) const {
    return count * chunk / size();
  }
  void workerLoop();

  /// Scratch memory reused across collectives (grown, never shrunk, never
  /// cleared): fresh buffers would cost a page fault per page every call.
  char *scratch(int index, size_t bytes);

  std::unique_ptr<Transport> transport;
  std::unique_ptr<DeviceCollectives> device;
  /// The group's name for messages ("" for the world).
  std::string groupName;
  std::vector<char> scratchBuffers[3];
  /// Collectives run here so far, splits' agreements included (each
  /// rank's count: the Stamp of the next one). 0 is the bootstrap's.
  uint64_t sequence = 1;
  bool failed = false;
  std::string failure;

  // Started collectives, run in order by the worker thread.
  std::mutex queueMutex;
  std::condition_variable queueChanged;
  std::deque<std::pair<Collective, std::shared_ptr<Request>>> queue;
  bool busy = false;
  bool stopping = false;
  std::mutex executeMutex; // one collective at a time on the transport
  std::thread worker;
};

} // namespace distopt::rt

struct distopt_rt_comm {
  std::unique_ptr<distopt::rt::Communicator> impl;
  /// The process groups of compiled steps split from this communicator
  /// (distopt_rt_group), by name, then layout; freed before `impl`.
  struct Group {
    std::vector<int64_t> layout;
    std::unique_ptr<distopt_rt_comm> comm;
  };
  std::mutex groupsMutex;
  std::map<std::string, std::vector<Group>> groups;
};

namespace distopt::rt {
/// Waits up to `seconds` until no collective started on `comm` or on one
/// of its process groups is queued or running (and so may still read or
/// write its buffers); whether none is.
bool waitForStartedCollectives(distopt_rt_comm *comm, double seconds);
} // namespace distopt::rt

struct distopt_rt_request {
  std::shared_ptr<distopt::rt::Request> impl;
};

#endif // DISTOPT_RT_COMM_H
