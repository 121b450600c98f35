//===- Session.cpp - a step on a communicator, one step at a time -*- C++ -*-=//
//
// A session gives every tensor argument a buffer (the session's, or the
// caller's), passes the learning rate and the step number, calls the
// step's packed entry point on the session's communicator, and puts each
// result back into the buffer of the argument it updates, so that views
// the caller holds stay valid from step to step. A failure inside the step
// (a collective that timed out, a dead peer) is not the end of the
// process: the step returns the failed call's status to the session,
// which frees what the step held and returns it.
//
//===----------------------------------------------------------------------===//

#include "Cuda.h"
#include "Step.h"
#include "Threads.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <set>

using namespace distopt;
using namespace distopt::rt;

namespace {

std::string describe(const step::Value &v, size_t index, const char *kind) {
  std::string text = std::string(kind) + " #" + std::to_string(index);
  if (v.role != step::Role::None || !v.name.empty())
    text += " (" + std::string(step::roleName(v.role)) +
            (v.name.empty() ? "" : " '" + v.name + "'") + ")";
  return text;
}

distopt_rt_status invalid(const std::string &message) {
  return fail(DISTOPT_RT_INVALID_ARGUMENT, message);
}

/// A zeroed host buffer of `bytes`, 64-byte aligned, from the runtime's
/// allocator (compiled steps free and reuse what it hands out).
void *allocateHost(size_t bytes) {
  size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  void *p = _mlir_memref_to_llvm_aligned_alloc(64, rounded);
  if (p)
    std::memset(p, 0, rounded);
  return p;
}

distopt_rt_status checkSameStep(distopt_rt_comm *comm,
                                const step::Interface &abi, int64_t rank) {
  int64_t mine[2] = {static_cast<int64_t>(abi.collectiveFingerprint),
                     abi.collectiveCount};
  int64_t lowest[2], highest[2];
  distopt_rt_status status = distopt_rt_all_reduce(
      comm, mine, lowest, 2, DISTOPT_RT_I64, DISTOPT_RT_MIN, 1, DISTOPT_RT_I64);
  if (status == DISTOPT_RT_OK)
    status = distopt_rt_all_reduce(comm, mine, highest, 2, DISTOPT_RT_I64,
                                   DISTOPT_RT_MAX, 1, DISTOPT_RT_I64);
  if (status != DISTOPT_RT_OK)
    return status;
  if (lowest[0] != highest[0] || lowest[1] != highest[1]) {
    char fingerprint[24];
    std::snprintf(fingerprint, sizeof(fingerprint), "%016" PRIx64,
                  abi.collectiveFingerprint);
    return fail(DISTOPT_RT_INVALID_ARGUMENT,
                "rank " + std::to_string(rank) +
                    ": the ranks run different steps: this rank's has " +
                    std::to_string(abi.collectiveCount) +
                    " collectives with fingerprint " + fingerprint +
                    ", another rank's differ; run the same compiled step on "
                    "every rank");
  }
  return DISTOPT_RT_OK;
}

/// The step's process groups, split from `world` now, as the step would at
/// its first collective on each (and kept with `world` for it): every rank
/// starts the session, having checked it runs the same step, so a bad
/// layout or a rank that never comes fails here rather than inside a step.
distopt_rt_status splitGroups(distopt_rt_comm *world,
                              const step::Interface &abi) {
  distopt_rt_bind_world(world);
  distopt_rt_status status = DISTOPT_RT_OK;
  for (const step::ProcessGroup &g : abi.groups) {
    std::vector<int64_t> layout(g.color);
    layout.insert(layout.end(), g.key.begin(), g.key.end());
    distopt_rt_comm *comm;
    status = distopt_rt_group(abi.worldSize, g.size, layout.data(),
                              g.name.c_str(), &comm);
    if (status != DISTOPT_RT_OK)
      break;
  }
  distopt_rt_bind_world(nullptr);
  return status;
}

} // namespace

/// A standard normal draw from a seeded generator, the same on every rank
/// (PowerSGD's initial Q): a linear congruential generator and Box-Muller.
void distopt::rt::drawNormal(const step::Value &v, void *out, uint64_t seed) {
  uint64_t state = seed;
  for (char c : v.name)
    state = state * 31 + static_cast<unsigned char>(c);
  auto uniform = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (static_cast<double>(state >> 11) + 0.5) / 9007199254740992.0;
  };
  std::vector<double> values(v.numel());
  for (double &x : values)
    x = std::sqrt(-2 * std::log(uniform())) *
        std::cos(6.283185307179586 * uniform());
  convert(values.data(), DISTOPT_RT_F64, out,
          static_cast<distopt_rt_dtype>(v.dtype->runtimeCode),
          static_cast<int64_t>(values.size()));
}

/// Which argument each result updates: the one of the same role and name
/// (a loss, or another scalar the step reports, updates none: SIZE_MAX).
distopt_rt_status
distopt::rt::matchResults(const step::Interface &abi,
                          const std::vector<step::Value> &results,
                          std::vector<size_t> &resultArg) {
  resultArg.assign(results.size(), SIZE_MAX);
  for (size_t k = 0; k < results.size(); ++k) {
    const step::Value &r = results[k];
    for (size_t i = 0; i < abi.args.size(); ++i)
      if (abi.args[i].isTensor() && r.isTensor() &&
          abi.args[i].role == r.role && abi.args[i].name == r.name &&
          r.role != step::Role::None)
        resultArg[k] = i;
    if (r.inPlaceArg && resultArg[k] != static_cast<size_t>(*r.inPlaceArg))
      return invalid(describe(r, k, "result") + " is left in argument #" +
                     std::to_string(*r.inPlaceArg) +
                     ", not in the argument it replaces");
    // Not fed back, the next step would read a stale argument.
    if (resultArg[k] == SIZE_MAX && r.isTensor() && r.role != step::Role::Loss)
      return invalid(
          describe(r, k, "result") +
          (r.role == step::Role::None ? " has no distopt.role"
                                      : " replaces no argument") +
          ": give it the distopt.role and distopt.name of the argument it "
          "updates (docs/step-abi.md)");
  }
  return DISTOPT_RT_OK;
}

namespace {
/// Whether one of `entry`'s results replaces argument `arg`.
bool replaces(const step::Interface &abi, const step::Entry &entry,
              size_t arg) {
  const step::Value &a = abi.args[arg];
  return std::any_of(
      entry.results.begin(), entry.results.end(), [&](const step::Value &r) {
        return (r.inPlaceArg && static_cast<size_t>(*r.inPlaceArg) == arg) ||
               (r.isTensor() && r.role == a.role && r.name == a.name);
      });
}

/// Whether `entry` (null: the whole step) reads or writes argument `arg`,
/// one that may be released: a gather entry its gathered parameter, a
/// reduce entry (and the whole step) the gradients it reduces.
bool touches(const step::Interface &abi, const step::Entry *entry, size_t arg) {
  if (!entry)
    return abi.args[arg].role == step::Role::Grad;
  const std::vector<int64_t> &reads = entry->kind == step::Entry::Kind::Gather
                                          ? entry->gathers
                                          : entry->reduces;
  return std::count(reads.begin(), reads.end(), static_cast<int64_t>(arg)) ||
         replaces(abi, *entry, arg);
}

/// In a step with gather entries (a ZeRO-3 driver's), the releasable
/// arguments start without buffers: the driver binds its own while a unit
/// runs, and the whole buffers are never all allocated at once.
bool startsReleased(const step::Interface &abi, size_t arg) {
  return releasable(abi, arg) &&
         std::any_of(abi.entries.begin(), abi.entries.end(),
                     [](const step::Entry &e) {
                       return e.kind == step::Entry::Kind::Gather;
                     });
}
} // namespace

bool distopt::rt::releasable(const step::Interface &abi, size_t arg) {
  const step::Value &v = abi.args[arg];
  if (!v.isTensor())
    return false;
  if (v.role == step::Role::GatheredParam)
    return true;
  if (v.role != step::Role::Grad)
    return false;
  // A gradient its reduce entry leaves in another argument (a shard): the
  // update reads that one, not this.
  for (const step::Entry &e : abi.entries)
    if (e.kind == step::Entry::Kind::Reduce &&
        std::count(e.reduces.begin(), e.reduces.end(),
                   static_cast<int64_t>(arg)))
      return !replaces(abi, e, arg);
  return false;
}

distopt_rt_status distopt::rt::requireBuffer(distopt_session *session,
                                             size_t arg,
                                             const std::string &what) {
  if (session->data[arg])
    return DISTOPT_RT_OK;
  return session->invalid(
      "cannot " + what + ": " +
      describe(session->step->abi.args[arg], arg, "argument") +
      " has no buffer (released, or never bound: a step with gather "
      "entries leaves its gathered parameters and gradient buckets to the "
      "driver); bind one first");
}

distopt_rt_status distopt::rt::requireIdle(distopt_session *session, size_t arg,
                                           const std::string &what) {
  const step::Interface &abi = session->step->abi;
  for (size_t k : session->comms.inFlight())
    if (touches(abi, &abi.entries[k], arg))
      return session->invalid(
          "cannot " + what + ": entry point '" + abi.entries[k].name +
          "', started and not finished, uses " +
          describe(abi.args[arg], arg, "argument") + " (wait for it first)");
  return DISTOPT_RT_OK;
}

distopt_rt_status distopt::rt::checkBuffers(distopt_session *session,
                                            const step::Entry *entry) {
  const step::Interface &abi = session->step->abi;
  for (size_t i = 0; i < abi.args.size(); ++i)
    if (abi.args[i].isTensor() && !session->data[i] && touches(abi, entry, i))
      return requireBuffer(session, i,
                           entry ? "run entry point '" + entry->name + "'"
                                 : std::string("run the step"));
  return DISTOPT_RT_OK;
}

namespace {
void freeBuffer(bool device, void *buffer) {
  if (device)
    distopt_rt_cuda_free(buffer);
  else
    _mlir_memref_to_llvm_free(buffer);
}
} // namespace

BufferKeeper::~BufferKeeper() {
  for (void *buffer : kept)
    freeBuffer(device, buffer);
}

void BufferKeeper::release(const std::shared_ptr<BufferKeeper> &keeper,
                           void *buffer) {
  // Only the session and the references it handed out share the keeper: a
  // count of one is the session's alone, which no other thread can raise.
  if (keeper.use_count() > 1)
    keeper->kept.push_back(buffer);
  else
    freeBuffer(keeper->device, buffer);
}

distopt_session::~distopt_session() {
  // Nothing may run on the buffers once they are freed.
  comms.wait();
  for (size_t i = 0; i < data.size(); ++i)
    if (owned[i] && data[i])
      BufferKeeper::release(keeper, data[i]);
  if (ownsComm && comm)
    distopt_rt_comm_destroy(comm);
  if (step)
    releaseStep(step);
}

extern "C" {

void distopt_session_default_options(distopt_session_options *options) {
  if (!options)
    return;
  *options = distopt_session_options{};
  options->lr = -1;
  options->seed = DISTOPT_SEED_OF_STEP;
}

distopt_rt_status distopt_session_create(distopt_step *step,
                                         const distopt_session_options *given,
                                         distopt_session **out) {
  if (!step || !out)
    return invalid("distopt_session_create: null step or output pointer");
  OperationScope scope(Operation::Create);
  distopt_session_options options;
  distopt_session_default_options(&options);
  if (given)
    options = *given;
  const step::Interface &abi = step->abi;
  // Every value is checked before the ranks meet: each rank refuses alone.
  int64_t threads = 0;
  std::string badThreads = resolveThreads(options.threads, threads);
  if (!badThreads.empty())
    return invalid("distopt_session_create: " + badThreads);
  if (options.timeout_seconds != 0)
    if (std::string bad = checkTimeout(options.timeout_seconds,
                                       "timeout_seconds (0: the default)");
        !bad.empty())
      return invalid("distopt_session_create: " + bad);
  if (options.lr != DISTOPT_LR_OF_STEP &&
      !(options.lr >= 0 && std::isfinite(options.lr)))
    return invalid("distopt_session_create: lr must be finite and "
                   "non-negative (DISTOPT_LR_OF_STEP: the compiled rate), "
                   "not " +
                   formatNumber(options.lr));
  double timeout =
      options.timeout_seconds > 0 ? options.timeout_seconds : defaultTimeout();
  auto session = std::make_unique<distopt_session>();
  session->step = step;
  session->threads = threads;
  retainStep(step);
  session->device = abi.device == "cuda";
  session->keeper = std::make_shared<BufferKeeper>(session->device);
  session->seed = options.seed != DISTOPT_SEED_OF_STEP
                      ? options.seed
                      : step->abi.seed.value_or(42);
  std::string backend = options.backend ? options.backend : "";
  distopt_rt_status status = DISTOPT_RT_OK;
  if (session->device) {
    // The step's collectives take device buffers (NCCL over the process's
    // world); the session's own exchanges take host buffers.
    if (options.mpi_comm || !backend.empty())
      return fail(DISTOPT_RT_UNAVAILABLE,
                  "a step compiled for cuda runs on the process's default "
                  "world; a communicator of the caller's is not supported "
                  "for it yet");
    if (distopt_rt_cuda_init(-1) != DISTOPT_RT_OK)
      return DISTOPT_RT_UNAVAILABLE; // the runtime's message says why
    status = distopt_rt_world(abi.worldSize, &session->stepComm);
    if (status == DISTOPT_RT_OK)
      status = distopt_rt_host_comm(abi.worldSize, &session->comm);
    session->ownsComm = status == DISTOPT_RT_OK;
  } else if (options.mpi_comm) {
    status = distopt_rt_comm_create_mpi(options.mpi_comm, abi.worldSize,
                                        timeout, &session->comm);
    session->stepComm = session->comm;
    session->ownsComm = status == DISTOPT_RT_OK;
  } else if (!backend.empty()) {
    status = distopt_rt_comm_create(backend.c_str(), abi.worldSize, timeout,
                                    &session->comm);
    session->stepComm = session->comm;
    session->ownsComm = status == DISTOPT_RT_OK;
  } else {
    // The process's world, shared by every session on it (borrowed).
    status = distopt_rt_world(abi.worldSize, &session->stepComm);
    session->comm = session->stepComm;
  }
  if (status != DISTOPT_RT_OK)
    return status;
  // Host collectives on device pointers would fault; NCCL's on host ones
  // would fail inside NCCL.
  if (session->stepComm->impl->onDevice() != session->device) {
    const char *env = std::getenv("DISTOPT_RT_BACKEND");
    std::string which = !backend.empty() ? backend : env ? env : "default";
    return session->invalid(
        std::string("a step compiled for ") + abi.device +
        (session->device ? " needs collectives on device buffers (nccl or "
                           "host-staged), not the "
                         : " needs collectives on host buffers, not the ") +
        which + " backend");
  }
  distopt_rt_comm_rank(session->comm, &session->rank);
  distopt_rt_comm_size(session->comm, &session->size);
  status = checkSameStep(session->comm, abi, session->rank);
  if (status == DISTOPT_RT_OK)
    status = splitGroups(session->stepComm, abi);
  if (status != DISTOPT_RT_OK)
    return status;

  if ((status =
           matchResults(abi, abi.results, session->resultArgs[&abi.results])) !=
      DISTOPT_RT_OK)
    return session->error(status, lastError());
  for (const step::Entry &entry : abi.entries)
    (void)matchResults(abi, entry.results, session->resultArgs[&entry.results]);
  session->lr = options.lr >= 0 ? options.lr : abi.lr.value_or(1e-3);
  // Accumulators: each adds the gradient argument of its name and shape,
  // on the host.
  for (size_t i = 0; i < abi.args.size(); ++i) {
    const step::Value &v = abi.args[i];
    if (v.role != step::Role::GradAccum)
      continue;
    if (session->device)
      return session->invalid(describe(v, i, "argument") +
                              ": gradient accumulation runs on the host; a "
                              "step compiled for cuda cannot accumulate yet");
    auto grad = std::find_if(abi.args.begin(), abi.args.end(),
                             [&](const step::Value &g) {
                               return g.role == step::Role::Grad &&
                                      g.name == v.name && g.shape == v.shape;
                             });
    if (grad == abi.args.end() || v.dtype->name != "f32")
      return session->invalid(
          describe(v, i, "argument") +
          " accumulates no f32 sum of a gradient argument of its name and "
          "shape (the gradients as bucket views cannot accumulate yet)");
    session->accumulators.emplace_back(i, grad - abi.args.begin());
  }
  session->data.assign(abi.args.size(), nullptr);
  session->owned.assign(abi.args.size(), false);
  session->programWrote.assign(abi.args.size(), false);
  session->scalars.assign(abi.results.size(), NAN);
  session->scalarState.assign(abi.args.size(), 0);
  for (size_t i = 0; i < abi.args.size(); ++i) {
    const step::Value &v = abi.args[i];
    if (!v.isTensor()) {
      std::string_view type = v.dtype->name;
      bool isFloat =
          type == "f32" || type == "f64" || type == "bf16" || type == "f16";
      bool known = (v.role == step::Role::LearningRate && isFloat) ||
                   (v.role == step::Role::Step && v.dtype->name == "i64") ||
                   v.role == step::Role::State ||
                   v.role == step::Role::Hyperparameter;
      if (!known)
        return session->invalid(
            describe(v, i, "argument") +
            " is a scalar the session cannot pass: only the "
            "learning rate (a float), the step number (i64), state and "
            "hyperparameters are (give it distopt.role \"lr\", \"step\", "
            "\"state\" or \"hyperparameter\")");
      session->scalarState[i] = v.initialValue.value_or(0);
      continue;
    }
    std::vector<char> host;
    void *buffer;
    if (startsReleased(abi, i)) {
      session->data[i] = nullptr;
      session->owned[i] = false;
      continue;
    }
    if (session->device) {
      status = distopt_rt_cuda_alloc(std::max<uint64_t>(v.bytes(), 1), &buffer);
      if (status != DISTOPT_RT_OK)
        return status;
      host.assign(v.bytes(), 0);
    } else {
      buffer = allocateHost(v.bytes());
      if (!buffer)
        return session->error(DISTOPT_RT_BACKEND_ERROR,
                              "out of memory allocating " +
                                  std::to_string(v.bytes()) + " bytes for " +
                                  describe(v, i, "argument"));
    }
    session->data[i] = buffer;
    session->owned[i] = true;
    if (v.init == step::Init::Randn || v.init == step::Init::RandnEachStep)
      drawNormal(v, session->device ? host.data() : buffer, session->seed);
    if (session->device &&
        (status = distopt_rt_cuda_copy(buffer, host.data(), v.bytes())) !=
            DISTOPT_RT_OK)
      return status;
  }
  // A rate given for a step with a rate per group is every group's.
  if (options.lr >= 0)
    setSessionRate(session.get(), session->lr);
  *out = session.release();
  return DISTOPT_RT_OK;
}

void distopt_session_destroy(distopt_session *session) { delete session; }

distopt_session_buffers *
distopt_session_retain_buffers(distopt_session *session) {
  if (!session) {
    invalid("distopt_session_retain_buffers: null session");
    return nullptr;
  }
  return new distopt_session_buffers{session->keeper};
}

void distopt_session_release_buffers(distopt_session_buffers *buffers) {
  delete buffers;
}

int64_t distopt_session_rank(const distopt_session *session) {
  return session ? session->rank : -1;
}

int64_t distopt_session_size(const distopt_session *session) {
  return session ? session->size : 0;
}

int64_t distopt_session_threads(const distopt_session *session) {
  return session ? session->threads : 0;
}

distopt_rt_comm *distopt_session_comm(const distopt_session *session) {
  return session ? session->comm : nullptr;
}

void *distopt_session_arg_data(distopt_session *session, int64_t arg) {
  if (!session || arg < 0 || arg >= static_cast<int64_t>(session->data.size()))
    return nullptr;
  if (session->step->abi.args[arg].isTensor() &&
      requireBuffer(session, arg,
                    "give argument #" + std::to_string(arg) + "'s buffer") !=
          DISTOPT_RT_OK)
    return nullptr;
  session->programWrote[arg] = true; // it may write through the pointer
  return session->data[arg];
}

distopt_rt_status distopt_session_bind(distopt_session *session, int64_t arg,
                                       void *data, int64_t bytes) {
  if (!session || arg < 0 ||
      arg >= static_cast<int64_t>(session->step->abi.args.size()))
    return invalid("distopt_session_bind: no argument #" + std::to_string(arg));
  const step::Value &v = session->step->abi.args[arg];
  std::string what = describe(v, arg, "argument");
  if (!v.isTensor())
    return session->invalid("cannot bind " + what + ": it is a scalar");
  if (distopt_rt_status status = requireIdle(session, arg, "bind " + what);
      status != DISTOPT_RT_OK)
    return status;
  void *fresh = data;
  if (data) {
    if (bytes != static_cast<int64_t>(v.bytes()))
      return session->invalid(
          "cannot bind " + what + ": " + std::to_string(bytes) +
          " bytes given, the step takes " + std::to_string(v.bytes()) + " (" +
          std::string(v.dtype->name) + ", " + std::to_string(v.numel()) +
          " elements)");
    if (reinterpret_cast<uintptr_t>(data) % v.dtype->bytes)
      return session->invalid("cannot bind " + what +
                              ": the buffer is not aligned to " +
                              std::to_string(v.dtype->bytes) + " bytes");
  } else if (session->device) {
    if (distopt_rt_cuda_alloc(std::max<uint64_t>(v.bytes(), 1), &fresh) !=
        DISTOPT_RT_OK)
      return DISTOPT_RT_BACKEND_ERROR;
    std::vector<char> zeros(v.bytes(), 0);
    distopt_rt_cuda_copy(fresh, zeros.data(), v.bytes());
  } else if (!(fresh = allocateHost(v.bytes()))) {
    return session->error(DISTOPT_RT_BACKEND_ERROR,
                          "out of memory for " + what);
  }
  if (session->owned[arg])
    BufferKeeper::release(session->keeper, session->data[arg]);
  session->data[arg] = fresh;
  session->owned[arg] = data == nullptr;
  session->programWrote[arg] = data != nullptr;
  return DISTOPT_RT_OK;
}

distopt_rt_status distopt_session_release(distopt_session *session,
                                          int64_t arg) {
  if (!session || arg < 0 ||
      arg >= static_cast<int64_t>(session->step->abi.args.size()))
    return invalid("distopt_session_release: no argument #" +
                   std::to_string(arg));
  const step::Interface &abi = session->step->abi;
  std::string what = "release " + describe(abi.args[arg], arg, "argument");
  if (!releasable(abi, static_cast<size_t>(arg)))
    return session->invalid(
        "cannot " + what +
        ": only gathered parameters and gradients that a reduce entry "
        "leaves reduced elsewhere can be left without a buffer");
  if (distopt_rt_status status = requireIdle(session, arg, what);
      status != DISTOPT_RT_OK)
    return status;
  if (session->owned[arg] && session->data[arg])
    BufferKeeper::release(session->keeper, session->data[arg]);
  session->data[arg] = nullptr;
  session->owned[arg] = false;
  return DISTOPT_RT_OK;
}

distopt_rt_status distopt_session_accumulate(distopt_session *session) {
  if (!session)
    return invalid("distopt_session_accumulate: null session");
  if (session->accumulators.empty())
    return session->invalid("the step does not accumulate gradients (give "
                            "its spec grad_accumulation)");
  const step::Interface &abi = session->step->abi;
  if (session->accumulated == abi.gradAccumulation - 1)
    return session->invalid(
        "accumulate() was called " + std::to_string(session->accumulated) +
        " times since the last step, and the step accumulates " +
        std::to_string(abi.gradAccumulation) +
        " micro-batches (grad_accumulation): the next micro-batch's "
        "gradients go to run()");
  // acc += gradient, converted to f32 a block at a time; then the gradient
  // buffer is zero for the next micro-batch's backward.
  constexpr int64_t kBlock = 4096;
  float converted[kBlock];
  for (auto [acc, grad] : session->accumulators)
    if (distopt_rt_status status =
            requireBuffer(session, grad, "accumulate its gradient");
        status != DISTOPT_RT_OK)
      return status;
  for (auto [acc, grad] : session->accumulators) {
    const step::Value &g = abi.args[grad];
    auto *sum = static_cast<float *>(session->data[acc]);
    const char *in = static_cast<const char *>(session->data[grad]);
    int64_t n = g.numel();
    for (int64_t first = 0; first < n; first += kBlock) {
      int64_t count = std::min(kBlock, n - first);
      convert(in + first * g.dtype->bytes,
              static_cast<distopt_rt_dtype>(g.dtype->runtimeCode), converted,
              DISTOPT_RT_F32, count);
      for (int64_t k = 0; k < count; ++k)
        sum[first + k] += converted[k];
    }
    std::memset(session->data[grad], 0, g.bytes());
  }
  ++session->accumulated;
  return DISTOPT_RT_OK;
}

distopt_rt_status
distopt_session_discard_accumulated(distopt_session *session) {
  if (!session)
    return invalid("distopt_session_discard_accumulated: null session");
  const step::Interface &abi = session->step->abi;
  for (auto [acc, grad] : session->accumulators)
    std::memset(session->data[acc], 0, abi.args[acc].bytes());
  session->accumulated = 0;
  return DISTOPT_RT_OK;
}

int64_t distopt_step_grad_accumulation(const distopt_step *step) {
  return step ? step->abi.gradAccumulation : 0;
}

int64_t distopt_session_steps_done(const distopt_session *session) {
  return session ? session->stepsDone : 0;
}

distopt_rt_status distopt_session_set_steps_done(distopt_session *session,
                                                 int64_t steps) {
  if (!session)
    return invalid("distopt_session_set_steps_done: null session");
  if (steps < 0 || steps == INT64_MAX)
    return session->invalid(
        "the steps done must be from 0 to INT64_MAX - 1 (the next step's "
        "number is one more), not " +
        std::to_string(steps));
  session->stepsDone = steps;
  return DISTOPT_RT_OK;
}

distopt_rt_status distopt_session_scalar(const distopt_session *session,
                                         int64_t result, double *value) {
  if (!session || !value || result < 0 ||
      result >= static_cast<int64_t>(session->scalars.size()))
    return invalid("distopt_session_scalar: no result #" +
                   std::to_string(result));
  // A skipped step (an overflow) has run, and its scalars say so, even
  // when it was the first and no step is counted as done. (A session that
  // resumed from a checkpoint reads NaN until its first step.)
  if (!session->ran && session->stepsDone == 0)
    return invalid("distopt_session_scalar: no step has run yet");
  *value = session->scalars[result];
  return DISTOPT_RT_OK;
}

double distopt_session_last_seconds(const distopt_session *session) {
  return session ? session->lastSeconds : 0;
}

} // extern "C"
