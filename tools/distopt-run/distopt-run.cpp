//===- distopt-run.cpp - run a compiled step on N ranks ---------*- C++ -*-===//
//
// mpirun -np N distopt-run step.so --steps 10
//
// Loads a step compiled by distopt-compile, builds its arguments from the
// interface it carries (docs/step-abi.md): parameters from a fixed pattern,
// the same on every rank (laid out into this rank's shard where the step is
// sharded), gradients that differ per rank and per step, state at zero (or
// a seeded normal draw, the same on all ranks, where the step asks for it).
// Runs the steps, feeding each result back to the argument of the same role
// and name, prints the time per step (and the loss, for a step that returns
// one with role "loss"), and checks that every rank holds the same
// replicated parameters; exits non-zero if not. The buffers' fills are in
// Buffers.cpp, their mapping to checkpoints in CheckpointMapping.cpp.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace cl = llvm::cl;

static cl::OptionCategory runCategory("distopt-run options");

static cl::opt<std::string> library(cl::Positional, cl::Required,
                                    cl::desc("<step.so>"),
                                    cl::cat(runCategory));
static cl::opt<unsigned> steps("steps", cl::desc("Steps to run"), cl::init(10),
                               cl::cat(runCategory));
static cl::opt<double> lrOption("lr",
                                cl::desc("Learning rate (default: the spec's)"),
                                cl::cat(runCategory));
static cl::opt<unsigned> printEvery("print-every",
                                    cl::desc("Print progress every N steps "
                                             "(0: every --progress-seconds)"),
                                    cl::init(0), cl::cat(runCategory));
static cl::opt<double> progressSeconds(
    "progress-seconds",
    cl::desc("Without --print-every, print progress when this many seconds "
             "have passed since the last report (0: only at the end)"),
    cl::init(10), cl::cat(runCategory));
static cl::opt<std::string>
    savePath("save",
             cl::desc("After the last step, save parameters and optimizer "
                      "state to this checkpoint (docs/checkpoint.md)"),
             cl::value_desc("path"), cl::cat(runCategory));
static cl::opt<std::string>
    resumePath("resume",
               cl::desc("Start from this checkpoint, saved at any world "
                        "size; --steps more steps follow"),
               cl::value_desc("path"), cl::cat(runCategory));
static cl::opt<int64_t> saveKillAfterBytes(
    "save-kill-after-bytes", cl::Hidden, cl::init(-1),
    cl::desc("Testing: SIGKILL this process after writing this many bytes "
             "of the checkpoint"),
    cl::cat(runCategory));
static cl::opt<std::string> deviceOption(
    "device",
    cl::desc("Where the step runs: cpu, cuda, or auto (what it was compiled "
             "for, distopt-compile --target)"),
    cl::init("auto"), cl::cat(runCategory));
static cl::opt<bool> printMemory(
    "print-memory",
    cl::desc("Print the memory per rank: the step's buffers by role and the "
             "most in use at once (the most on any rank)"),
    cl::init(false), cl::cat(runCategory));
static cl::opt<bool> printParams("print-params",
                                 cl::desc("Print a hash of every parameter"),
                                 cl::init(false), cl::cat(runCategory));
static cl::opt<bool>
    describeOnly("describe",
                 cl::desc("Print the step's interface (each argument's and "
                          "result's role, name, type and layout) and exit"),
                 cl::init(false), cl::cat(runCategory));

namespace checkpoint = distopt::checkpoint;

using namespace distopt::run;

namespace {

/// Ranks running different compiled steps would issue different collectives
/// and hang or compute garbage: every rank compares the fingerprint of its
/// step's collective sequence (distopt-compile) with the others' first.
void checkSameCollectives(distopt_rt_comm *comm,
                          const distopt::step::Interface &abi) {
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

/// MLIR marks buffers of constant globals with this allocated pointer.
constexpr uintptr_t kGlobalMarker = 0xdeadbeef;

/// For a step compiled for CUDA: a device buffer for each tensor argument.
/// The host buffers stay the driver's copies (filled, checkpointed, hashed);
/// they are uploaded when the host writes them and downloaded at the end.
struct DeviceMirror {
  bool enabled = false;
  /// Per argument: the data the step is handed, and the allocation it lies
  /// in (a result may be a view into a buffer the step allocated).
  std::vector<void *> buffers, bases;

  void upload(size_t i, const Slot &slot, const Buffer &host) {
    if (!buffers[i]) {
      check(distopt_rt_cuda_alloc(slot.bytes(), &buffers[i]),
            "allocating device memory");
      bases[i] = buffers[i];
    }
    check(distopt_rt_cuda_copy(buffers[i], host.aligned, slot.bytes()),
          "copying to the device");
  }
  void download(size_t i, const Slot &slot, Buffer &host) {
    check(distopt_rt_cuda_copy(host.aligned, buffers[i], slot.bytes()),
          "copying from the device");
  }
  /// Frees each allocation in `allocations` (once) unless an argument still
  /// lies in it.
  void release(std::vector<void *> allocations) {
    std::sort(allocations.begin(), allocations.end());
    allocations.erase(std::unique(allocations.begin(), allocations.end()),
                      allocations.end());
    for (void *base : allocations)
      if (base && std::find(bases.begin(), bases.end(), base) == bases.end())
        check(distopt_rt_cuda_free(base), "freeing device memory");
  }
};

/// --describe: what a driver needs to know to call the step.
void describe(const distopt::step::Interface &abi) {
  llvm::raw_ostream &os = llvm::outs();
  os << "step for " << abi.worldSize << " ranks on " << abi.device;
  if (!abi.model.empty())
    os << ", model '" << abi.model << "'";
  if (abi.lr)
    os << ", lr " << *abi.lr;
  os << ", " << abi.collectiveCount << " collectives\n";
  auto print = [&](const char *kind, size_t i, const distopt::step::Value &v) {
    os << "  " << kind << " #" << i << ": "
       << (v.role == distopt::step::Role::None
               ? "(no role)"
               : distopt::step::roleName(v.role))
       << (v.name.empty() ? "" : " '" + v.name + "'") << " " << v.dtype->name;
    if (v.shape) {
      os << "[";
      llvm::interleave(*v.shape, os, "x");
      os << "]";
    }
    if (v.init != distopt::step::Init::Zeros)
      os << " init " << distopt::step::initName(v.init);
    if (v.perRank)
      os << " per rank";
    if (v.shardOf)
      os << " shard of " << v.shardOf;
    if (v.inPlaceArg)
      os << " in argument #" << *v.inPlaceArg;
    os << "\n";
    for (const distopt::step::LayoutEntry &e : v.layout) {
      os << "    '" << e.name << "' at " << e.offset << " [";
      llvm::interleave(e.shape, os, "x");
      os << "]";
      if (e.owner)
        os << " on rank " << *e.owner;
      os << "\n";
    }
  };
  for (auto [i, v] : llvm::enumerate(abi.args))
    print("argument", i, v);
  for (auto [i, v] : llvm::enumerate(abi.results))
    print("result", i, v);
}

} // namespace

int main(int argc, char **argv) {
  // Only this tool's options in --help, not every LLVM backend's.
  cl::HideUnrelatedOptions(runCategory);
  cl::ParseCommandLineOptions(argc, argv,
                              "distopt-run: run a compiled step on N ranks\n");
  // A bare file name would make dlopen search the library path.
  std::string path = library.find('/') == std::string::npos
                         ? "./" + library
                         : std::string(library);
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    llvm::errs() << "distopt-run: cannot load " << library << ": " << dlerror()
                 << "\n";
    return 1;
  }
  auto *packed =
      reinterpret_cast<void (*)(void **)>(dlsym(handle, "distopt_step_packed"));
  auto *abiText = static_cast<const char *>(dlsym(handle, "distopt_step_abi"));
  if (!packed || !abiText) {
    llvm::errs() << "distopt-run: " << library
                 << " is not a step compiled by distopt-compile\n";
    return 1;
  }
  llvm::Expected<distopt::step::Interface> abi =
      distopt::step::parseInterface(abiText);
  if (!abi) {
    llvm::errs() << "distopt-run: " << library << ": "
                 << llvm::toString(abi.takeError()) << "\n";
    return 1;
  }
  if (describeOnly) {
    describe(*abi);
    return 0;
  }
  int64_t compiledSize = abi->worldSize;
  std::string compiledFor = abi->device;
  if (deviceOption != "auto" && deviceOption != compiledFor) {
    llvm::errs() << "distopt-run: " << library << " was compiled for "
                 << compiledFor << " (distopt-compile --target=" << compiledFor
                 << "), not --device=" << deviceOption << "\n";
    return 1;
  }
  DeviceMirror device;
  device.enabled = compiledFor == "cuda";
  distopt_rt_comm *comm = nullptr;
  if (device.enabled) {
    // Loading the library loaded its kernels (or recorded why not).
    if (distopt_rt_cuda_init(-1) != DISTOPT_RT_OK) {
      llvm::errs() << "distopt-run: " << distopt_rt_last_error() << "\n";
      return 1;
    }
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
  double lr = lrOption.getNumOccurrences() ? lrOption : abi->lr.value_or(1e-3);
  // torch.optim's rule: a learning rate is a finite, non-negative number.
  if (!std::isfinite(lr) || lr < 0)
    die("the learning rate must be finite and non-negative, got " +
        std::to_string(lr));
  checkSameCollectives(comm, *abi);

  std::vector<Slot> args, results;
  for (const distopt::step::Value &v : abi->args)
    args.push_back(toSlot(v));
  for (const distopt::step::Value &v : abi->results)
    results.push_back(toSlot(v));

  // Argument buffers, by position; results map back by (role, name).
  std::vector<Buffer> buffers(args.size());
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
  std::vector<size_t> resultArg(results.size(), SIZE_MAX);
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

  // A resumed run continues the saved one: its state, its step count.
  int64_t firstStep = 1;
  std::string model = abi->model;
  if (!resumePath.empty()) {
    llvm::Expected<checkpoint::Checkpoint> ckpt = checkpoint::read(resumePath);
    if (!ckpt)
      die(llvm::toString(ckpt.takeError()));
    restoreCheckpoint(*ckpt, resumePath, args, buffers);
    firstStep = ckpt->step + 1;
    if (myRank == 0)
      llvm::outs() << "distopt-run: resumed " << resumePath << " after step "
                   << ckpt->step << " (saved on " << ckpt->worldSize
                   << " ranks)\n";
  }
  int64_t lastStep = firstStep - 1 + steps;
  if (device.enabled)
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i].tensor)
        device.upload(i, args[i], buffers[i]);

  std::vector<double> times, losses;
  // Progress: steps per second of wall time since the previous report.
  auto lastReport = std::chrono::steady_clock::now();
  int64_t lastReportStep = firstStep - 1;
  for (int64_t step = firstStep; step <= lastStep; ++step) {
    for (size_t i = 0; i < args.size(); ++i) {
      bool written = true;
      if (args[i].role == "grad")
        fillGradient(args[i], buffers[i], step - 1);
      else if (args[i].init == "randn_each_step")
        fillNormal(args[i], buffers[i], 42 + step);
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
    size_t resultBytes = 0;
    for (const Slot &r : results)
      if (r.inPlaceArg < 0)
        resultBytes += 8 * (3 + 2 * r.shape.size());
    std::vector<int64_t> resultStorage(std::max<size_t>(resultBytes / 8, 1));
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
        ints[i] = step;
        packedArgs[1 + i] = &ints[i];
      } else {
        die("argument #" + std::to_string(i) + " (" + slot.role +
            ") is not a tensor, lr or step");
      }
    }
    auto begin = std::chrono::steady_clock::now();
    packed(packedArgs.data());
    if (device.enabled)
      check(distopt_rt_cuda_synchronize(), "running the step on the GPU");
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin)
            .count());

    // Results become the next step's arguments. A result in a constant
    // global is copied (the next step may update it in place); buffers no
    // argument refers to any more are freed.
    std::vector<Buffer> previous = buffers;
    // Device allocations no argument may use any more, freed once every
    // result is placed.
    std::vector<void *> deviceGarbage;
    size_t word = 0;
    for (size_t k = 0; k < results.size(); ++k) {
      if (results[k].inPlaceArg >= 0) {
        // Updated in the buffer of the argument it feeds back to, which the
        // next step reads (distopt-mark-in-place-results keeps any other
        // result a returned copy).
        if (static_cast<size_t>(results[k].inPlaceArg) != resultArg[k])
          die("result '" + results[k].role + " " + results[k].name +
              "' is left in argument #" +
              std::to_string(results[k].inPlaceArg) +
              ", not in the argument it replaces");
        continue;
      }
      const int64_t *d = resultStorage.data() + word;
      word += 3 + 2 * results[k].shape.size();
      if (device.enabled) {
        // A device buffer the step allocated: it becomes the argument's, or
        // its loss is read and it is freed.
        void *returned =
            reinterpret_cast<char *>(d[1]) + d[2] * results[k].elementBytes();
        if (resultArg[k] != SIZE_MAX) {
          deviceGarbage.push_back(device.bases[resultArg[k]]);
          device.buffers[resultArg[k]] = returned;
          device.bases[resultArg[k]] = reinterpret_cast<void *>(d[0]);
          continue;
        }
        if (results[k].role == "loss" && results[k].dtype == "f32") {
          float loss;
          check(distopt_rt_cuda_copy(&loss, returned, 4), "reading the loss");
          losses.push_back(loss);
        }
        deviceGarbage.push_back(reinterpret_cast<void *>(d[0]));
        continue;
      }
      Buffer result{reinterpret_cast<void *>(d[0]),
                    reinterpret_cast<char *>(d[1]) +
                        d[2] * results[k].elementBytes(),
                    true};
      if (reinterpret_cast<uintptr_t>(result.allocated) == kGlobalMarker) {
        Buffer copy = allocate(results[k].bytes());
        std::memcpy(copy.aligned, result.aligned, results[k].bytes());
        result = copy;
      }
      if (resultArg[k] != SIZE_MAX) {
        buffers[resultArg[k]] = result;
        continue;
      }
      // The step's loss (its first element) is reported, not fed back.
      if (results[k].role == "loss" && results[k].dtype == "f32") {
        float loss;
        std::memcpy(&loss, result.aligned, 4);
        losses.push_back(loss);
      }
      // A result no argument takes: free it unless an argument shares it.
      bool shared =
          std::any_of(buffers.begin(), buffers.end(), [&](const Buffer &b) {
            return b.allocated == result.allocated;
          });
      if (!shared)
        _mlir_memref_to_llvm_free(result.allocated);
    }
    device.release(std::move(deviceGarbage));
    for (const Buffer &old : previous) {
      if (!old.owned || !old.allocated)
        continue;
      bool live =
          std::any_of(buffers.begin(), buffers.end(), [&](const Buffer &b) {
            return b.allocated == old.allocated;
          });
      if (!live)
        _mlir_memref_to_llvm_free(old.allocated);
    }
    auto now = std::chrono::steady_clock::now();
    double sinceReport =
        std::chrono::duration<double>(now - lastReport).count();
    bool report = printEvery
                      ? step % printEvery == 0
                      : progressSeconds > 0 && sinceReport >= progressSeconds;
    if (report && myRank == 0) {
      llvm::outs() << "step " << step << "/" << lastStep;
      if (!losses.empty())
        llvm::outs() << ": loss " << llvm::format("%.6f", losses.back()) << ",";
      llvm::outs() << " " << llvm::format("%.3f", times.back() * 1e3)
                   << " ms/step, "
                   << llvm::format("%.1f", (step - lastReportStep) /
                                               std::max(sinceReport, 1e-9))
                   << " steps/s\n";
      // mpirun forwards what is flushed: a person is watching.
      llvm::outs().flush();
    }
    if (report) {
      lastReport = now;
      lastReportStep = step;
    }
  }

  if (device.enabled)
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i].tensor)
        device.download(i, args[i], buffers[i]);

  // Replicas must agree on every parameter that is not sharded.
  int64_t compared = 0, differing = 0;
  bool returnsParameters =
      llvm::any_of(results, [](const Slot &r) { return r.role == "param"; });
  // Each replicated parameter tensor: its name, data and size (a flat
  // parameter, --distopt-param-as-bucket-view, holds several).
  struct Replica {
    std::string name;
    const char *data;
    size_t bytes;
  };
  std::vector<Replica> replicas;
  for (size_t k = 0; k < results.size(); ++k) {
    const Slot &r = results[k];
    if (r.role != "param" || resultArg[k] == SIZE_MAX)
      continue;
    const char *data = static_cast<const char *>(buffers[resultArg[k]].aligned);
    if (r.layout.empty())
      replicas.push_back({r.name, data, r.bytes()});
    else if (isReplicatedLayout(r))
      for (const Entry &e : r.layout)
        replicas.push_back({e.name, data + e.offset * r.elementBytes(),
                            numelOf(e.shape) * r.elementBytes()});
  }
  for (const Replica &r : replicas) {
    int64_t hash = static_cast<int64_t>(hashBytes(r.data, r.bytes));
    int64_t lowest = hash, highest = hash;
    check(distopt_rt_all_reduce(comm, &hash, &lowest, 1, DISTOPT_RT_I64,
                                DISTOPT_RT_MIN, 1, DISTOPT_RT_I64),
          "comparing replicas");
    check(distopt_rt_all_reduce(comm, &hash, &highest, 1, DISTOPT_RT_I64,
                                DISTOPT_RT_MAX, 1, DISTOPT_RT_I64),
          "comparing replicas");
    ++compared;
    if (lowest != highest) {
      ++differing;
      if (myRank == 0)
        llvm::errs() << "distopt-run: parameter '" << r.name
                     << "' differs between ranks\n";
    }
    if (printParams && myRank == 0)
      llvm::outs() << "param " << r.name << " "
                   << llvm::format_hex(static_cast<uint64_t>(hash), 18) << "\n";
  }
  // Non-finite values never agree: a NaN on every rank hashes the same, but
  // the run has diverged. Every parameter this rank holds is checked, its
  // shards too.
  int64_t nonFinite = 0;
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].tensor &&
        (args[i].role == "param" || args[i].role == "main_param")) {
      int64_t count = countNonFinite(args[i], buffers[i].aligned);
      if (count && myRank == 0 && args[i].layout.empty())
        llvm::errs() << "distopt-run: parameter '" << args[i].name << "' has "
                     << count << " non-finite elements (inf or NaN)\n";
      nonFinite += count;
    }
  int64_t anyNonFinite = 0;
  check(distopt_rt_all_reduce(comm, &nonFinite, &anyNonFinite, 1,
                              DISTOPT_RT_I64, DISTOPT_RT_SUM, 1,
                              DISTOPT_RT_I64),
        "checking the parameters are finite");
  if (anyNonFinite && myRank == 0)
    llvm::errs() << "distopt-run: " << anyNonFinite
                 << " parameter elements are inf or NaN on some rank: the "
                    "run diverged (check the learning rate)\n";
  if (printMemory) {
    // Host memory: the argument buffers (what the step keeps between steps
    // and is handed each step) by role, and the peak of everything
    // allocated for or by the step at once (its temporaries included).
    const char *roles[] = {"param", "main_param", "state", "grad"};
    int64_t mine[6] = {0, 0, 0, 0, 0, 0};
    for (size_t i = 0; i < args.size(); ++i)
      for (int r = 0; r < 4; ++r)
        if (args[i].tensor && args[i].role == roles[r])
          mine[r] += args[i].bytes();
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i].tensor)
        mine[4] += args[i].bytes();
    uint64_t inUse = 0, peakBytes = 0;
    distopt_rt_memory_stats(&inUse, &peakBytes);
    mine[5] = static_cast<int64_t>(peakBytes);
    int64_t most[6];
    check(distopt_rt_all_reduce(comm, mine, most, 6, DISTOPT_RT_I64,
                                DISTOPT_RT_MAX, 1, DISTOPT_RT_I64),
          "comparing memory");
    if (myRank == 0) {
      llvm::outs() << "distopt-run: memory per rank (bytes, most on any rank):";
      for (int r = 0; r < 4; ++r)
        llvm::outs() << " " << roles[r] << " " << most[r];
      llvm::outs() << ", arguments " << most[4] << ", peak in use " << most[5]
                   << "\n";
    }
  }
  std::vector<double> sorted(times.begin() + (times.size() > 1), times.end());
  std::sort(sorted.begin(), sorted.end());
  if (myRank == 0) {
    llvm::outs() << "distopt-run: " << steps << " steps on " << worldSize
                 << " ranks";
    if (!sorted.empty()) {
      llvm::outs() << ", "
                   << llvm::format("%.3f", sorted[sorted.size() / 2] * 1e3)
                   << " ms per step (median";
      if (times.size() > 1)
        llvm::outs() << ", after the first";
      // The spread, for benchmarks: nearest-rank 10th and 90th percentiles
      // (a single descheduled step does not make it).
      auto percentile = [&](double fraction) {
        size_t rank = static_cast<size_t>(std::ceil(fraction * sorted.size()));
        return sorted[std::max<size_t>(rank, 1) - 1] * 1e3;
      };
      llvm::outs() << "; p10 " << llvm::format("%.3f", percentile(0.1))
                   << ", p90 " << llvm::format("%.3f", percentile(0.9)) << ")";
    }
    llvm::outs() << "\n";
    if (!losses.empty())
      llvm::outs() << "distopt-run: loss "
                   << llvm::format("%.6f", losses.front()) << " at step "
                   << firstStep << ", " << llvm::format("%.6f", losses.back())
                   << " at step " << lastStep << "\n";
    if (differing == 0 && compared > 0 && !anyNonFinite)
      llvm::outs() << "distopt-run: replicas agree on " << compared
                   << " parameter tensors\n";
    else if (compared == 0 && returnsParameters)
      llvm::outs() << "distopt-run: every parameter is sharded (ZeRO-3): no "
                      "replicas to compare\n";
    else if (compared == 0)
      llvm::outs() << "distopt-run: the step returns no parameters: no "
                      "replicas to compare\n";
  }
  llvm::outs().flush();

  if (!savePath.empty()) {
    checkpoint::Checkpoint ckpt =
        collectCheckpoint(comm, args, buffers, lastStep, model);
    // Rank 0 writes; every rank learns whether it worked.
    int64_t failed = 0;
    if (myRank == 0) {
      if (llvm::Error error =
              checkpoint::write(savePath, ckpt, saveKillAfterBytes)) {
        llvm::errs() << "distopt-run: rank 0: "
                     << llvm::toString(std::move(error)) << "\n";
        failed = 1;
      } else {
        llvm::outs() << "distopt-run: saved " << ckpt.tensors.size()
                     << " tensors after step " << lastStep << " to " << savePath
                     << "\n";
      }
    }
    check(distopt_rt_broadcast(comm, &failed, &failed, 1, DISTOPT_RT_I64, 0,
                               DISTOPT_RT_I64),
          "agreeing on the checkpoint");
    if (failed)
      die("rank 0 could not save the checkpoint");
    llvm::outs().flush();
  }
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
  return differing || anyNonFinite ? 1 : 0;
}
