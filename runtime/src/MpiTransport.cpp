//===- MpiTransport.cpp - point-to-point over MPI ---------------*- C++ -*-===//
//
// Non-blocking sends and receives polled against a deadline, so that a dead
// or stuck peer is an error naming it rather than a hang. A peer process on
// the same machine that has exited (killed, crashed) fails the collective
// within milliseconds: while it waits, the transport checks that the
// processes of its local peers still run. A peer on another machine, or one
// alive but stuck, is caught by the deadline. MPI is initialised
// (MPI_THREAD_SERIALIZED: one collective at a time, from the caller or the
// communicator's worker thread) unless the application already did.
//
//===----------------------------------------------------------------------===//

#include "Comm.h"

#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

#ifdef DISTOPT_RT_HAVE_MPI
#include <mpi.h>
#endif

namespace distopt::rt {

#ifdef DISTOPT_RT_HAVE_MPI
namespace {

std::mutex initMutex;
/// Held around every MPI call. Under MPI_THREAD_SERIALIZED no two threads
/// may be in MPI at once, and each communicator (the world's, each group's)
/// has a worker thread. The exchanges of collectives hold it per call,
/// never across a wait for a peer, so the collectives of different groups
/// progress together; creating and splitting communicators (MPI_Comm_dup,
/// MPI_Comm_split, MPI_Allgather) hold it throughout, so every rank must
/// create and split its communicators in the same order, from one thread
/// at a time (a split's ranks first agree, with a timeout, in
/// Communicator::split).
std::mutex callMutex;
int liveTransports = 0;
bool weInitialised = false;

/// Messages are split so that every MPI count fits in an int.
constexpr size_t kMaxMessageBytes = size_t(1) << 30;

std::string mpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, length);
}

/// Who a process is, as its peers on the same machine can check it: the
/// kernel's boot id and PID namespace (the same machine and PID space), its
/// PID and its start time (which a reused PID would not share).
struct ProcessIdentity {
  char bootId[40] = {};
  uint64_t pidNamespace = 0;
  int64_t pid = 0;
  uint64_t startTime = 0;
};

/// The start time (field 22 of /proc/PID/stat, in clock ticks) of `pid`;
/// 0 if it has no entry, or is a zombie (it has exited and awaits its
/// parent).
uint64_t startTimeOf(int64_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)),
                   std::istreambuf_iterator<char>());
  // The command may hold spaces and parentheses: fields follow the last ')'.
  size_t close = text.rfind(')');
  if (close == std::string::npos)
    return 0;
  std::istringstream fields(text.substr(close + 1));
  std::string state, field;
  fields >> state;
  if (state == "Z" || state == "X")
    return 0;
  for (int i = 4; i < 22 && fields >> field; ++i) {
  }
  uint64_t start = 0;
  fields >> start;
  return start;
}

ProcessIdentity thisProcess() {
  ProcessIdentity me;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string id;
  boot >> id;
  std::snprintf(me.bootId, sizeof(me.bootId), "%s", id.c_str());
  struct stat ns;
  if (::stat("/proc/self/ns/pid", &ns) == 0)
    me.pidNamespace = ns.st_ino;
  me.pid = ::getpid();
  me.startTime = startTimeOf(me.pid);
  return me;
}

class MpiTransport : public Transport {
public:
  MpiTransport(MPI_Comm comm, int rank, int size)
      : comm(comm), myRank(rank), mySize(size) {
    // Which ranks run on this machine, in this PID namespace, and as what.
    std::vector<ProcessIdentity> all(size);
    ProcessIdentity me = thisProcess();
    {
      std::lock_guard<std::mutex> lock(callMutex);
      MPI_Allgather(&me, sizeof(me), MPI_BYTE, all.data(), sizeof(me), MPI_BYTE,
                    comm);
    }
    for (int r = 0; r < size; ++r)
      if (r != rank && me.bootId[0] && me.startTime &&
          std::strncmp(all[r].bootId, me.bootId, sizeof(me.bootId)) == 0 &&
          all[r].pidNamespace == me.pidNamespace && all[r].startTime)
        localPeers.push_back({r, all[r].pid, all[r].startTime});
  }
  ~MpiTransport() override {
    // A host that owns MPI (mpi4py) may have finalised it before it frees
    // the last session: the communicator went with it.
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      std::lock_guard<std::mutex> lock(callMutex);
      MPI_Comm_free(&comm);
    }
    std::lock_guard<std::mutex> lock(initMutex);
    if (--liveTransports == 0 && weInitialised && !finalized)
      MPI_Finalize();
  }
  int64_t rank() const override { return myRank; }
  int64_t size() const override { return mySize; }

  distopt_rt_status exchange(const void *send, size_t sendBytes, int64_t to,
                             void *recv, size_t recvBytes, int64_t from,
                             const What &what) override {
    std::vector<MPI_Request> requests;
    size_t numSends = 0;
    std::unique_lock<std::mutex> lock(callMutex);
    auto post = [&](bool isSend, void *data, size_t bytes, int64_t peer) {
      for (size_t offset = 0; offset < bytes; offset += kMaxMessageBytes) {
        int piece =
            static_cast<int>(std::min(kMaxMessageBytes, bytes - offset));
        MPI_Request request;
        char *p = static_cast<char *>(data) + offset;
        int code =
            isSend ? MPI_Isend(p, piece, MPI_BYTE, peer, kTag, comm, &request)
                   : MPI_Irecv(p, piece, MPI_BYTE, peer, kTag, comm, &request);
        if (code != MPI_SUCCESS)
          return code;
        requests.push_back(request);
      }
      return MPI_SUCCESS;
    };
    // Receives first, so that a message finds its buffer waiting.
    int code = MPI_SUCCESS;
    if (recvBytes > 0)
      code = post(false, recv, recvBytes, from);
    size_t numRecvs = requests.size();
    if (code == MPI_SUCCESS && sendBytes > 0) {
      code = post(true, const_cast<void *>(send), sendBytes, to);
      numSends = requests.size() - numRecvs;
    }
    lock.unlock();
    if (code != MPI_SUCCESS)
      return fail(DISTOPT_RT_BACKEND_ERROR, what.str() + ": " + mpiError(code));
    return complete(requests, numRecvs, numSends, from, to, what);
  }

  std::unique_ptr<Transport> split(int64_t color, int64_t key,
                                   distopt_rt_status *status) override {
    if (color < 0 || color > INT_MAX || key < INT_MIN || key > INT_MAX) {
      *status =
          fail(DISTOPT_RT_INVALID_ARGUMENT,
               "splitting a communicator: color " + std::to_string(color) +
                   " or key " + std::to_string(key) + " out of range");
      return nullptr;
    }
    MPI_Comm part;
    int code, rank = 0, size = 0;
    std::vector<int64_t> partWorldRanks;
    {
      std::lock_guard<std::mutex> lock(callMutex);
      code = MPI_Comm_split(comm, static_cast<int>(color),
                            static_cast<int>(key), &part);
      if (code == MPI_SUCCESS) {
        MPI_Comm_set_errhandler(part, MPI_ERRORS_RETURN);
        MPI_Comm_rank(part, &rank);
        MPI_Comm_size(part, &size);
        // Which world rank each rank of the part is, for messages.
        int64_t mine = worldRanks.empty() ? myRank : worldRanks[myRank];
        partWorldRanks.resize(size);
        code = MPI_Allgather(&mine, 1, MPI_INT64_T, partWorldRanks.data(), 1,
                             MPI_INT64_T, part);
        if (code != MPI_SUCCESS)
          MPI_Comm_free(&part);
      }
    }
    if (code != MPI_SUCCESS) {
      *status = fail(DISTOPT_RT_BACKEND_ERROR,
                     "splitting the MPI communicator: " + mpiError(code));
      return nullptr;
    }
    {
      std::lock_guard<std::mutex> lock(initMutex);
      ++liveTransports;
    }
    auto result = std::make_unique<MpiTransport>(part, rank, size);
    result->worldRanks = std::move(partWorldRanks);
    *status = DISTOPT_RT_OK;
    return result;
  }

private:
  static constexpr int kTag = 7117;
  /// How often a waiting rank checks that its local peers still run.
  static constexpr std::chrono::milliseconds kLivenessPeriod{20};

  struct LocalPeer {
    int rank;
    int64_t pid;
    uint64_t startTime;
  };

  /// A local peer whose process has exited, or null. Its PID is gone (or a
  /// zombie, or reused by another process).
  const LocalPeer *deadPeer() const {
    for (const LocalPeer &peer : localPeers) {
      if (::kill(static_cast<pid_t>(peer.pid), 0) != 0 && errno == ESRCH)
        return &peer;
      if (startTimeOf(peer.pid) != peer.startTime)
        return &peer;
    }
    return nullptr;
  }

  /// Polls until every request completes or the deadline passes.
  distopt_rt_status complete(std::vector<MPI_Request> &requests,
                             size_t numRecvs, size_t numSends, int64_t from,
                             int64_t to, const What &what) {
    auto now = std::chrono::steady_clock::now();
    auto deadline = now + std::chrono::duration<double>(timeout);
    auto nextLivenessCheck = now + kLivenessPeriod;
    auto cancelAll = [&] {
      std::lock_guard<std::mutex> lock(callMutex);
      for (MPI_Request &request : requests)
        if (request != MPI_REQUEST_NULL)
          MPI_Cancel(&request);
    };
    for (unsigned spins = 0;; ++spins) {
      int done = 0;
      int code;
      {
        std::lock_guard<std::mutex> lock(callMutex);
        code = MPI_Testall(static_cast<int>(requests.size()), requests.data(),
                           &done, MPI_STATUSES_IGNORE);
      }
      if (code != MPI_SUCCESS)
        return fail(DISTOPT_RT_BACKEND_ERROR,
                    what.str() + ": " + mpiError(code));
      if (done)
        return DISTOPT_RT_OK;
      if ((spins & 1023) == 1023) {
        now = std::chrono::steady_clock::now();
        if (now > deadline)
          break;
        if (now > nextLivenessCheck) {
          nextLivenessCheck = now + kLivenessPeriod;
          // Any dead rank stops the collective: the others wait on it too.
          if (const LocalPeer *dead = deadPeer()) {
            cancelAll();
            std::ostringstream message;
            message << what.str() << ": " << peer(dead->rank) << " (process "
                    << dead->pid << " on this machine) has exited";
            return fail(DISTOPT_RT_PEER_DIED, message.str());
          }
        }
        std::this_thread::yield();
      }
    }
    // Which side is stuck: a receive that never came, or a send no one took.
    std::ostringstream message;
    message << what.str() << ": timed out after " << timeout << " s ";
    bool recvPending = false;
    for (size_t i = 0; i < numRecvs; ++i)
      recvPending |= requests[i] != MPI_REQUEST_NULL;
    if (recvPending)
      message << "waiting for data from " << peer(from);
    else
      message << "waiting for " << peer(to) << " to receive";
    cancelAll();
    return fail(DISTOPT_RT_TIMEOUT, message.str());
  }

  MPI_Comm comm;
  int myRank, mySize;
  std::vector<LocalPeer> localPeers;
};

} // namespace

std::unique_ptr<Transport> createMpiTransport(distopt_rt_status *status,
                                              const void *parent) {
  std::lock_guard<std::mutex> lock(initMutex);
  int initialised = 0, finalized = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalized);
  if (parent && (!initialised || finalized)) {
    *status = fail(DISTOPT_RT_INVALID_ARGUMENT,
                   "an MPI communicator was given but MPI is not initialised "
                   "(or already finalised)");
    return nullptr;
  }
  if (parent) {
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_SERIALIZED) {
      *status = fail(DISTOPT_RT_INVALID_ARGUMENT,
                     "MPI was initialised without MPI_THREAD_SERIALIZED; the "
                     "runtime's worker thread needs it");
      return nullptr;
    }
  }
  if (!initialised) {
    int provided = 0;
    int code =
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (code != MPI_SUCCESS) {
      *status = fail(DISTOPT_RT_BACKEND_ERROR,
                     "MPI_Init_thread failed: " + mpiError(code));
      return nullptr;
    }
    if (provided < MPI_THREAD_SERIALIZED) {
      *status = fail(DISTOPT_RT_BACKEND_ERROR,
                     "MPI does not provide MPI_THREAD_SERIALIZED");
      return nullptr;
    }
    weInitialised = true;
  }
  // Errors come back as codes, never as an abort inside MPI.
  MPI_Comm comm;
  int code, rank = 0, size = 0;
  {
    std::lock_guard<std::mutex> callLock(callMutex);
    code = MPI_Comm_dup(parent ? *static_cast<const MPI_Comm *>(parent)
                               : MPI_COMM_WORLD,
                        &comm);
    if (code == MPI_SUCCESS) {
      MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
      MPI_Comm_rank(comm, &rank);
      MPI_Comm_size(comm, &size);
    }
  }
  if (code != MPI_SUCCESS) {
    *status = fail(DISTOPT_RT_BACKEND_ERROR,
                   "duplicating the MPI communicator: " + mpiError(code));
    return nullptr;
  }
  ++liveTransports;
  *status = DISTOPT_RT_OK;
  return std::make_unique<MpiTransport>(comm, rank, size);
}

void abortRun() {
  int initialised = 0, finalized = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalized);
  if (initialised && !finalized)
    MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

#else

void abortRun() { std::_Exit(1); }

std::unique_ptr<Transport> createMpiTransport(distopt_rt_status *status,
                                              const void *) {
  *status = fail(DISTOPT_RT_UNAVAILABLE,
                 "this distopt runtime was built without MPI");
  return nullptr;
}

#endif

} // namespace distopt::rt
