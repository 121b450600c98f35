//===- Comm.cpp - communicators' requests, worker and errors ----*- C++ -*-===//
//
// A communicator runs its collectives in order, directly or on its worker
// thread (asynchronous requests), fails for good after a failure, and names
// the rank and operation in every error. The algorithms themselves are in
// Collectives.cpp.
//
//===----------------------------------------------------------------------===//

#include "Comm.h"
#include "Threads.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

namespace distopt::rt {

namespace {
thread_local std::string lastErrorMessage;
thread_local Operation threadOperation = Operation::Direct;
thread_local bool threadWaitsInBackground = false;

} // namespace

distopt_rt_status fail(distopt_rt_status status, std::string message) {
  lastErrorMessage = std::move(message);
  return status;
}

const std::string &lastError() { return lastErrorMessage; }

bool backgroundWaits() { return threadWaitsInBackground; }

BackgroundWaitScope::BackgroundWaitScope() : saved(threadWaitsInBackground) {
  threadWaitsInBackground = true;
}

BackgroundWaitScope::~BackgroundWaitScope() { threadWaitsInBackground = saved; }

std::string formatNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

std::string checkTimeout(double seconds, const std::string &what) {
  if (seconds > 0 && seconds <= kMaxTimeoutSeconds)
    return "";
  return what + " must be a positive number of seconds, at most 1e9, not " +
         formatNumber(seconds);
}

const char *name(Collective::Kind kind) {
  switch (kind) {
  case Collective::AllReduce:
    return "all_reduce";
  case Collective::ReduceScatter:
    return "reduce_scatter";
  case Collective::AllGather:
    return "all_gather";
  case Collective::Broadcast:
    return "broadcast";
  case Collective::Reduce:
    return "reduce";
  }
  return "collective";
}

const char *name(Operation operation) {
  switch (operation) {
  case Operation::Direct:
    return "";
  case Operation::Create:
    return "creating a session";
  case Operation::Step:
    return "a step";
  case Operation::Save:
    return "a checkpoint save";
  case Operation::Load:
    return "a checkpoint load";
  case Operation::Read:
    return "reading a tensor";
  }
  return "an unknown operation";
}

Operation currentOperation() { return threadOperation; }

OperationScope::OperationScope(Operation operation) : saved(threadOperation) {
  threadOperation = operation;
}

OperationScope::~OperationScope() { threadOperation = saved; }

std::string Stamp::str() const {
  std::string text;
  if (kind < kSplitAgreement)
    text = name(static_cast<Collective::Kind>(kind));
  else if (kind == kSplitAgreement)
    text = "the agreement to split";
  else if (kind == kBootstrap)
    text = "a bootstrap exchange";
  else
    text = "a collective of kind " + std::to_string(kind);
  text += " #" + std::to_string(sequence);
  if (operation != Operation::Direct)
    text += std::string(" of ") + name(operation);
  return text;
}

Communicator::Communicator(std::unique_ptr<Transport> transport,
                           std::unique_ptr<DeviceCollectives> device)
    : transport(std::move(transport)), device(std::move(device)) {}

std::string Transport::peer(int64_t rank) const {
  std::string text = "rank " + std::to_string(rank);
  if (rank >= 0 && rank < static_cast<int64_t>(worldRanks.size()))
    text += " (world rank " + std::to_string(worldRanks[rank]) + ")";
  return text;
}

std::unique_ptr<Communicator> Communicator::split(int64_t color, int64_t key,
                                                  std::string name,
                                                  std::string invalid,
                                                  distopt_rt_status *status) {
  // Every rank splits between the same two collectives: the started ones
  // complete first, and none runs while the transport splits.
  {
    std::unique_lock<std::mutex> lock(queueMutex);
    queueChanged.wait(lock, [&] { return queue.empty() && !busy; });
  }
  std::lock_guard<std::mutex> lock(executeMutex);
  if (failed) {
    *status =
        fail(DISTOPT_RT_FAILED,
             "the communicator failed earlier and cannot be split: " + failure);
    return nullptr;
  }
  if (invalid.empty() &&
      (color < 0 || color > INT32_MAX || key < INT32_MIN || key > INT32_MAX))
    invalid = "color " + std::to_string(color) + " or key " +
              std::to_string(key) + " out of range";
  // The ranks agree that every one of them has a valid part, within the
  // timeout, before MPI_Comm_split, which has none: a rank that never
  // splits, or splits with a bad argument, is an error on every rank rather
  // than a hang. On the host transport, also under NCCL.
  int64_t agreed = invalid.empty() ? 1 : 0;
  Collective vote{Collective::AllReduce, &agreed,        &agreed, 1,
                  DISTOPT_RT_I64,        DISTOPT_RT_MIN, 1.0,     0,
                  DISTOPT_RT_I64};
  auto describe = [&] {
    std::ostringstream what;
    what << "rank " << rank() << " of " << size()
         << ": agreeing to split off group " << name;
    return what.str();
  };
  transport->stamp = {sequence++, Stamp::kSplitAgreement, currentOperation()};
  *status = allReduce(vote, What(describe));
  if (*status != DISTOPT_RT_OK) {
    failed = true;
    failure = lastError();
    return nullptr;
  }
  if (!agreed) {
    *status = fail(DISTOPT_RT_INVALID_ARGUMENT,
                   "rank " + std::to_string(rank()) + ": splitting off group " +
                       name + ": " +
                       (invalid.empty() ? std::string("another rank's part is "
                                                      "invalid")
                                        : invalid));
    return nullptr;
  }
  std::unique_ptr<Transport> part = transport->split(color, key, status);
  if (!part)
    return nullptr;
  part->timeout = transport->timeout;
  // Device collectives of the same kind over the part (NCCL: a
  // communicator of its own, bootstrapped over it).
  std::unique_ptr<DeviceCollectives> partDevice;
  if (device) {
    partDevice = device->over(*part, status);
    if (!partDevice)
      return nullptr;
  }
  auto result =
      std::make_unique<Communicator>(std::move(part), std::move(partDevice));
  result->groupName = std::move(name);
  *status = DISTOPT_RT_OK;
  return result;
}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> lock(queueMutex);
    stopping = true;
  }
  queueChanged.notify_all();
  if (worker.joinable())
    worker.join();
}

distopt_rt_status Communicator::run(const Collective &c) {
  {
    std::unique_lock<std::mutex> lock(queueMutex);
    if (!queue.empty() || busy) {
      lock.unlock();
      return wait(start(c)); // after what was started before
    }
  }
  Collective stamped = c;
  stamped.operation = currentOperation();
  std::lock_guard<std::mutex> lock(executeMutex);
  return execute(stamped);
}

bool Communicator::waitIdle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(queueMutex);
  return queueChanged.wait_until(lock, deadline,
                                 [&] { return queue.empty() && !busy; });
}

static bool waitIdle(distopt_rt_comm *comm,
                     std::chrono::steady_clock::time_point deadline) {
  if (!comm || !comm->impl)
    return true;
  if (!comm->impl->waitIdle(deadline))
    return false;
  std::lock_guard<std::mutex> lock(comm->groupsMutex);
  for (auto &[name, parts] : comm->groups)
    for (distopt_rt_comm::Group &group : parts)
      if (!waitIdle(group.comm.get(), deadline))
        return false;
  return true;
}

bool waitForStartedCollectives(distopt_rt_comm *comm, double seconds) {
  return waitIdle(
      comm, std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(seconds)));
}

std::shared_ptr<Request> Communicator::start(const Collective &c) {
  auto request = std::make_shared<Request>();
  {
    std::lock_guard<std::mutex> lock(queueMutex);
    if (!worker.joinable())
      worker = std::thread([this] { workerLoop(); });
    queue.emplace_back(c, request);
    queue.back().first.threads = currentThreads();
    queue.back().first.operation = currentOperation();
  }
  queueChanged.notify_all();
  return request;
}

distopt_rt_status Communicator::wait(const std::shared_ptr<Request> &request) {
  std::unique_lock<std::mutex> lock(request->mutex);
  request->done.wait(lock, [&] { return request->finished; });
  if (request->status != DISTOPT_RT_OK)
    return fail(request->status, request->error);
  return DISTOPT_RT_OK;
}

void Communicator::workerLoop() {
  while (true) {
    std::pair<Collective, std::shared_ptr<Request>> next;
    {
      std::unique_lock<std::mutex> lock(queueMutex);
      queueChanged.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty())
        return; // stopping, nothing left
      next = queue.front();
      queue.pop_front();
      busy = true;
    }
    distopt_rt_status status;
    {
      std::lock_guard<std::mutex> lock(executeMutex);
      // Combining and converting on the threads the step runs on, as a
      // collective the step runs itself does.
      useThreads(next.first.threads);
      status = execute(next.first);
    }
    {
      std::lock_guard<std::mutex> lock(next.second->mutex);
      next.second->status = status;
      if (status != DISTOPT_RT_OK)
        next.second->error = lastError();
      next.second->finished = true;
    }
    next.second->done.notify_all();
    {
      std::lock_guard<std::mutex> lock(queueMutex);
      busy = false;
    }
    queueChanged.notify_all();
  }
}

char *Communicator::scratch(int index, size_t bytes) {
  std::vector<char> &buffer = scratchBuffers[index];
  if (buffer.size() < bytes)
    buffer.resize(bytes); // zero-filled once, when it grows
  return buffer.data();
}

distopt_rt_status Communicator::execute(const Collective &c) {
  if (failed)
    return fail(DISTOPT_RT_FAILED,
                "the communicator failed earlier and cannot be used: " +
                    failure);
  auto describe = [&] {
    std::ostringstream what;
    if (!groupName.empty())
      what << "group " << groupName << ": ";
    what << "rank " << rank() << " of " << size();
    if (!transport->worldRanks.empty())
      what << " (world rank " << transport->worldRanks[rank()] << ")";
    what << ": " << name(c.kind) << " of " << c.count << " " << name(c.type);
    if (c.kind == Collective::AllReduce ||
        c.kind == Collective::ReduceScatter || c.kind == Collective::Reduce)
      what << " (" << name(c.op) << ")";
    if (c.wire != c.type)
      what << " on a " << name(c.wire) << " wire";
    return what.str();
  };
  What what(describe);
  // Every rank numbers its collectives here alike; their messages carry it.
  transport->stamp = {sequence++, static_cast<uint8_t>(c.kind), c.operation};
  distopt_rt_status status = DISTOPT_RT_OK;
  if (device)
    status = device->execute(c, what);
  else
    switch (c.kind) {
    case Collective::AllReduce:
      status = allReduce(c, what);
      break;
    case Collective::ReduceScatter:
      status = ringReduceScatter(c, c.count * size(), c.recv, what);
      break;
    case Collective::AllGather: {
      size_t bytes = c.count * elementSize(c.type);
      void *slot = static_cast<char *>(c.recv) + rank() * bytes;
      if (slot != c.send)
        std::memmove(slot, c.send, bytes);
      status = ringAllGather(c.recv, c.count * size(), c.type, c.wire, what);
      break;
    }
    case Collective::Broadcast:
      status = broadcast(c, what);
      break;
    case Collective::Reduce:
      status = reduce(c, what);
      break;
    }
  if (status != DISTOPT_RT_OK && status != DISTOPT_RT_INVALID_ARGUMENT) {
    failed = true;
    failure = lastError();
  }
  return status;
}

namespace {
/// One process: every collective is local.
class SingleTransport : public Transport {
public:
  int64_t rank() const override { return 0; }
  int64_t size() const override { return 1; }
  distopt_rt_status exchange(const void *, size_t, int64_t, void *, size_t,
                             int64_t, const What &what) override {
    return fail(DISTOPT_RT_BACKEND_ERROR,
                what.str() + ": no peer in a single-process communicator");
  }
  std::unique_ptr<Transport> split(int64_t, int64_t,
                                   distopt_rt_status *status) override {
    *status = DISTOPT_RT_OK;
    return std::make_unique<SingleTransport>();
  }
};
} // namespace

std::unique_ptr<Transport> createSingleTransport() {
  return std::make_unique<SingleTransport>();
}

} // namespace distopt::rt
