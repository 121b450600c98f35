//===- distopt-run.cpp - run a compiled step on N ranks ---------*- C++ -*-===//
//
// mpirun -np N distopt-run step.so --steps 10
//
// Runs a step compiled by distopt-compile through the host step library
// (runtime/distopt_step.h), as a training program would: the library loads
// the step, gives every argument a buffer (laid out as its interface says,
// docs/step-abi.md), runs it and saves and loads checkpoints. distopt-run
// feeds it parameters from a fixed pattern, the same on every rank,
// gradients that differ per rank and per step (Fills.cpp), prints the time
// per step (and the loss, for a step that returns one with role "loss"),
// and checks that every rank holds the same replicated parameters; exits
// non-zero if not (Report.cpp).
//
//===----------------------------------------------------------------------===//

#include "Run.h"

#include "distopt/StepInterface/StepInterface.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
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
static cl::opt<bool> printMemoryOption(
    "print-memory",
    cl::desc("Print the memory per rank: the step's buffers by role and the "
             "most in use at once (the most on any rank)"),
    cl::init(false), cl::cat(runCategory));
static cl::list<int64_t> injectInf(
    "inject-inf", cl::CommaSeparated,
    cl::desc("At these steps one rank's gradient holds an inf (rank: the "
             "step modulo the world size), as an overflow under loss "
             "scaling: the step must be skipped on every rank"),
    cl::cat(runCategory));
static cl::opt<bool> printParams("print-params",
                                 cl::desc("Print a hash of every parameter"),
                                 cl::init(false), cl::cat(runCategory));
static cl::opt<bool> printParamBits(
    "print-param-bits",
    cl::desc("Print every parameter (shards gathered) as its elements' bit "
             "patterns, for comparing runs bit for bit"),
    cl::init(false), cl::cat(runCategory));
static cl::opt<bool> gatherParams(
    "gather-params",
    cl::desc("Before each step, run the step's gather entries (a ZeRO-3 step "
             "compiled with split-step=true gather-params=true), as a "
             "training loop gathers the parameters for its forward pass; the "
             "time per step includes them"),
    cl::init(false), cl::cat(runCategory));
static cl::opt<std::string> describeOnly(
    "describe",
    cl::desc("Print the step's interface (each argument's and result's role, "
             "name, type and layout) and exit; --describe=json prints it as "
             "the JSON the step carries (docs/step-abi.md)"),
    cl::ValueOptional, cl::init(""), cl::cat(runCategory));

using namespace distopt::run;

namespace distopt::run {

[[noreturn]] void die(const std::string &message) {
  llvm::errs() << "distopt-run: " << message << "\n";
  llvm::errs().flush();
  distopt_rt_abort(); // every rank ends, none waits for this one
  std::_Exit(1);      // not reached
}

void check(distopt_rt_status status, const char *what) {
  if (status == DISTOPT_RT_OK)
    return;
  // The runtime's messages name the rank already.
  std::string error = distopt_rt_last_error();
  if (error.rfind("rank ", 0) == 0)
    die(error + " (" + what + ")");
  die(std::string(what) + ": " + error);
}

void Run::describe() {
  int64_t numArgs = distopt_step_num_args(step);
  int64_t numResults = distopt_step_num_results(step);
  args.resize(numArgs);
  results.resize(numResults);
  for (int64_t i = 0; i < numArgs; ++i)
    check(distopt_step_arg(step, i, &args[i]), "describing the step");
  for (int64_t i = 0; i < numResults; ++i)
    check(distopt_step_result(step, i, &results[i]), "describing the step");
  tensors.resize(distopt_step_num_tensors(step));
  for (size_t i = 0; i < tensors.size(); ++i)
    check(distopt_step_tensor_info(step, i, &tensors[i]),
          "describing the step");
}

} // namespace distopt::run

namespace {

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
      os << (v.rankMean ? " per rank (their mean)" : " per rank");
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
  for (const distopt::step::ProcessGroup &g : abi.groups)
    os << "  group '" << g.name << "': " << abi.worldSize / g.size
       << " parts of " << g.size << " ranks\n";
}

/// Prints the progress line of `step` when it is due.
class Progress {
public:
  Progress(int64_t firstStep, int64_t lastStep)
      : lastStep(lastStep), lastReportStep(firstStep - 1) {}

  void after(int64_t step, const Run &run) {
    auto now = std::chrono::steady_clock::now();
    double since = std::chrono::duration<double>(now - lastReport).count();
    bool due = printEvery ? step % printEvery == 0
                          : progressSeconds > 0 && since >= progressSeconds;
    if (!due)
      return;
    if (run.rank == 0) {
      llvm::outs() << "step " << step << "/" << lastStep;
      llvm::outs() << ":";
      if (!run.losses.empty())
        llvm::outs() << " loss " << llvm::format("%.6f", run.losses.back())
                     << ",";
      llvm::outs() << " lr "
                   << llvm::format("%.6g", distopt_session_lr(run.session))
                   << ",";
      for (const auto &[label, value] : run.scalars)
        llvm::outs() << " " << label << " " << llvm::format("%.6g", value)
                     << ",";
      llvm::outs() << " " << llvm::format("%.3f", run.times.back() * 1e3)
                   << " ms/step, "
                   << llvm::format("%.1f", (step - lastReportStep) /
                                               std::max(since, 1e-9))
                   << " steps/s\n";
      // mpirun forwards what is flushed: a person is watching.
      llvm::outs().flush();
    }
    lastReport = now;
    lastReportStep = step;
  }

private:
  int64_t lastStep, lastReportStep;
  std::chrono::steady_clock::time_point lastReport =
      std::chrono::steady_clock::now();
};

/// Rank 0's summary: time per step (median and spread, the first step left
/// out), the loss, and whether the replicas agree.
void printSummary(const Run &run, int64_t firstStep, int64_t lastStep,
                  std::pair<int64_t, int64_t> replicas, bool anyNonFinite) {
  if (run.rank != 0)
    return;
  const std::vector<double> &times = run.times;
  std::vector<double> sorted(times.begin() + (times.size() > 1), times.end());
  std::sort(sorted.begin(), sorted.end());
  llvm::raw_ostream &os = llvm::outs();
  os << "distopt-run: " << steps << " steps on " << run.size << " ranks";
  if (!sorted.empty()) {
    os << ", " << llvm::format("%.3f", sorted[sorted.size() / 2] * 1e3)
       << " ms per step (median";
    if (times.size() > 1)
      os << ", after the first";
    // The spread, for benchmarks: nearest-rank 10th and 90th percentiles
    // (a single descheduled step does not make it).
    auto percentile = [&](double fraction) {
      size_t rank = static_cast<size_t>(std::ceil(fraction * sorted.size()));
      return sorted[std::max<size_t>(rank, 1) - 1] * 1e3;
    };
    os << "; p10 " << llvm::format("%.3f", percentile(0.1)) << ", p90 "
       << llvm::format("%.3f", percentile(0.9)) << ")";
  }
  os << "\n";
  if (run.launches)
    os << "distopt-run: " << run.launches << " kernel launches in step "
       << lastStep << "\n";
  if (!run.losses.empty())
    os << "distopt-run: loss " << llvm::format("%.6f", run.losses.front())
       << " at step " << firstStep << ", "
       << llvm::format("%.6f", run.losses.back()) << " at step " << lastStep
       << "\n";
  for (const auto &[label, value] : run.scalars)
    os << "distopt-run: " << label << " " << llvm::format("%.6g", value)
       << " at step " << lastStep << "\n";
  auto [compared, differing] = replicas;
  bool returnsParameters =
      llvm::any_of(run.results, [](const distopt_step_value &r) {
        return std::strcmp(r.role, "param") == 0;
      });
  if (differing == 0 && compared > 0 && !anyNonFinite)
    os << "distopt-run: replicas agree on " << compared
       << " parameter tensors\n";
  else if (compared == 0 && returnsParameters)
    os << "distopt-run: every parameter is sharded (ZeRO-3): no replicas to "
          "compare\n";
  else if (compared == 0)
    os << "distopt-run: the step returns no parameters: no replicas to "
          "compare\n";
}

/// The logical tensors a checkpoint of the run holds (per-rank state once
/// per rank).
int64_t savedTensors(const Run &run) {
  int64_t count = 0;
  for (const distopt_step_tensor &t : run.tensors)
    if (std::strcmp(t.role, "grad") != 0)
      count += t.per_rank == DISTOPT_STEP_PER_RANK_OWN ? run.size : 1;
  // Scalar state (a loss scale) is saved as a 0-d tensor.
  for (const distopt_step_value &v : run.args)
    if (!v.is_tensor && std::strcmp(v.role, "state") == 0)
      ++count;
  return count;
}

} // namespace

int main(int argc, char **argv) {
  // libLLVM.so registers a hidden option named "threads" of its own; this
  // one replaces it (declared here, after theirs is removed).
  if (cl::Option *theirs = cl::getRegisteredOptions().lookup("threads"))
    theirs->removeArgument();
  cl::opt<unsigned> threadsOption(
      "threads",
      cl::desc("Threads of a CPU step's parallel loops, at most 1024 (0, "
               "the default: DISTOPT_THREADS, else this process's cores "
               "divided among the ranks on its node)"),
      cl::init(0), cl::cat(runCategory));
  // Only this tool's options in --help, not every LLVM backend's.
  cl::HideUnrelatedOptions(runCategory);
  cl::ParseCommandLineOptions(argc, argv,
                              "distopt-run: run a compiled step on N ranks\n");
  Run run;
  if (distopt_step_open(library.c_str(), &run.step) != DISTOPT_RT_OK) {
    llvm::errs() << "distopt-run: " << distopt_rt_last_error() << "\n";
    return 1;
  }
  std::string compiledFor = distopt_step_device(run.step);
  if (describeOnly.getNumOccurrences()) {
    if (describeOnly == "json") {
      llvm::outs() << distopt_step_interface(run.step) << "\n";
      return 0;
    }
    if (!describeOnly.empty()) {
      llvm::errs() << "distopt-run: --describe takes nothing or 'json', not '"
                   << describeOnly << "'\n";
      return 1;
    }
    // The library read it already; it is valid.
    describe(*distopt::step::parseInterface(distopt_step_interface(run.step)));
    return 0;
  }
  if (deviceOption != "auto" && deviceOption != compiledFor) {
    llvm::errs() << "distopt-run: " << library << " was compiled for "
                 << compiledFor << " (distopt-compile --target=" << compiledFor
                 << "), not --device=" << deviceOption << "\n";
    return 1;
  }
  run.describe();
  distopt_session_options options;
  distopt_session_default_options(&options);
  options.threads = threadsOption;
  check(distopt_session_create(run.step, &options, &run.session),
        "starting the session");
  run.rank = distopt_session_rank(run.session);
  run.size = distopt_session_size(run.session);
  if (lrOption.getNumOccurrences())
    check(distopt_session_set_lr(run.session, lrOption),
          "setting the learning rate");
  fillParameters(run);

  // A resumed run continues the saved one: its state, its step count.
  if (!resumePath.empty()) {
    int64_t savedOn = 0;
    check(distopt_session_load(run.session, resumePath.c_str(), &savedOn),
          "resuming");
    if (run.rank == 0)
      llvm::outs() << "distopt-run: resumed " << resumePath << " after step "
                   << distopt_session_steps_done(run.session) << " (saved on "
                   << savedOn << " ranks)\n";
  }
  int64_t firstStep = distopt_session_steps_done(run.session) + 1;
  int64_t lastStep = firstStep - 1 + steps;
  std::vector<size_t> losses, scalars;
  for (size_t k = 0; k < run.results.size(); ++k) {
    const distopt_step_value &r = run.results[k];
    if (std::strcmp(r.role, "loss") == 0)
      losses.push_back(k);
    else if (!r.is_tensor && r.in_place_arg < 0)
      scalars.push_back(k);
  }
  Progress progress(firstStep, lastStep);
  // --gather-params: the gather entries, into buffers of the session's
  // kept from step to step.
  std::vector<int64_t> gathers;
  if (gatherParams) {
    for (int64_t k = 0, e = distopt_step_num_entries(run.step); k < e; ++k) {
      distopt_step_entry entry;
      check(distopt_step_entry_info(run.step, k, &entry), "describing entries");
      if (std::strcmp(entry.kind, "gather") == 0)
        gathers.push_back(k);
    }
    if (gathers.empty())
      die("--gather-params: " + library +
          " has no gather entries (compile a ZeRO-3 step with "
          "--pipeline=\"zero-stage=3 split-step=true gather-params=true\")");
    // A step with gather entries leaves the gathered parameters and the
    // gradients to the driver.
    for (size_t i = 0; i < run.args.size(); ++i)
      if (std::strcmp(run.args[i].role, "gathered_param") == 0 ||
          std::strcmp(run.args[i].role, "grad") == 0)
        check(distopt_session_bind(run.session, i, nullptr, run.args[i].bytes),
              "giving a gathered parameter or a gradient a buffer");
  }
  // Gradient accumulation: the step's earlier micro-batches are added up
  // first, with no communication.
  int64_t microBatches = distopt_step_grad_accumulation(run.step);
  for (int64_t step = firstStep; step <= lastStep; ++step) {
    for (int64_t micro = 1; micro < microBatches; ++micro) {
      fillGradients(run, step, /*overflow=*/false, micro);
      check(distopt_session_accumulate(run.session),
            "accumulating a micro-batch's gradients");
    }
    fillGradients(run, step,
                  llvm::is_contained(injectInf, step) &&
                      step % run.size == run.rank);
    auto gatherStart = std::chrono::steady_clock::now();
    for (int64_t k : gathers)
      check(distopt_session_run_entry(run.session, k),
            "gathering the parameters");
    std::chrono::duration<double> gathering =
        std::chrono::steady_clock::now() - gatherStart;
    uint64_t launchesBefore = distopt_rt_cuda_launches();
    check(distopt_session_run(run.session), "running the step");
    run.launches = distopt_rt_cuda_launches() - launchesBefore;
    run.times.push_back(distopt_session_last_seconds(run.session) +
                        gathering.count());
    if (!losses.empty()) {
      double loss = 0;
      check(distopt_session_scalar(run.session, losses.front(), &loss),
            "reading the loss");
      run.losses.push_back(loss);
    }
    run.scalars.clear();
    for (size_t k : scalars) {
      const distopt_step_value &r = run.results[k];
      double value = 0;
      check(distopt_session_scalar(run.session, k, &value),
            "reading a scalar result");
      std::string label = *r.name   ? r.name
                          : *r.role ? r.role
                                    : "result #" + std::to_string(k);
      run.scalars.emplace_back(label, value);
    }
    progress.after(step, run);
  }

  // Replicas must agree on every parameter that is not sharded, and no
  // parameter may have diverged.
  std::pair<int64_t, int64_t> replicas = compareReplicas(run, printParams);
  int64_t nonFinite = countNonFiniteParameters(run);
  if (nonFinite && run.rank == 0)
    llvm::errs() << "distopt-run: " << nonFinite
                 << " parameter elements are inf or NaN on some rank: the "
                    "run diverged (check the learning rate)\n";
  if (printParamBits)
    printParameterBits(run);
  if (printMemoryOption)
    printMemory(run);
  printSummary(run, firstStep, lastStep, replicas, nonFinite != 0);
  llvm::outs().flush();
  if (!savePath.empty()) {
    // The test of atomic saves reaches the library's writer this way.
    if (saveKillAfterBytes >= 0)
      setenv("DISTOPT_CHECKPOINT_KILL_AFTER_BYTES",
             std::to_string(saveKillAfterBytes).c_str(), 1);
    check(distopt_session_save(run.session, savePath.c_str()),
          "saving the checkpoint");
    if (run.rank == 0)
      llvm::outs() << "distopt-run: saved " << savedTensors(run)
                   << " tensors after step " << lastStep << " to " << savePath
                   << "\n";
    llvm::outs().flush();
  }
  distopt_session_destroy(run.session);
  distopt_step_close(run.step);
  return replicas.second || nonFinite ? 1 : 0;
}
