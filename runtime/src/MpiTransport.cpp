//===- MpiTransport.cpp - point-to-point over MPI ---------------*- C++ -*-===//
//
// Non-blocking sends and receives polled against a deadline, so that a dead
// or stuck peer is an error naming it rather than a hang. A peer process on
// the same machine that has exited (killed, crashed) fails the collective
// within milliseconds: while it waits, the transport checks that the
// processes of its local peers still run. A peer on another machine, or one
// alive but stuck, is caught by the deadline. Every message carries the
// collective it belongs to in its tag (Stamp: its sequence number on the
// communicator, kind and operation): a message of another collective never
// completes this one's receive, and a rank that finds one waiting (its peer
// runs another operation: a step against a save) fails at once and tells
// every peer, which fail too, rather than compute on foreign data or wait
// for the timeout. MPI is initialised
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

/// OpenMPI's TCP transport without its emulated RDMA ("put"): with it, a
/// large message goes as one fragment, and collectives run back to back
/// (a step's buckets) took twice the link's time in one run of three on
/// 1 Gb/s links (raw MPI_Allreduce and MPI_Isend/Irecv alike, no TCP loss);
/// with the send protocol's 128 KiB fragments, every run reached the link
/// (docs/runtime.md). The environment's own value wins.
void preferTcpSendProtocol() {
#ifdef OPEN_MPI
  setenv("OMPI_MCA_btl_tcp_flags", "send,inplace,need-ack,need-csum",
         /*overwrite=*/0);
#endif
}

/// Where MPI started before the runtime could choose (mpi4py imported
/// first, a C program's MPI_Init) and the ranks span machines: a warning,
/// once, from rank 0, when OpenMPI's TCP transport still emulates RDMA and
/// the launch did not choose its flags. Collective over `comm` (the first
/// communicator the runtime makes, on all of its ranks); under callMutex.
void warnIfTcpEmulatesRdma(MPI_Comm comm, int rank, int size) {
#ifdef OPEN_MPI
  static bool checked = false;
  if (checked || std::getenv("OMPI_MCA_btl_tcp_flags"))
    return;
  checked = true;
  MPI_Comm local;
  int localSize = size;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL,
                          &local) != MPI_SUCCESS)
    return;
  MPI_Comm_size(local, &localSize);
  MPI_Comm_free(&local);
  int provided = 0, index = 0, count = 0;
  if (rank != 0 || localSize == size ||
      MPI_T_init_thread(MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
    return;
  unsigned flags = 0;
  MPI_T_cvar_handle handle;
  if (MPI_T_cvar_get_index("btl_tcp_flags", &index) == MPI_SUCCESS &&
      MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
    if (count == 1)
      MPI_T_cvar_read(handle, &flags);
    MPI_T_cvar_handle_free(&handle);
  }
  MPI_T_finalize();
  constexpr unsigned kPut = 2; // OpenMPI's MCA_BTL_FLAGS_PUT
  if (flags & kPut)
    std::fprintf(stderr,
                 "distopt: warning: OpenMPI's TCP transport between these "
                 "machines emulates RDMA (btl_tcp_flags has 'put'), which "
                 "halves the rate of collectives run back to back; launch "
                 "with --mca btl_tcp_flags send,inplace,need-ack,need-csum, "
                 "or set OMPI_MCA_btl_tcp_flags so before MPI starts "
                 "(docs/runtime.md)\n");
#else
  (void)comm, (void)rank, (void)size;
#endif
}

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
      // A stamp's kind and operation take 6 bits of the tag, its sequence
      // number as many as the largest tag leaves (24 on OpenMPI; MPI
      // promises 32767, which leaves 8).
      int *tagUpperBound = nullptr, flag = 0;
      MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tagUpperBound, &flag);
      int64_t bound = flag && tagUpperBound ? *tagUpperBound : 32767;
      while (sequenceBits < 32 &&
             (int64_t(1) << (sequenceBits + 1 + kStampBits)) <= bound)
        ++sequenceBits;
      warnIfTcpEmulatesRdma(comm, rank, size);
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
      // Notices of a mismatch to peers that never took them (small: sent
      // eagerly, so that their buffer may go).
      for (MPI_Request &request : stopRequests)
        MPI_Request_free(&request);
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
    requests.clear();
    int tag = tagOf(stamp);
    std::unique_lock<std::mutex> lock(callMutex);
    auto post = [&](bool isSend, void *data, size_t bytes, int64_t peer) {
      for (size_t offset = 0; offset < bytes; offset += kMaxMessageBytes) {
        int piece =
            static_cast<int>(std::min(kMaxMessageBytes, bytes - offset));
        MPI_Request request;
        char *p = static_cast<char *>(data) + offset;
        int code =
            isSend ? MPI_Isend(p, piece, MPI_BYTE, peer, tag, comm, &request)
                   : MPI_Irecv(p, piece, MPI_BYTE, peer, tag, comm, &request);
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
    if (code == MPI_SUCCESS && sendBytes > 0)
      code = post(true, const_cast<void *>(send), sendBytes, to);
    lock.unlock();
    if (code != MPI_SUCCESS)
      return fail(DISTOPT_RT_BACKEND_ERROR, what.str() + ": " + mpiError(code));
    return complete(numRecvs, recvBytes, from, to, what);
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
  /// Tag 0 carries a notice that a rank found a mismatch; the others a
  /// stamp: 1 + (sequence bits, operation in 3 bits, kind in 3 bits).
  static constexpr int kStopTag = 0;
  static constexpr int kStampBits = 6;
  /// How often a waiting rank checks that its local peers still run.
  static constexpr std::chrono::milliseconds kLivenessPeriod{20};

  int tagOf(const Stamp &s) const {
    uint64_t sequence = s.sequence & ((uint64_t(1) << sequenceBits) - 1);
    return 1 + static_cast<int>(sequence << kStampBits |
                                static_cast<uint64_t>(s.operation) << 3 |
                                s.kind);
  }
  /// The stamp of a message's tag, its sequence number the one nearest
  /// this rank's that has the tag's bits; `behind`: before this rank's.
  Stamp stampOf(int tag, bool &behind) const {
    uint64_t bits = static_cast<uint64_t>(tag - 1);
    Stamp s;
    s.kind = bits & 7;
    s.operation = static_cast<Operation>(bits >> 3 & 7);
    uint64_t modulus = uint64_t(1) << sequenceBits;
    uint64_t ahead = ((bits >> kStampBits) - stamp.sequence) & (modulus - 1);
    behind = ahead >= modulus / 2;
    s.sequence =
        behind ? stamp.sequence - (modulus - ahead) : stamp.sequence + ahead;
    return s;
  }

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

  /// Polls until every request completes or the deadline passes, a peer
  /// dies, or a message of another collective arrives.
  distopt_rt_status complete(size_t numRecvs, size_t recvBytes, int64_t from,
                             int64_t to, const What &what) {
    auto now = std::chrono::steady_clock::now();
    auto deadline = now + std::chrono::duration<double>(timeout);
    auto nextLivenessCheck = now + kLivenessPeriod;
    bool background = backgroundWaits();
    statuses.resize(requests.size());
    for (unsigned spins = 0;; ++spins) {
      int done = 0;
      int code;
      std::string misfit;
      {
        std::lock_guard<std::mutex> lock(callMutex);
        code = MPI_Testall(static_cast<int>(requests.size()), requests.data(),
                           &done, statuses.data());
        if (done || code != MPI_SUCCESS)
          misfit = receivedMisfit(code, numRecvs, recvBytes);
      }
      if (!misfit.empty()) {
        std::ostringstream message;
        message << what.str() << ": " << peer(from) << " sent " << misfit
                << " of " << stamp.str() << kSameOrder;
        return stopAll(message.str());
      }
      if (code != MPI_SUCCESS)
        return fail(DISTOPT_RT_BACKEND_ERROR,
                    what.str() + ": " + mpiError(code));
      if (done)
        return DISTOPT_RT_OK;
      if ((spins & 1023) == 1023) {
        if (distopt_rt_status status = checkForeign(what))
          return status;
        now = std::chrono::steady_clock::now();
        if (now > deadline)
          break;
        if (now > nextLivenessCheck) {
          nextLivenessCheck = now + kLivenessPeriod;
          // Any dead rank stops the collective: the others wait on it too.
          if (const LocalPeer *dead = deadPeer()) {
            cancelRequests();
            std::ostringstream message;
            message << what.str() << ": " << peer(dead->rank) << " (process "
                    << dead->pid << " on this machine) has exited";
            return fail(DISTOPT_RT_PEER_DIED, message.str());
          }
        }
        std::this_thread::yield();
      }
      // A background wait (the session's communication thread, while the
      // program's backward pass computes) yields the core every 16 polls:
      // OpenMPI's TCP transport moves data only when polled, so it cannot
      // sleep (naps of 50 us to 1 ms made a 1 Gb/s all-reduce 1.75x
      // slower), but the backward pass may run between polls.
      if (background && (spins & 15) == 15)
        std::this_thread::yield();
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
    cancelRequests();
    return fail(DISTOPT_RT_TIMEOUT, message.str());
  }

  void cancelRequests() {
    std::lock_guard<std::mutex> lock(callMutex);
    for (MPI_Request &request : requests)
      if (request != MPI_REQUEST_NULL)
        MPI_Cancel(&request);
  }

  /// After MPI_Testall returned `code` (under callMutex): how a receive
  /// differs from this rank's, or "". A message of this collective's
  /// stamp but of another size (the ranks disagree on its sizes), or one
  /// longer than the receive, is a mismatch.
  std::string receivedMisfit(int code, size_t numRecvs, size_t recvBytes) {
    for (size_t i = 0; i < numRecvs; ++i) {
      size_t expected =
          std::min(kMaxMessageBytes, recvBytes - i * kMaxMessageBytes);
      int errorClass = MPI_SUCCESS;
      if (code == MPI_ERR_IN_STATUS)
        MPI_Error_class(statuses[i].MPI_ERROR, &errorClass);
      if (errorClass == MPI_ERR_TRUNCATE)
        return "more than the " + std::to_string(expected) +
               " bytes this rank receives in a message";
      if (code != MPI_SUCCESS)
        continue;
      int count = 0;
      MPI_Get_count(&statuses[i], MPI_BYTE, &count);
      if (static_cast<size_t>(count) != expected)
        return std::to_string(count) + " bytes where this rank receives " +
               std::to_string(expected) + " in a message";
    }
    return "";
  }

  /// A peer's notice that it found a mismatch, or a message that belongs
  /// to another collective than this rank's: DISTOPT_RT_MISMATCH, with the
  /// requests cancelled (and, found here, every peer told). A message of a
  /// later collective is no mismatch: a peer that finished this one may
  /// have sent it before this rank's last receive completed.
  distopt_rt_status checkForeign(const What &what) {
    MPI_Status probed;
    int found = 0;
    std::string notice;
    {
      std::lock_guard<std::mutex> lock(callMutex);
      MPI_Iprobe(MPI_ANY_SOURCE, kStopTag, comm, &found, &probed);
      if (found) {
        int length = 0;
        MPI_Get_count(&probed, MPI_CHAR, &length);
        notice.resize(std::max(length, 0));
        MPI_Recv(notice.data(), length, MPI_CHAR, probed.MPI_SOURCE, kStopTag,
                 comm, MPI_STATUS_IGNORE);
      } else {
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &found, &probed);
      }
    }
    if (!notice.empty()) {
      cancelRequests();
      return fail(DISTOPT_RT_MISMATCH, what.str() + ": stopped by " +
                                           peer(probed.MPI_SOURCE) +
                                           ", which found: " + notice);
    }
    if (!found || probed.MPI_TAG == tagOf(stamp) || probed.MPI_TAG == kStopTag)
      return DISTOPT_RT_OK;
    bool behind = false;
    Stamp theirs = stampOf(probed.MPI_TAG, behind);
    if (!behind && theirs.sequence != stamp.sequence)
      return DISTOPT_RT_OK;
    std::ostringstream message;
    message << what.str() << ": " << peer(probed.MPI_SOURCE)
            << " sent a message of " << theirs.str()
            << (behind ? ", a collective this rank has finished," : "")
            << " while this rank runs " << stamp.str() << kSameOrder;
    return stopAll(message.str());
  }

  /// Fails with `message` (DISTOPT_RT_MISMATCH) after cancelling this
  /// rank's requests and telling every peer, so that none waits for the
  /// timeout.
  distopt_rt_status stopAll(const std::string &message) {
    cancelRequests();
    std::lock_guard<std::mutex> lock(callMutex);
    if (stopNotice.empty()) {
      stopNotice = message.substr(0, 2048);
      for (int r = 0; r < mySize; ++r) {
        MPI_Request request;
        if (r != myRank &&
            MPI_Isend(stopNotice.data(), static_cast<int>(stopNotice.size()),
                      MPI_CHAR, r, kStopTag, comm, &request) == MPI_SUCCESS)
          stopRequests.push_back(request);
      }
    }
    return fail(DISTOPT_RT_MISMATCH, message);
  }

  static constexpr const char *kSameOrder =
      ": the ranks run different collectives (every rank must run the "
      "collective operations -- steps, checkpoint saves and loads, reads of "
      "tensors held as shards -- in the same order)";

  MPI_Comm comm;
  int myRank, mySize;
  /// Bits of a stamp's sequence number in a tag.
  int sequenceBits = 0;
  /// The requests of the exchange in progress (one at a time: the
  /// communicator runs one collective at a time), kept for their capacity.
  std::vector<MPI_Request> requests;
  std::vector<MPI_Status> statuses;
  std::vector<LocalPeer> localPeers;
  /// The notice of a mismatch this rank sent its peers, and its sends.
  std::string stopNotice;
  std::vector<MPI_Request> stopRequests;
};

} // namespace

std::unique_ptr<Transport> createMpiTransport(distopt_rt_status *status,
                                              const void *parent) {
  std::lock_guard<std::mutex> lock(initMutex);
  int initialised = 0, finalized = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalized);
  // MPI starts once per process: after MPI_Finalize (the runtime's, when
  // the last communicator it made over a world it initialised went) it
  // cannot, and MPI would abort the process.
  if (!parent && finalized) {
    *status = fail(DISTOPT_RT_UNAVAILABLE,
                   "MPI was finalised in this process (by the runtime when "
                   "the last of its communicators went, if it had initialised "
                   "MPI) and cannot start again: keep one communicator for "
                   "the run, or initialise MPI in the program and pass its "
                   "communicator");
    return nullptr;
  }
  if (parent && (!initialised || finalized)) {
    *status = fail(DISTOPT_RT_INVALID_ARGUMENT,
                   "an MPI communicator was given but MPI is not initialised "
                   "(or already finalised): call MPI_Init_thread(&argc, "
                   "&argv, MPI_THREAD_SERIALIZED, &provided) first");
    return nullptr;
  }
  if (parent) {
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_SERIALIZED) {
      *status = fail(DISTOPT_RT_INVALID_ARGUMENT,
                     "MPI was initialised without MPI_THREAD_SERIALIZED, "
                     "which the runtime's worker thread needs: initialise it "
                     "with MPI_Init_thread(&argc, &argv, "
                     "MPI_THREAD_SERIALIZED, &provided) rather than MPI_Init "
                     "(mpi4py does by default)");
      return nullptr;
    }
  }
  if (!initialised) {
    preferTcpSendProtocol();
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
