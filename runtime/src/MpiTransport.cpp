//===- MpiTransport.cpp - point-to-point over MPI ---------------*- C++ -*-===//
//
// Non-blocking sends and receives polled against a deadline, so that a dead
// or stuck peer is an error naming it rather than a hang. MPI is initialised
// (MPI_THREAD_SERIALIZED: one collective at a time, from the caller or the
// communicator's worker thread) unless the application already did.
//
//===----------------------------------------------------------------------===//

#include "Comm.h"

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <vector>

#ifdef DISTOPT_RT_HAVE_MPI
#include <mpi.h>
#endif

namespace distopt::rt {

#ifdef DISTOPT_RT_HAVE_MPI
namespace {

std::mutex initMutex;
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

class MpiTransport : public Transport {
public:
  MpiTransport(MPI_Comm comm, int rank, int size)
      : comm(comm), myRank(rank), mySize(size) {}
  ~MpiTransport() override {
    MPI_Comm_free(&comm);
    std::lock_guard<std::mutex> lock(initMutex);
    if (--liveTransports == 0 && weInitialised) {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized)
        MPI_Finalize();
    }
  }
  int64_t rank() const override { return myRank; }
  int64_t size() const override { return mySize; }

  distopt_rt_status exchange(const void *send, size_t sendBytes, int64_t to,
                             void *recv, size_t recvBytes, int64_t from,
                             const What &what) override {
    std::vector<MPI_Request> requests;
    size_t numSends = 0;
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
    if (code != MPI_SUCCESS)
      return fail(DISTOPT_RT_BACKEND_ERROR, what.str() + ": " + mpiError(code));
    return complete(requests, numRecvs, numSends, from, to, what);
  }

private:
  static constexpr int kTag = 7117;

  /// Polls until every request completes or the deadline passes.
  distopt_rt_status complete(std::vector<MPI_Request> &requests,
                             size_t numRecvs, size_t numSends, int64_t from,
                             int64_t to, const What &what) {
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::duration<double>(timeout);
    for (unsigned spins = 0;; ++spins) {
      int done = 0;
      int code = MPI_Testall(static_cast<int>(requests.size()), requests.data(),
                             &done, MPI_STATUSES_IGNORE);
      if (code != MPI_SUCCESS)
        return fail(DISTOPT_RT_BACKEND_ERROR,
                    what.str() + ": " + mpiError(code));
      if (done)
        return DISTOPT_RT_OK;
      if ((spins & 1023) == 1023) {
        if (std::chrono::steady_clock::now() > deadline)
          break;
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
      message << "waiting for data from rank " << from;
    else
      message << "waiting for rank " << to << " to receive";
    for (size_t i = 0; i < numRecvs + numSends; ++i)
      if (requests[i] != MPI_REQUEST_NULL)
        MPI_Cancel(&requests[i]);
    return fail(DISTOPT_RT_TIMEOUT, message.str());
  }

  MPI_Comm comm;
  int myRank, mySize;
};

} // namespace

std::unique_ptr<Transport> createMpiTransport(distopt_rt_status *status) {
  std::lock_guard<std::mutex> lock(initMutex);
  int initialised = 0;
  MPI_Initialized(&initialised);
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
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
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

std::unique_ptr<Transport> createMpiTransport(distopt_rt_status *status) {
  *status = fail(DISTOPT_RT_UNAVAILABLE,
                 "this distopt runtime was built without MPI");
  return nullptr;
}

#endif

} // namespace distopt::rt
