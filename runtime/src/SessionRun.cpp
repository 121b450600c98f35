//===- SessionRun.cpp - running a step and its entry points ----*- C++ -*-===//
//
// A call of a compiled step: its arguments packed as the packed entry point
// takes them (memref descriptors of the session's buffers, the scalars as
// their types hold them), the call, which returns the status of a runtime
// call that failed (the session then frees what the step still held), and
// each result the step returns put into the buffer of the argument it
// updates, so that views the caller holds stay valid. A split
// step (--distopt-split-step) has entry points besides the whole step: its
// gradient reductions, which a driver may start on the session's
// communication thread while its backward pass goes on, and its update.
//
//===----------------------------------------------------------------------===//

#include "Alloc.h"
#include "Comm.h"
#include "Cuda.h"
#include "Step.h"
#include "Threads.h"

#include <algorithm>
#include <chrono>
#include <cstring>

using namespace distopt;
using namespace distopt::rt;

namespace {

/// MLIR marks the buffers of constant globals with this allocated pointer.
constexpr uintptr_t kGlobalMarker = 0xdeadbeef;

/// Where each result an entry point returns (not in place) lies in the
/// storage the packed entry point writes: an LLVM struct of memref
/// descriptors ({allocated, aligned, offset, sizes, strides}) and scalars,
/// each at its natural alignment.
std::vector<int64_t> resultOffsets(const std::vector<step::Value> &results,
                                   size_t &totalBytes) {
  std::vector<int64_t> offsets(results.size(), -1);
  size_t at = 0;
  for (size_t k = 0; k < results.size(); ++k) {
    const step::Value &r = results[k];
    if (r.inPlaceArg)
      continue;
    size_t size = r.isTensor() ? 8 * (3 + 2 * r.shape->size())
                               : std::max<size_t>(1, r.dtype->bytes);
    size_t align = r.isTensor() ? 8 : size;
    at = (at + align - 1) / align * align;
    offsets[k] = static_cast<int64_t>(at);
    at += size;
  }
  totalBytes = at;
  return offsets;
}

/// A scalar of `dtype` at `p` as a double.
double scalarValue(const step::DType &dtype, const void *p) {
  double value = 0;
  if (dtype.name == "i1")
    return *static_cast<const uint8_t *>(p) & 1;
  if (dtype.runtimeCode >= 0)
    convert(p, static_cast<distopt_rt_dtype>(dtype.runtimeCode), &value,
            DISTOPT_RT_F64, 1);
  return value;
}

/// Calls the entry point on `world`: the status it returns is that of the
/// runtime call that failed, or OK (docs/lowering.md).
distopt_rt_status callStep(PackedEntry entry, void **args,
                           distopt_rt_comm *world) {
  distopt_rt_bind_world(world);
  auto status = static_cast<distopt_rt_status>(entry(args));
  distopt_rt_bind_world(nullptr);
  return status;
}

/// The storage one call packs its arguments in: every tensor's descriptor
/// (pointers, offset, sizes, strides) in one allocation.
struct PackedArgs {
  std::vector<int64_t> descriptors;
  std::vector<size_t> descriptorAt;
  std::vector<void *> descriptorPtrs;
  std::vector<float> floats;
  std::vector<double> doubles;
  std::vector<int64_t> ints;
  std::vector<int32_t> int32s;
  std::vector<uint8_t> bits;
  std::vector<uint16_t> halves;
  std::vector<void *> packed;

  explicit PackedArgs(const step::Interface &abi)
      : descriptorAt(abi.args.size()), descriptorPtrs(abi.args.size()),
        floats(abi.args.size()), doubles(abi.args.size()),
        ints(abi.args.size()), int32s(abi.args.size()), bits(abi.args.size()),
        halves(abi.args.size()), packed(1 + abi.args.size()) {
    size_t words = 0;
    for (size_t i = 0; i < abi.args.size(); ++i) {
      descriptorAt[i] = words;
      if (abi.args[i].isTensor())
        words += 3 + 2 * abi.args[i].shape->size();
    }
    descriptors.resize(words);
  }
};

/// Argument `i` into `p`: a descriptor of its buffer, or its scalar (the
/// learning rate, the step number, state, a hyperparameter) as its type
/// holds it.
void packArgument(const distopt_session *s, size_t i, int64_t stepNumber,
                  PackedArgs &p) {
  const step::Value &v = s->step->abi.args[i];
  if (v.isTensor()) {
    auto address = reinterpret_cast<int64_t>(s->data[i]);
    int64_t *d = p.descriptors.data() + p.descriptorAt[i];
    size_t rank = v.shape->size();
    d[0] = d[1] = address;
    d[2] = 0;
    int64_t stride = 1;
    for (size_t k = rank; k-- > 0;) {
      d[3 + k] = (*v.shape)[k];
      d[3 + rank + k] = stride;
      stride *= (*v.shape)[k];
    }
    p.descriptorPtrs[i] = d;
    p.packed[1 + i] = &p.descriptorPtrs[i];
    return;
  }
  double value = v.role == step::Role::LearningRate ? s->lr
                 : v.role == step::Role::Step ? static_cast<double>(stepNumber)
                                              : s->scalarState[i];
  std::string_view type = v.dtype->name;
  if (type == "f64") {
    p.doubles[i] = value;
    p.packed[1 + i] = &p.doubles[i];
  } else if (type == "i64") {
    // The step number exactly (a double holds 53 bits of it).
    p.ints[i] =
        v.role == step::Role::Step ? stepNumber : static_cast<int64_t>(value);
    p.packed[1 + i] = &p.ints[i];
  } else if (type == "i32") {
    p.int32s[i] = static_cast<int32_t>(value);
    p.packed[1 + i] = &p.int32s[i];
  } else if (type == "i1") {
    p.bits[i] = value != 0;
    p.packed[1 + i] = &p.bits[i];
  } else if (type == "f32") {
    p.floats[i] = static_cast<float>(value);
    p.packed[1 + i] = &p.floats[i];
  } else { // bf16, f16: rounded from the double
    convert(&value, DISTOPT_RT_F64, &p.halves[i],
            static_cast<distopt_rt_dtype>(v.dtype->runtimeCode), 1);
    p.packed[1 + i] = &p.halves[i];
  }
}

/// One call of `entry` (whose results are `results`) on this rank's
/// buffers: each returned tensor into the buffer of the argument it
/// updates, each scalar into `scalars` (and scalar state into the
/// session's), and what the call allocated freed, once (a bucket's results
/// are views of one allocation). A failure marks the session broken.
distopt_rt_status invoke(distopt_session *s, PackedEntry entry,
                         const std::vector<step::Value> &results,
                         int64_t stepNumber, std::vector<double> *scalars) {
  const step::Interface &abi = s->step->abi;
  size_t numArgs = abi.args.size();
  PackedArgs p(abi);
  size_t resultBytes = 0;
  std::vector<int64_t> offsets = resultOffsets(results, resultBytes);
  std::vector<int64_t> storage((resultBytes + 7) / 8 + 1);
  void *resultPtr = storage.data();
  p.packed[0] = &resultPtr;
  for (size_t i = 0; i < numArgs; ++i)
    packArgument(s, i, stepNumber, p);

  if (!s->device)
    useThreads(s->threads);
  distopt_rt_status status;
  {
    StepAllocations allocations;
    status = callStep(entry, p.packed.data(), s->stepComm);
    // What the step allocated before it failed: it returned from the
    // failed call, past its frees. Once the collectives it started are over
    // (after a failure the rest fail at once; one still waiting for its
    // peers after a second keeps the memory allocated). Device memory is
    // not recorded.
    if (status != DISTOPT_RT_OK &&
        waitForStartedCollectives(s->stepComm, /*seconds=*/1.0))
      allocations.freeAll();
  }
  if (status == DISTOPT_RT_OK && s->device)
    status = distopt_rt_cuda_synchronize();
  if (status != DISTOPT_RT_OK) {
    // A rate refused at the step's start: nothing ran, nothing changed.
    if (distopt_rt_take_rate_refusal())
      return status;
    s->broken = true;
    return status;
  }

  const std::vector<size_t> &resultArg = s->resultArgs.at(&results);
  // Sorted vectors, not sets: a step of hundreds of tensors runs this every
  // step, and node allocations were most of its host time.
  std::vector<void *> allocations;
  allocations.reserve(results.size());
  const char *base = reinterpret_cast<const char *>(storage.data());
  auto copy = [&](void *to, const void *from, size_t bytes) {
    if (s->device)
      distopt_rt_cuda_copy(to, from, bytes);
    else
      std::memcpy(to, from, bytes);
  };
  for (size_t k = 0; k < results.size(); ++k) {
    const step::Value &r = results[k];
    if (offsets[k] < 0)
      continue;
    const char *at = base + offsets[k];
    if (!r.isTensor()) {
      double value = scalarValue(*r.dtype, at);
      if (scalars)
        (*scalars)[k] = value;
      // The next value of the scalar state of the same role and name.
      if (r.role == step::Role::State)
        for (size_t i = 0; i < numArgs; ++i)
          if (!abi.args[i].isTensor() && abi.args[i].role == r.role &&
              abi.args[i].name == r.name)
            s->scalarState[i] = value;
      continue;
    }
    int64_t d[3];
    std::memcpy(d, at, sizeof(d));
    const char *returned =
        reinterpret_cast<const char *>(d[1]) + d[2] * r.dtype->bytes;
    size_t target = resultArg[k];
    if (target != SIZE_MAX && returned != s->data[target])
      copy(s->data[target], returned, r.bytes());
    if (target == SIZE_MAX && r.numel() > 0 && scalars) {
      // A loss: its first element is the step's scalar.
      char first[8] = {};
      copy(first, returned, r.dtype->bytes);
      (*scalars)[k] = scalarValue(*r.dtype, first);
    }
    allocations.push_back(reinterpret_cast<void *>(d[0]));
  }
  std::sort(allocations.begin(), allocations.end());
  allocations.erase(std::unique(allocations.begin(), allocations.end()),
                    allocations.end());
  std::vector<void *> arguments(s->data.begin(), s->data.end());
  std::sort(arguments.begin(), arguments.end());
  for (void *allocation : allocations) {
    bool isArgument =
        std::binary_search(arguments.begin(), arguments.end(), allocation);
    if (isArgument || reinterpret_cast<uintptr_t>(allocation) == kGlobalMarker)
      continue;
    if (s->device)
      distopt_rt_cuda_free(allocation);
    else
      _mlir_memref_to_llvm_free(allocation);
  }
  return DISTOPT_RT_OK;
}

/// The checks before a step (the whole step or a split step's update) and
/// what it needs first: the number it takes, main parameters started,
/// per-step draws.
distopt_rt_status beginStep(distopt_session *s, int64_t &stepNumber) {
  if (s->broken)
    return s->error(DISTOPT_RT_FAILED,
                    "an earlier step or collective of this session failed "
                    "part way; create a new session (and load a checkpoint)");
  const step::Interface &abi = s->step->abi;
  if (!s->accumulators.empty() && s->accumulated != abi.gradAccumulation - 1)
    return s->invalid(
        "the step accumulates " + std::to_string(abi.gradAccumulation) +
        " micro-batches (grad_accumulation): run() takes the last one's "
        "gradients after accumulate() has taken each of the " +
        std::to_string(abi.gradAccumulation - 1) +
        " before it, and accumulate() was called " +
        std::to_string(s->accumulated) + " times since the last step");
  if (s->stepsDone == INT64_MAX)
    return s->invalid("the session has done INT64_MAX steps: no step "
                      "number is left");
  if (distopt_rt_status status = startMainParams(s); status != DISTOPT_RT_OK)
    return status;
  stepNumber = s->stepsDone + 1;
  for (size_t i = 0; i < abi.args.size(); ++i)
    if (abi.args[i].isTensor() &&
        abi.args[i].init == step::Init::RandnEachStep) {
      const step::Value &v = abi.args[i];
      std::vector<char> host(s->device ? v.bytes() : 0);
      drawNormal(v, s->device ? host.data() : s->data[i], s->seed + stepNumber);
      if (s->device)
        distopt_rt_cuda_copy(s->data[i], host.data(), v.bytes());
    }
  return DISTOPT_RT_OK;
}

/// After a step: the accumulated gradients are consumed (a skipped step's
/// too: torch's loop zeroes them after scaler.step either way), and the
/// step is counted unless it was skipped for an overflow under loss
/// scaling (torch's GradScaler does not call optimizer.step() then: the
/// next step takes the same number).
void endStep(distopt_session *s) {
  const step::Interface &abi = s->step->abi;
  for (auto [acc, grad] : s->accumulators)
    std::memset(s->data[acc], 0, abi.args[acc].bytes());
  s->accumulated = 0;
  s->ran = true;
  bool skipped = false;
  for (size_t k = 0; k < abi.results.size(); ++k)
    if (abi.results[k].role == step::Role::Skipped && s->scalars[k] != 0)
      skipped = true;
  if (!skipped)
    ++s->stepsDone;
}

/// A whole step through `entry`, whose results are the step's.
distopt_rt_status runStep(distopt_session *s, PackedEntry entry,
                          const std::vector<step::Value> &results) {
  int64_t stepNumber = 0;
  if (distopt_rt_status status = beginStep(s, stepNumber);
      status != DISTOPT_RT_OK)
    return status;
  auto begin = std::chrono::steady_clock::now();
  distopt_rt_status status = invoke(s, entry, results, stepNumber, &s->scalars);
  s->lastSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin)
          .count();
  if (status != DISTOPT_RT_OK)
    return status;
  endStep(s);
  return DISTOPT_RT_OK;
}

/// Entry `k` of the session's step, or null with an error.
const step::Entry *entryAt(distopt_session *s, int64_t k, const char *call) {
  if (!s) {
    fail(DISTOPT_RT_INVALID_ARGUMENT, std::string(call) + ": null session");
    return nullptr;
  }
  const std::vector<step::Entry> &entries = s->step->abi.entries;
  if (k < 0 || k >= static_cast<int64_t>(entries.size())) {
    s->invalid(std::string(call) + ": no entry point #" + std::to_string(k) +
               " (the step has " + std::to_string(entries.size()) +
               (entries.empty() ? "; compile it with split-step" : "") + ")");
    return nullptr;
  }
  return &entries[k];
}

} // namespace

// --- The communication thread ------------------------------------------------

void CommThread::start(distopt_session *s, size_t entry) {
  std::unique_lock<std::mutex> lock(mutex);
  if (!worker.joinable())
    worker = std::thread([this, s] { serve(s); });
  queue.push_back(entry);
  ++pending;
  ++started;
  wake.notify_all();
}

void CommThread::serve(distopt_session *s) {
  const step::Interface &abi = s->step->abi;
  std::unique_lock<std::mutex> lock(mutex);
  while (true) {
    wake.wait(lock, [&] { return stopping || !queue.empty(); });
    if (queue.empty())
      return; // stopping, and nothing left
    size_t k = queue.front();
    queue.pop_front();
    running = k;
    bool failedBefore = status != DISTOPT_RT_OK;
    lock.unlock();
    distopt_rt_status result = DISTOPT_RT_OK;
    std::string message;
    // After a failure the entries left are not run: the ranks' collectives
    // no longer match.
    if (!failedBefore) {
      OperationScope scope(Operation::Step);
      BackgroundWaitScope background;
      result = invoke(s, s->step->entries[k], abi.entries[k].results,
                      s->stepsDone + 1, nullptr);
      if (result != DISTOPT_RT_OK)
        message = lastError();
    }
    lock.lock();
    if (result != DISTOPT_RT_OK && status == DISTOPT_RT_OK) {
      status = result;
      error = message;
    }
    running.reset();
    ++finished;
    --pending;
    done.notify_all();
  }
}

distopt_rt_status CommThread::wait() { return waitFor(INT64_MAX); }

int64_t CommThread::startedCount() {
  std::lock_guard<std::mutex> lock(mutex);
  return started;
}

std::vector<size_t> CommThread::inFlight() {
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<size_t> entries(queue.begin(), queue.end());
  if (running)
    entries.push_back(*running);
  return entries;
}

int64_t CommThread::finishedCount() {
  std::lock_guard<std::mutex> lock(mutex);
  return finished;
}

distopt_rt_status CommThread::waitFor(int64_t count) {
  std::unique_lock<std::mutex> lock(mutex);
  done.wait(lock, [&] { return pending == 0 || finished >= count; });
  distopt_rt_status result = status;
  if (result != DISTOPT_RT_OK) {
    fail(result, error);
    // Sticky while entries are queued: they must not run after it.
    if (pending == 0) {
      status = DISTOPT_RT_OK;
      error.clear();
    }
  }
  return result;
}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
    wake.notify_all();
  }
  if (worker.joinable())
    worker.join();
}

extern "C" {

distopt_rt_status distopt_session_run(distopt_session *session) {
  if (!session)
    return fail(DISTOPT_RT_INVALID_ARGUMENT,
                "distopt_session_run: null session");
  if (distopt_rt_status status = session->comms.wait(); status != DISTOPT_RT_OK)
    return status;
  if (distopt_rt_status status = checkBuffers(session, nullptr);
      status != DISTOPT_RT_OK)
    return status;
  OperationScope scope(Operation::Step);
  return runStep(session, session->step->entry, session->step->abi.results);
}

int64_t distopt_step_num_entries(const distopt_step *step) {
  return step ? static_cast<int64_t>(step->abi.entries.size()) : 0;
}

distopt_rt_status distopt_step_entry_info(const distopt_step *step, int64_t k,
                                          distopt_step_entry *out) {
  if (!step || !out || k < 0 ||
      k >= static_cast<int64_t>(step->abi.entries.size()))
    return fail(DISTOPT_RT_INVALID_ARGUMENT,
                "distopt_step_entry_info: no entry point #" +
                    std::to_string(k));
  const step::Entry &e = step->abi.entries[k];
  out->name = e.name.c_str();
  out->kind = step::entryKindName(e.kind).data();
  // A gather entry's operand is the parameter shard it gathers.
  const std::vector<int64_t> &operands =
      e.kind == step::Entry::Kind::Gather ? e.gathers : e.reduces;
  out->num_reduces = static_cast<int64_t>(operands.size());
  out->reduces = operands.empty() ? nullptr : operands.data();
  return DISTOPT_RT_OK;
}

distopt_rt_status distopt_session_run_entry(distopt_session *session,
                                            int64_t k) {
  const step::Entry *entry = entryAt(session, k, "distopt_session_run_entry");
  if (!entry)
    return DISTOPT_RT_INVALID_ARGUMENT;
  if (distopt_rt_status status = session->comms.wait(); status != DISTOPT_RT_OK)
    return status;
  if (distopt_rt_status status = checkBuffers(session, entry);
      status != DISTOPT_RT_OK)
    return status;
  OperationScope scope(Operation::Step);
  if (entry->kind == step::Entry::Kind::Update)
    return runStep(session, session->step->entries[k], entry->results);
  if (session->broken)
    return session->error(DISTOPT_RT_FAILED,
                          "an earlier step or collective of this session "
                          "failed part way; create a new session");
  return invoke(session, session->step->entries[k], entry->results,
                session->stepsDone + 1, nullptr);
}

distopt_rt_status distopt_session_start_entry(distopt_session *session,
                                              int64_t k) {
  const step::Entry *entry = entryAt(session, k, "distopt_session_start_entry");
  if (!entry)
    return DISTOPT_RT_INVALID_ARGUMENT;
  if (entry->kind == step::Entry::Kind::Update)
    return session->invalid("distopt_session_start_entry: entry point '" +
                            entry->name +
                            "' is the update: run it with "
                            "distopt_session_run_entry, after the "
                            "reductions");
  if (session->broken)
    return session->error(DISTOPT_RT_FAILED,
                          "an earlier step or collective of this session "
                          "failed part way; create a new session");
  if (distopt_rt_status status = checkBuffers(session, entry);
      status != DISTOPT_RT_OK)
    return status;
  session->comms.start(session, static_cast<size_t>(k));
  return DISTOPT_RT_OK;
}

distopt_rt_status distopt_session_wait(distopt_session *session) {
  if (!session)
    return fail(DISTOPT_RT_INVALID_ARGUMENT,
                "distopt_session_wait: null session");
  return session->comms.wait();
}

int64_t distopt_session_entries_started(distopt_session *session) {
  return session ? session->comms.startedCount() : 0;
}

int64_t distopt_session_entries_finished(distopt_session *session) {
  return session ? session->comms.finishedCount() : 0;
}

distopt_rt_status distopt_session_wait_entries(distopt_session *session,
                                               int64_t count) {
  if (!session)
    return fail(DISTOPT_RT_INVALID_ARGUMENT,
                "distopt_session_wait_entries: null session");
  return session->comms.waitFor(count);
}

} // extern "C"
