//===- Step.cpp - loading a compiled step and describing it -----*- C++ -*-===//
//
// distopt_step_open loads a library distopt-compile wrote, reads the
// interface it carries with the step-interface reader (the one definition,
// lib/StepInterface), and lists the logical tensors the interface lays out.
//
//===----------------------------------------------------------------------===//

#include "Step.h"

#include <dlfcn.h>

using namespace distopt;
using namespace distopt::rt;

namespace distopt::rt {

bool isReplicatedLayout(const step::Value &value) {
  if (value.shardOf)
    return false;
  for (const step::LayoutEntry &e : value.layout)
    if (e.owner)
      return false;
  return true;
}

void retainStep(distopt_step *step) {
  std::lock_guard<std::mutex> lock(step->lifetime);
  ++step->sessions;
}

void releaseStep(distopt_step *step) {
  {
    std::lock_guard<std::mutex> lock(step->lifetime);
    if (--step->sessions > 0 || !step->closed)
      return;
  }
  delete step;
}

} // namespace distopt::rt

distopt_step::~distopt_step() {
  if (handle)
    dlclose(handle);
}

namespace {

bool isLogical(step::Role role) {
  return role == step::Role::Param || role == step::Role::Grad ||
         role == step::Role::MainParam || role == step::Role::State;
}

ValueView viewOf(const step::Value &v) {
  return {std::string(step::roleName(v.role)),
          std::string(step::initName(v.init)),
          v.shape.value_or(std::vector<int64_t>{})};
}

void fillValue(const step::Value &v, const ValueView &view,
               distopt_step_value *out) {
  out->role = view.role.c_str();
  out->name = v.name.c_str();
  out->dtype = v.dtype->name.data(); // the table's literals end in a NUL
  out->dtype_code = v.dtype->runtimeCode;
  out->is_tensor = v.isTensor();
  out->ndim = static_cast<int64_t>(view.shape.size());
  out->shape = view.shape.data();
  out->numel = v.isTensor() ? v.numel() : 1;
  out->bytes = static_cast<int64_t>(out->numel * v.dtype->bytes);
  out->init = view.init.c_str();
  out->per_rank = !v.perRank   ? 0
                  : v.rankMean ? DISTOPT_STEP_PER_RANK_MEAN
                               : DISTOPT_STEP_PER_RANK_OWN;
  out->shard_of = v.shardOf;
  out->in_place_arg = v.inPlaceArg.value_or(-1);
  out->layout_entries = static_cast<int64_t>(v.layout.size());
}

/// Makes this library's symbols visible to libraries loaded after it: a
/// compiled step calls distopt_rt_*, and a host such as Python's ctypes
/// loads this library without RTLD_GLOBAL.
void exportRuntimeSymbols() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(&distopt_step_open), &info) &&
      info.dli_fname)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
}

} // namespace

const LogicalTensor *distopt_step::find(std::string_view role,
                                        std::string_view name) const {
  for (const LogicalTensor &t : tensors)
    if (step::roleName(t.role) == role && t.name == name)
      return &t;
  return nullptr;
}

extern "C" {

int distopt_step_api_version(void) { return DISTOPT_STEP_API_VERSION; }

distopt_rt_status distopt_step_open(const char *path, distopt_step **out) {
  if (!path || !out)
    return fail(DISTOPT_RT_INVALID_ARGUMENT,
                "distopt_step_open: null path or output pointer");
  exportRuntimeSymbols();
  // A bare file name would make dlopen search the library path.
  std::string file = path;
  if (file.find('/') == std::string::npos)
    file = "./" + file;
  void *handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    return fail(DISTOPT_RT_INVALID_ARGUMENT,
                std::string("cannot load ") + path + ": " + dlerror());
  auto entry =
      reinterpret_cast<PackedEntry>(dlsym(handle, "distopt_step_packed"));
  auto *text = static_cast<const char *>(dlsym(handle, "distopt_step_abi"));
  if (!entry || !text) {
    dlclose(handle);
    return fail(DISTOPT_RT_INVALID_ARGUMENT,
                std::string(path) +
                    " is not a step compiled by distopt-compile");
  }
  json::Expected<step::Interface> abi = step::parseInterface(text);
  if (!abi) {
    dlclose(handle);
    return fail(DISTOPT_RT_INVALID_ARGUMENT,
                std::string(path) + ": " + abi.error());
  }
  auto step = std::make_unique<distopt_step>();
  for (const step::Entry &e : abi->entries) {
    auto point = reinterpret_cast<PackedEntry>(
        dlsym(handle, ("distopt_step_packed_" + e.name).c_str()));
    if (!point) {
      dlclose(handle);
      return fail(DISTOPT_RT_INVALID_ARGUMENT,
                  std::string(path) + ": its interface lists entry point '" +
                      e.name + "', which it does not export");
    }
    step->entries.push_back(point);
  }
  step->handle = handle;
  step->entry = entry;
  step->json = text;
  step->abi = std::move(*abi);
  for (const step::Value &v : step->abi.args)
    step->argViews.push_back(viewOf(v));
  for (const step::Value &v : step->abi.results)
    step->resultViews.push_back(viewOf(v));
  for (size_t i = 0; i < step->abi.args.size(); ++i) {
    const step::Value &v = step->abi.args[i];
    if (!v.isTensor() || !isLogical(v.role))
      continue;
    if (v.layout.empty()) {
      step->tensors.push_back({v.role, v.name, v.dtype, *v.shape, v.numel(), i,
                               -1, 0, -1, v.perRank, v.rankMean});
      continue;
    }
    std::string_view role = step::roleName(v.role);
    for (size_t k = 0; k < v.layout.size(); ++k) {
      const step::LayoutEntry &e = v.layout[k];
      step->tensors.push_back(
          {v.role, checkpoint::logicalName(role, v.name, e.name), v.dtype,
           e.shape, e.numel(), i, static_cast<int64_t>(k), e.offset,
           e.owner.value_or(-1), false});
    }
  }
  *out = step.release();
  return DISTOPT_RT_OK;
}

void distopt_step_close(distopt_step *step) {
  if (!step)
    return;
  {
    // Sessions left open still run the library's code and read the
    // interface: the last one frees the step.
    std::lock_guard<std::mutex> lock(step->lifetime);
    step->closed = true;
    if (step->sessions > 0)
      return;
  }
  delete step;
}

const char *distopt_step_interface(const distopt_step *step) {
  return step ? step->json.c_str() : "";
}

int64_t distopt_step_world_size(const distopt_step *step) {
  return step ? step->abi.worldSize : 0;
}

const char *distopt_step_device(const distopt_step *step) {
  return step ? step->abi.device.c_str() : "";
}

int64_t distopt_step_num_args(const distopt_step *step) {
  return step ? static_cast<int64_t>(step->abi.args.size()) : 0;
}

int64_t distopt_step_num_results(const distopt_step *step) {
  return step ? static_cast<int64_t>(step->abi.results.size()) : 0;
}

distopt_rt_status distopt_step_arg(const distopt_step *step, int64_t index,
                                   distopt_step_value *value) {
  if (!step || !value || index < 0 ||
      index >= static_cast<int64_t>(step->abi.args.size()))
    return fail(DISTOPT_RT_INVALID_ARGUMENT,
                "distopt_step_arg: no argument #" + std::to_string(index));
  fillValue(step->abi.args[index], step->argViews[index], value);
  return DISTOPT_RT_OK;
}

distopt_rt_status distopt_step_result(const distopt_step *step, int64_t index,
                                      distopt_step_value *value) {
  if (!step || !value || index < 0 ||
      index >= static_cast<int64_t>(step->abi.results.size()))
    return fail(DISTOPT_RT_INVALID_ARGUMENT,
                "distopt_step_result: no result #" + std::to_string(index));
  fillValue(step->abi.results[index], step->resultViews[index], value);
  return DISTOPT_RT_OK;
}

distopt_rt_status distopt_step_layout(const distopt_step *step, int64_t arg,
                                      int64_t entry,
                                      distopt_step_layout_entry *out) {
  if (!step || !out || arg < 0 ||
      arg >= static_cast<int64_t>(step->abi.args.size()) || entry < 0 ||
      entry >= static_cast<int64_t>(step->abi.args[arg].layout.size()))
    return fail(DISTOPT_RT_INVALID_ARGUMENT,
                "distopt_step_layout: no entry #" + std::to_string(entry) +
                    " in argument #" + std::to_string(arg));
  const step::LayoutEntry &e = step->abi.args[arg].layout[entry];
  out->name = e.name.c_str();
  out->offset = e.offset;
  out->ndim = static_cast<int64_t>(e.shape.size());
  out->shape = e.shape.data();
  out->numel = e.numel();
  out->owner = e.owner.value_or(-1);
  return DISTOPT_RT_OK;
}

int64_t distopt_step_find_arg(const distopt_step *step, const char *role,
                              const char *name) {
  if (!step || !role || !name)
    return -1;
  for (size_t i = 0; i < step->abi.args.size(); ++i)
    if (step::roleName(step->abi.args[i].role) == role &&
        step->abi.args[i].name == name)
      return static_cast<int64_t>(i);
  return -1;
}

} // extern "C"
