//===- Session.cpp - a loaded step and the buffers of its run ---*- C++ -*-===//
//
// Loading a compiled step, building its arguments from its interface
// (docs/step-abi.md), running it a step at a time and feeding each result
// back to the argument of the same role and name.
//
//===----------------------------------------------------------------------===//

#include "Session.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <dlfcn.h>

namespace distopt::run {

/// MLIR marks buffers of constant globals with this allocated pointer.
constexpr uintptr_t kGlobalMarker = 0xdeadbeef;

void DeviceMirror::upload(size_t i, const Slot &slot, const Buffer &host) {
  if (!buffers[i]) {
    check(distopt_rt_cuda_alloc(slot.bytes(), &buffers[i]),
          "allocating device memory");
    bases[i] = buffers[i];
  }
  check(distopt_rt_cuda_copy(buffers[i], host.aligned, slot.bytes()),
        "copying to the device");
}

void DeviceMirror::download(size_t i, const Slot &slot, Buffer &host) {
  check(distopt_rt_cuda_copy(host.aligned, buffers[i], slot.bytes()),
        "copying from the device");
}

void DeviceMirror::release(std::vector<void *> allocations) {
  std::sort(allocations.begin(), allocations.end());
  allocations.erase(std::unique(allocations.begin(), allocations.end()),
                    allocations.end());
  for (void *base : allocations)
    if (base && std::find(bases.begin(), bases.end(), base) == bases.end())
      check(distopt_rt_cuda_free(base), "freeing device memory");
}

bool loadStep(const std::string &library, LoadedStep &step) {
  // A bare file name would make dlopen search the library path.
  std::string path =
      library.find('/') == std::string::npos ? "./" + library : library;
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    llvm::errs() << "distopt-run: cannot load " << library << ": " << dlerror()
                 << "\n";
    return false;
  }
  step.entry =
      reinterpret_cast<void (*)(void **)>(dlsym(handle, "distopt_step_packed"));
  auto *abiText = static_cast<const char *>(dlsym(handle, "distopt_step_abi"));
  if (!step.entry || !abiText) {
    llvm::errs() << "distopt-run: " << library
                 << " is not a step compiled by distopt-compile\n";
    return false;
  }
  llvm::Expected<step::Interface> abi = step::parseInterface(abiText);
  if (!abi) {
    llvm::errs() << "distopt-run: " << library << ": "
                 << llvm::toString(abi.takeError()) << "\n";
    return false;
  }
  step.abi = std::move(*abi);
  return true;
}

void checkSameCollectives(distopt_rt_comm *comm, const step::Interface &abi) {
  uint64_t fingerprint = abi.collectiveFingerprint;
  int64_t count = abi.collectiveCount;
  int64_t mine[2] = {static_cast<int64_t>(fingerprint), count};
  int64_t lowest[2], highest[2];
  check(distopt_rt_all_reduce(comm, mine, lowest, 2, DISTOPT_RT_I64,
                              DISTOPT_RT_MIN, 1, DISTOPT_RT_I64),
        "comparing the ranks' steps");
  check(distopt_rt_all_reduce(comm, mine, highest, 2, DISTOPT_RT_I64,
                              DISTOPT_RT_MAX, 1, DISTOPT_RT_I64),
        "comparing the ranks' steps");
  if (lowest[0] != highest[0] || lowest[1] != highest[1])
    die("the ranks run different steps: this rank's has " +
        std::to_string(count) + " collectives with fingerprint " +
        llvm::utohexstr(fingerprint, /*LowerCase=*/true) +
        ", another rank's differ; run the same compiled step on every rank");
}

void Session::open(LoadedStep loaded, double lrOverride, bool lrGiven) {
  step = std::move(loaded);
  const step::Interface &abi = step.abi;
  int64_t compiledSize = abi.worldSize;
  device.enabled = abi.device == "cuda";
  if (device.enabled) {
    // Loading the library loaded its kernels (or recorded why not), and the
    // runtime's message says which function failed.
    if (distopt_rt_cuda_init(-1) != DISTOPT_RT_OK)
      die(distopt_rt_last_error());
    // The step's collectives take device buffers (NCCL, the run's world);
    // this driver's own (checks, checkpoints) take host buffers.
    distopt_rt_comm *stepComm = nullptr;
    check(distopt_rt_world(compiledSize, &stepComm),
          "starting the step's communicator");
    check(distopt_rt_host_comm(compiledSize, &comm),
          "starting the host communicator");
  } else {
    check(distopt_rt_world(compiledSize, &comm), "starting the communicator");
  }
  check(distopt_rt_comm_rank(comm, &myRank), "rank");
  check(distopt_rt_comm_size(comm, &worldSize), "size");
  lr = lrGiven ? lrOverride : abi.lr.value_or(1e-3);
  // torch.optim's rule: a learning rate is a finite, non-negative number.
  if (!std::isfinite(lr) || lr < 0)
    die("the learning rate must be finite and non-negative, got " +
        std::to_string(lr));
  checkSameCollectives(comm, abi);

  for (const step::Value &v : abi.args)
    args.push_back(toSlot(v));
  for (const step::Value &v : abi.results)
    results.push_back(toSlot(v));

  // Argument buffers, by position; results map back by (role, name).
  buffers.resize(args.size());
  device.buffers.assign(args.size(), nullptr);
  device.bases.assign(args.size(), nullptr);
  llvm::StringMap<size_t> argOf;
  for (size_t i = 0; i < args.size(); ++i) {
    const Slot &slot = args[i];
    if (!slot.tensor)
      continue;
    buffers[i] = allocate(slot.bytes());
    argOf[slot.role + "/" + slot.name] = i;
    if (slot.role == "param" || slot.role == "main_param")
      fillParameter(slot, buffers[i]);
    else if (slot.init == "randn" || slot.init == "randn_each_step")
      fillNormal(slot, buffers[i], 42);
  }
  for (const Slot &r : results)
    if (!r.tensor)
      die("result '" + r.role + " " + r.name +
          "' is a scalar; only tensor results are supported yet");
  resultArg.assign(results.size(), SIZE_MAX);
  for (size_t k = 0; k < results.size(); ++k) {
    auto it = argOf.find(results[k].role + "/" + results[k].name);
    if (it != argOf.end())
      resultArg[k] = it->second;
    else if (results[k].role != "loss")
      // Not fed back, the next step would read a stale argument.
      die("result #" + std::to_string(k) +
          (results[k].role.empty()
               ? std::string(" has no distopt.role")
               : " (" + results[k].role + " '" + results[k].name +
                     "') replaces no argument") +
          ": give it the distopt.role and distopt.name of the argument it "
          "updates (docs/step-abi.md)");
  }
}

void Session::upload() {
  if (device.enabled)
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i].tensor)
        device.upload(i, args[i], buffers[i]);
}

void Session::download() {
  if (device.enabled)
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i].tensor)
        device.download(i, args[i], buffers[i]);
}

void Session::run(int64_t stepNumber) {
  for (size_t i = 0; i < args.size(); ++i) {
    bool written = true;
    if (args[i].role == "grad")
      fillGradient(args[i], buffers[i], stepNumber - 1);
    else if (args[i].init == "randn_each_step")
      fillNormal(args[i], buffers[i], 42 + stepNumber);
    else
      written = false;
    if (written && device.enabled)
      device.upload(i, args[i], buffers[i]);
  }
  // Descriptors and scalars, then one pointer to each for the entry point.
  std::vector<std::vector<int64_t>> descriptors(args.size());
  std::vector<void *> descriptorPtrs(args.size());
  std::vector<float> floats(args.size());
  std::vector<double> doubles(args.size());
  std::vector<int64_t> ints(args.size());
  std::vector<void *> packedArgs(1 + args.size());
  size_t resultWords = 0;
  for (const Slot &r : results)
    if (r.inPlaceArg < 0)
      resultWords += 3 + 2 * r.shape.size();
  std::vector<int64_t> resultStorage(std::max<size_t>(resultWords, 1));
  void *resultPtr = resultStorage.data();
  packedArgs[0] = &resultPtr;
  for (size_t i = 0; i < args.size(); ++i) {
    const Slot &slot = args[i];
    if (slot.tensor) {
      descriptors[i] =
          descriptor(slot, device.enabled ? Buffer{device.buffers[i],
                                                   device.buffers[i], false}
                                          : buffers[i]);
      descriptorPtrs[i] = descriptors[i].data();
      packedArgs[1 + i] = &descriptorPtrs[i];
    } else if (slot.role == "lr" && slot.dtype == "f64") {
      doubles[i] = lr;
      packedArgs[1 + i] = &doubles[i];
    } else if (slot.role == "lr" && slot.dtype == "f32") {
      floats[i] = static_cast<float>(lr);
      packedArgs[1 + i] = &floats[i];
    } else if (slot.role == "step") {
      ints[i] = stepNumber;
      packedArgs[1 + i] = &ints[i];
    } else {
      die("argument #" + std::to_string(i) + " (" + slot.role +
          ") is not a tensor, lr or step");
    }
  }
  auto begin = std::chrono::steady_clock::now();
  step.entry(packedArgs.data());
  if (device.enabled)
    check(distopt_rt_cuda_synchronize(), "running the step on the GPU");
  times.push_back(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin)
          .count());
  placeResults(resultStorage);
}

/// Results become the next step's arguments. A result in a constant global
/// is copied (the next step may update it in place); buffers no argument
/// refers to any more are freed.
void Session::placeResults(const std::vector<int64_t> &resultStorage) {
  std::vector<Buffer> previous = buffers;
  // Device allocations no argument may use any more, freed once every
  // result is placed.
  std::vector<void *> deviceGarbage;
  size_t word = 0;
  for (size_t k = 0; k < results.size(); ++k) {
    const Slot &r = results[k];
    if (r.inPlaceArg >= 0) {
      // Updated in the buffer of the argument it feeds back to, which the
      // next step reads (distopt-mark-in-place-results keeps any other
      // result a returned copy).
      if (static_cast<size_t>(r.inPlaceArg) != resultArg[k])
        die("result '" + r.role + " " + r.name + "' is left in argument #" +
            std::to_string(r.inPlaceArg) + ", not in the argument it replaces");
      continue;
    }
    const int64_t *d = resultStorage.data() + word;
    word += 3 + 2 * r.shape.size();
    void *returned = reinterpret_cast<char *>(d[1]) + d[2] * r.elementBytes();
    bool isLoss = r.role == "loss" && r.dtype == "f32";
    if (device.enabled) {
      // A device buffer the step allocated: it becomes the argument's, or
      // its loss is read and it is freed.
      if (resultArg[k] != SIZE_MAX) {
        deviceGarbage.push_back(device.bases[resultArg[k]]);
        device.buffers[resultArg[k]] = returned;
        device.bases[resultArg[k]] = reinterpret_cast<void *>(d[0]);
        continue;
      }
      if (isLoss) {
        float loss;
        check(distopt_rt_cuda_copy(&loss, returned, 4), "reading the loss");
        losses.push_back(loss);
      }
      deviceGarbage.push_back(reinterpret_cast<void *>(d[0]));
      continue;
    }
    Buffer result{reinterpret_cast<void *>(d[0]), returned, true};
    if (reinterpret_cast<uintptr_t>(result.allocated) == kGlobalMarker) {
      Buffer copy = allocate(r.bytes());
      std::memcpy(copy.aligned, result.aligned, r.bytes());
      result = copy;
    }
    if (resultArg[k] != SIZE_MAX) {
      buffers[resultArg[k]] = result;
      continue;
    }
    // The step's loss (its first element) is reported, not fed back.
    if (isLoss) {
      float loss;
      std::memcpy(&loss, result.aligned, 4);
      losses.push_back(loss);
    }
    // A result no argument takes: free it unless an argument shares it.
    bool shared = llvm::any_of(buffers, [&](const Buffer &b) {
      return b.allocated == result.allocated;
    });
    if (!shared)
      _mlir_memref_to_llvm_free(result.allocated);
  }
  device.release(std::move(deviceGarbage));
  for (const Buffer &old : previous) {
    if (!old.owned || !old.allocated)
      continue;
    bool live = llvm::any_of(
        buffers, [&](const Buffer &b) { return b.allocated == old.allocated; });
    if (!live)
      _mlir_memref_to_llvm_free(old.allocated);
  }
}

void Session::close() {
  for (Buffer &b : buffers)
    if (b.owned && b.allocated) {
      void *p = b.allocated;
      for (Buffer &other : buffers)
        if (other.allocated == p)
          other.allocated = nullptr;
      _mlir_memref_to_llvm_free(p);
    }
  if (device.enabled) {
    std::vector<void *> owned;
    owned.swap(device.bases);
    device.release(owned);
  }
}

} // namespace distopt::run
