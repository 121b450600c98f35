//===- SessionTensors.cpp - logical tensors and checkpoints ----*- C++ -*-===//
//
// A model names whole tensors; a step may hold them as entries of flat
// buffers, as ZeRO shards spread over the ranks, or on one owner rank. This
// maps whole tensors to and from this rank's buffers, and saves and loads
// checkpoints of whole tensors (docs/checkpoint.md), so that a run resumes
// at any world size and layout.
//
//===----------------------------------------------------------------------===//

#include "Cuda.h"
#include "Step.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

using namespace distopt;
using namespace distopt::rt;

namespace {

distopt_rt_status invalid(const std::string &message) {
  return fail(DISTOPT_RT_INVALID_ARGUMENT, message);
}

distopt_rt_dtype rtType(const step::DType *dtype) {
  return static_cast<distopt_rt_dtype>(dtype->runtimeCode);
}

/// A scalar a checkpoint keeps (as a 0-d tensor): state of a type it holds,
/// and the hyperparameters a program may have changed.
bool isScalarState(const step::Value &v) {
  return !v.isTensor() &&
         (v.role == step::Role::State ||
          v.role == step::Role::Hyperparameter) &&
         v.dtype->runtimeCode >= 0;
}

bool isCheckpointed(const step::Value &v) {
  return v.isTensor() &&
         (v.role == step::Role::Param || v.role == step::Role::MainParam ||
          v.role == step::Role::State);
}

/// Argument `i`'s bytes on the host: its buffer, or (a CUDA step) a copy of
/// it in `scratch`.
const char *hostBytes(distopt_session *s, size_t i,
                      std::vector<char> &scratch) {
  const step::Value &v = s->step->abi.args[i];
  if (!s->device)
    return static_cast<const char *>(s->data[i]);
  scratch.resize(v.bytes());
  distopt_rt_cuda_copy(scratch.data(), s->data[i], v.bytes());
  return scratch.data();
}

/// Writes `count` bytes to argument `i` at byte `at`.
void store(distopt_session *s, size_t i, size_t at, const void *from,
           size_t count) {
  char *to = static_cast<char *>(s->data[i]) + at;
  if (s->device)
    distopt_rt_cuda_copy(to, from, count);
  else
    std::memcpy(to, from, count);
}

/// The tensor at `index`, or null with an error.
const LogicalTensor *tensorAt(const distopt_session *s, int64_t index,
                              const char *call) {
  if (!s || index < 0 ||
      index >= static_cast<int64_t>(s->step->tensors.size())) {
    fail(DISTOPT_RT_INVALID_ARGUMENT,
         std::string(call) + ": no tensor #" + std::to_string(index));
    return nullptr;
  }
  return &s->step->tensors[index];
}

bool isWhole(const LogicalTensor &t, const step::Value &arg) {
  return t.entry < 0 || isReplicatedLayout(arg);
}

/// Fills this rank's buffers from `ckpt`, which checkFits accepted; with
/// `write` false, only checks that it holds every part this rank needs.
distopt_rt_status restore(distopt_session *s,
                          const checkpoint::Checkpoint &ckpt,
                          const std::string &path, bool write) {
  std::map<std::tuple<std::string, std::string, int64_t>,
           const checkpoint::Tensor *>
      index;
  for (const checkpoint::Tensor &t : ckpt.tensors)
    index[{t.role, t.name, t.rank}] = &t;
  auto lookup = [&](const LogicalTensor &t,
                    int64_t rank) -> const checkpoint::Tensor * {
    auto it = index.find({std::string(step::roleName(t.role)), t.name,
                          t.savedPerRank() ? rank : -1});
    return it == index.end() ? nullptr : it->second;
  };
  for (size_t i = 0; i < s->step->abi.args.size(); ++i) {
    const step::Value &v = s->step->abi.args[i];
    if (!isScalarState(v))
      continue;
    std::string role(step::roleName(v.role));
    auto it = index.find({role, v.name, -1});
    // A checkpoint of a step with compiled hyperparameters has none: the
    // session keeps its own.
    if (it == index.end() && v.role == step::Role::Hyperparameter)
      continue;
    if (it == index.end() || it->second->data.size() != v.dtype->bytes)
      return s->invalid(path + ": has no '" + role + " " + v.name +
                        "' scalar (" + std::string(v.dtype->name) +
                        ") for this step");
    if (write)
      convert(it->second->data.data(), rtType(v.dtype), &s->scalarState[i],
              DISTOPT_RT_F64, 1);
  }
  for (const LogicalTensor &t : s->step->tensors) {
    const step::Value &arg = s->step->abi.args[t.arg];
    if (!isCheckpointed(arg))
      continue;
    const checkpoint::Tensor *saved = lookup(t, s->rank);
    if (!saved || saved->data.size() != t.bytes())
      return s->invalid(path + ": has no '" +
                        std::string(step::roleName(t.role)) + " " + t.name +
                        "' of " + std::to_string(t.bytes()) +
                        " bytes for this step");
    if (!write)
      continue;
    size_t element = t.dtype->bytes;
    forEachLocalPart(
        t, arg, s->rank, [&](int64_t first, int64_t at, int64_t count) {
          store(s, t.arg, at * element, saved->data.data() + first * element,
                count * element);
        });
  }
  return DISTOPT_RT_OK;
}

} // namespace

distopt_rt_status distopt::rt::startMainParams(distopt_session *s) {
  if (s->mainParamsStarted)
    return DISTOPT_RT_OK;
  s->mainParamsStarted = true;
  const std::vector<step::Value> &args = s->step->abi.args;
  std::vector<char> scratch, converted;
  for (const LogicalTensor &main : s->step->tensors) {
    if (main.role != step::Role::MainParam || s->programWrote[main.arg])
      continue;
    const LogicalTensor *param = s->step->find("param", main.name);
    if (!param)
      continue; // a main parameter of its own: the program's to fill
    const step::Value &from = args[param->arg];
    const char *local = hostBytes(s, param->arg, scratch);
    size_t in = param->dtype->bytes, out = main.dtype->bytes;
    distopt_rt_status status = DISTOPT_RT_OK;
    forEachLocalPart(
        main, args[main.arg], s->rank,
        [&](int64_t first, int64_t at, int64_t count) {
          // The parameter's same elements, where this rank holds them: whole,
          // or in a shard of the same layout (ZeRO-3).
          const char *source = nullptr;
          if (isWhole(*param, from))
            source = local + (param->offset + first) * in;
          else
            forEachLocalPart(*param, from, s->rank,
                             [&](int64_t pFirst, int64_t pAt, int64_t pCount) {
                               if (pFirst <= first &&
                                   first + count <= pFirst + pCount)
                                 source = local + (pAt + first - pFirst) * in;
                             });
          if (!source) {
            status = s->invalid("main parameter '" + main.name +
                                "' cannot start from its parameter: this rank "
                                "does not hold the elements it needs; write it "
                                "(distopt_session_write_tensor) before the "
                                "first step");
            return;
          }
          converted.resize(count * out);
          convert(source, rtType(param->dtype), converted.data(),
                  rtType(main.dtype), count);
          store(s, main.arg, at * out, converted.data(), count * out);
        });
    if (status != DISTOPT_RT_OK)
      return status;
  }
  return DISTOPT_RT_OK;
}

extern "C" {

int64_t distopt_step_num_tensors(const distopt_step *step) {
  return step ? static_cast<int64_t>(step->tensors.size()) : 0;
}

distopt_rt_status distopt_step_tensor_info(const distopt_step *step,
                                           int64_t index,
                                           distopt_step_tensor *out) {
  if (!step || !out || index < 0 ||
      index >= static_cast<int64_t>(step->tensors.size()))
    return invalid("distopt_step_tensor_info: no tensor #" +
                   std::to_string(index));
  const LogicalTensor &t = step->tensors[index];
  out->role = step::roleName(t.role).data(); // literals end in a NUL
  out->name = t.name.c_str();
  out->dtype = t.dtype->name.data();
  out->dtype_code = t.dtype->runtimeCode;
  out->per_rank = !t.perRank   ? 0
                  : t.rankMean ? DISTOPT_STEP_PER_RANK_MEAN
                               : DISTOPT_STEP_PER_RANK_OWN;
  out->ndim = static_cast<int64_t>(t.shape.size());
  out->shape = t.shape.data();
  out->numel = t.numel;
  out->bytes = static_cast<int64_t>(t.bytes());
  out->arg = static_cast<int64_t>(t.arg);
  out->whole = isWhole(t, step->abi.args[t.arg]);
  return DISTOPT_RT_OK;
}

int64_t distopt_step_find_tensor(const distopt_step *step, const char *role,
                                 const char *name) {
  if (!step || !role || !name)
    return -1;
  const LogicalTensor *t = step->find(role, name);
  return t ? t - step->tensors.data() : -1;
}

void *distopt_session_tensor_data(distopt_session *session, int64_t index) {
  const LogicalTensor *t =
      tensorAt(session, index, "distopt_session_tensor_data");
  if (!t)
    return nullptr;
  if (!isWhole(*t, session->step->abi.args[t->arg])) {
    session->invalid("'" + std::string(step::roleName(t->role)) + " " +
                     t->name +
                     "' is held as shards over the ranks (ZeRO): no rank "
                     "holds all of it (read it with "
                     "distopt_session_read_tensor)");
    return nullptr;
  }
  if (requireBuffer(session, t->arg, "view '" + t->name + "'") != DISTOPT_RT_OK)
    return nullptr;
  session->programWrote[t->arg] = true; // it may write through the view
  return static_cast<char *>(session->data[t->arg]) +
         t->offset * t->dtype->bytes;
}

distopt_rt_status distopt_session_write_tensor(distopt_session *session,
                                               int64_t index, const void *data,
                                               int64_t bytes) {
  const LogicalTensor *t =
      tensorAt(session, index, "distopt_session_write_tensor");
  if (!t)
    return DISTOPT_RT_INVALID_ARGUMENT;
  if (!data || bytes != static_cast<int64_t>(t->bytes()))
    return session->invalid(
        "cannot write '" + t->name + "': " + std::to_string(bytes) +
        " bytes given, it has " + std::to_string(t->bytes()));
  if (distopt_rt_status status =
          requireBuffer(session, t->arg, "write '" + t->name + "'");
      status != DISTOPT_RT_OK)
    return status;
  if (distopt_rt_status status =
          requireIdle(session, t->arg, "write '" + t->name + "'");
      status != DISTOPT_RT_OK)
    return status;
  size_t element = t->dtype->bytes;
  forEachLocalPart(*t, session->step->abi.args[t->arg], session->rank,
                   [&](int64_t first, int64_t at, int64_t count) {
                     store(session, t->arg, at * element,
                           static_cast<const char *>(data) + first * element,
                           count * element);
                   });
  session->programWrote[t->arg] = true;
  return DISTOPT_RT_OK;
}

distopt_rt_status distopt_session_read_tensor(distopt_session *session,
                                              int64_t index, void *out,
                                              int64_t bytes) {
  const LogicalTensor *t =
      tensorAt(session, index, "distopt_session_read_tensor");
  if (!t)
    return DISTOPT_RT_INVALID_ARGUMENT;
  if (!out || bytes != static_cast<int64_t>(t->bytes()))
    return session->invalid(
        "cannot read '" + t->name + "': " + std::to_string(bytes) +
        " bytes given, it has " + std::to_string(t->bytes()));
  if (distopt_rt_status status = session->comms.wait(); status != DISTOPT_RT_OK)
    return status;
  if (distopt_rt_status status =
          requireBuffer(session, t->arg, "read '" + t->name + "'");
      status != DISTOPT_RT_OK)
    return status;
  const step::Value &arg = session->step->abi.args[t->arg];
  std::vector<char> scratch;
  const char *local = hostBytes(session, t->arg, scratch);
  OperationScope scope(Operation::Read);
  size_t element = t->dtype->bytes;
  char *to = static_cast<char *>(out);
  if (t->rankMean) // the ranks' copies stand for their mean
    return session->collective(distopt_rt_all_reduce(
        session->comm, local + t->offset * element, to, t->numel,
        rtType(t->dtype), DISTOPT_RT_AVG, 1.0, rtType(t->dtype)));
  if (isWhole(*t, arg)) {
    std::memcpy(to, local + t->offset * element, t->bytes());
    return DISTOPT_RT_OK;
  }
  if (!arg.shardOf) // greedy: whole on its owner
    return session->collective(distopt_rt_broadcast(
        session->comm, local + t->offset * element, to, t->numel,
        rtType(t->dtype), t->owner, rtType(t->dtype)));
  // A flat shard: each of the ranks 0..K-1, whose shards are the K parts,
  // sends what its part holds of it.
  int64_t shard = arg.numel();
  for (int64_t r = t->offset / shard;
       r < arg.shardParts() && r * shard < t->offset + t->numel; ++r) {
    int64_t lo = std::max(t->offset, r * shard);
    int64_t hi = std::min(t->offset + t->numel, (r + 1) * shard);
    char *part = to + (lo - t->offset) * element;
    const char *send =
        r == session->rank ? local + (lo - r * shard) * element : part;
    distopt_rt_status status = session->collective(
        distopt_rt_broadcast(session->comm, send, part, hi - lo,
                             rtType(t->dtype), r, rtType(t->dtype)));
    if (status != DISTOPT_RT_OK)
      return status;
  }
  return DISTOPT_RT_OK;
}

distopt_rt_status distopt_session_save(distopt_session *session,
                                       const char *path) {
  if (!session || !path)
    return invalid("distopt_session_save: null session or path");
  if (distopt_rt_status status = session->comms.wait(); status != DISTOPT_RT_OK)
    return status;
  OperationScope scope(Operation::Save);
  checkpoint::Checkpoint ckpt;
  ckpt.worldSize = session->size;
  ckpt.step = session->stepsDone;
  ckpt.model = session->step->abi.model;
  const step::Interface &abi = session->step->abi;
  // Every rank takes part in the gathers; rank 0 keeps and writes them.
  for (size_t i = 0; i < abi.args.size(); ++i) {
    const step::Value &v = abi.args[i];
    if (!isCheckpointed(v))
      continue;
    std::vector<char> scratch;
    const char *local = hostBytes(session, i, scratch);
    // Gathered from every rank; a flat shard's buffer is the first K
    // ranks' parts (ranks K.. hold replicas of them under hybrid sharding).
    std::vector<char> all;
    if (v.rankMean) { // the copies' mean, which every rank resumes from
      all.resize(v.bytes());
      distopt_rt_status status = session->collective(distopt_rt_all_reduce(
          session->comm, local, all.data(), v.numel(), rtType(v.dtype),
          DISTOPT_RT_AVG, 1.0, rtType(v.dtype)));
      if (status != DISTOPT_RT_OK)
        return status;
      local = all.data();
    } else if (v.perRank || v.shardOf) {
      all.resize(v.bytes() * session->size);
      distopt_rt_status status = session->collective(
          distopt_rt_all_gather(session->comm, local, all.data(), v.numel(),
                                rtType(v.dtype), rtType(v.dtype)));
      if (status != DISTOPT_RT_OK)
        return status;
    }
    std::string role(step::roleName(v.role));
    auto add = [&](std::string name, const std::vector<int64_t> &shape,
                   const char *data, size_t bytes, int64_t rank) {
      checkpoint::Tensor t{
          role, std::move(name), std::string(v.dtype->name), shape, rank, {}};
      t.data.assign(data, data + bytes);
      ckpt.tensors.push_back(std::move(t));
    };
    if (v.savedPerRank()) {
      for (int64_t r = 0; r < session->size; ++r)
        add(v.name, *v.shape, all.data() + r * v.bytes(), v.bytes(), r);
      continue;
    }
    if (v.layout.empty()) {
      add(v.name, *v.shape, local, v.bytes(), -1);
      continue;
    }
    size_t element = v.dtype->bytes;
    for (const step::LayoutEntry &e : v.layout) {
      size_t bytes = e.numel() * element;
      std::vector<char> owned;
      const char *data = v.shardOf ? all.data() + e.offset * element
                                   : local + e.offset * element;
      if (e.owner) {
        owned.resize(bytes);
        distopt_rt_status status = session->collective(
            distopt_rt_broadcast(session->comm, data, owned.data(), e.numel(),
                                 rtType(v.dtype), *e.owner, rtType(v.dtype)));
        if (status != DISTOPT_RT_OK)
          return status;
        data = owned.data();
      }
      add(checkpoint::logicalName(role, v.name, e.name), e.shape, data, bytes,
          -1);
    }
  }
  // Scalar state (a loss scale) and hyperparameters: 0-d tensors, the same
  // on every rank.
  for (size_t i = 0; i < abi.args.size(); ++i) {
    const step::Value &v = abi.args[i];
    if (!isScalarState(v))
      continue;
    checkpoint::Tensor t{std::string(step::roleName(v.role)),
                         v.name,
                         std::string(v.dtype->name),
                         {},
                         -1,
                         std::vector<char>(v.dtype->bytes)};
    convert(&session->scalarState[i], DISTOPT_RT_F64, t.data.data(),
            rtType(v.dtype), 1);
    ckpt.tensors.push_back(std::move(t));
  }
  int64_t failed = 0;
  std::string error;
  if (session->rank == 0) {
    // Tests of atomic saves: the process is killed part way through.
    const char *killAfter = std::getenv("DISTOPT_CHECKPOINT_KILL_AFTER_BYTES");
    error =
        checkpoint::write(path, ckpt, killAfter ? std::atoll(killAfter) : -1);
    failed = !error.empty();
  }
  distopt_rt_status status = session->collective(distopt_rt_broadcast(
      session->comm, &failed, &failed, 1, DISTOPT_RT_I64, 0, DISTOPT_RT_I64));
  if (status != DISTOPT_RT_OK)
    return status;
  if (failed)
    return session->error(DISTOPT_RT_BACKEND_ERROR,
                          session->rank == 0
                              ? error
                              : "rank 0 could not save the checkpoint " +
                                    std::string(path));
  return DISTOPT_RT_OK;
}

distopt_rt_status distopt_session_load(distopt_session *session,
                                       const char *path,
                                       int64_t *savedWorldSize) {
  if (!session || !path)
    return invalid("distopt_session_load: null session or path");
  if (distopt_rt_status status = session->comms.wait(); status != DISTOPT_RT_OK)
    return status;
  OperationScope scope(Operation::Load);
  std::string error;
  json::Expected<checkpoint::Checkpoint> ckpt = checkpoint::read(path);
  if (!ckpt)
    error = ckpt.error();
  else if (std::string misfit =
               checkpoint::checkFits(*ckpt, session->step->abi);
           !misfit.empty())
    error = std::string(path) + ": " + misfit;
  if (error.empty() && session->broken)
    error = "an earlier step or collective of this session failed part way; "
            "create a new session to load into";
  if (error.empty() && restore(session, *ckpt, path, false) != DISTOPT_RT_OK)
    error = lastError();
  // Every rank resumes, or none (and none changes a buffer before all
  // agree): a rank that could not read would run from other values than
  // its peers.
  distopt_rt_status status;
  int64_t mine = !error.empty(), any = 0;
  status = session->collective(
      distopt_rt_all_reduce(session->comm, &mine, &any, 1, DISTOPT_RT_I64,
                            DISTOPT_RT_MAX, 1, DISTOPT_RT_I64));
  if (status != DISTOPT_RT_OK)
    return status;
  if (!error.empty())
    return session->invalid(error);
  if (any)
    return session->invalid("another rank could not load " + std::string(path));
  // A checkpoint holds the main parameters it resumes.
  session->mainParamsStarted = true;
  if ((status = restore(session, *ckpt, path, true)) != DISTOPT_RT_OK)
    return status;
  session->stepsDone = ckpt->step;
  if (savedWorldSize)
    *savedWorldSize = ckpt->worldSize;
  return DISTOPT_RT_OK;
}

} // extern "C"
