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
// replicated parameters; exits non-zero if not. The step's buffers and the
// running of one step are in Session.cpp, their fills in Buffers.cpp, their
// mapping to checkpoints in CheckpointMapping.cpp, the checks after the run
// in Report.cpp.
//
//===----------------------------------------------------------------------===//

#include "Session.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
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
static cl::opt<bool> printParams("print-params",
                                 cl::desc("Print a hash of every parameter"),
                                 cl::init(false), cl::cat(runCategory));
static cl::opt<bool> printParamBits(
    "print-param-bits",
    cl::desc("Print every parameter (shards gathered) as its elements' bit "
             "patterns, for comparing runs bit for bit"),
    cl::init(false), cl::cat(runCategory));
static cl::opt<std::string> describeOnly(
    "describe",
    cl::desc("Print the step's interface (each argument's and result's role, "
             "name, type and layout) and exit; --describe=json prints it as "
             "the JSON the step carries (docs/step-abi.md)"),
    cl::ValueOptional, cl::init(""), cl::cat(runCategory));

namespace checkpoint = distopt::checkpoint;

using namespace distopt::run;

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

/// Prints the progress line of `step` when it is due.
class Progress {
public:
  Progress(int64_t firstStep, int64_t lastStep)
      : lastStep(lastStep), lastReportStep(firstStep - 1) {}

  void after(int64_t step, const Session &session) {
    auto now = std::chrono::steady_clock::now();
    double since = std::chrono::duration<double>(now - lastReport).count();
    bool due = printEvery ? step % printEvery == 0
                          : progressSeconds > 0 && since >= progressSeconds;
    if (!due)
      return;
    if (myRank == 0) {
      llvm::outs() << "step " << step << "/" << lastStep;
      if (!session.losses.empty())
        llvm::outs() << ": loss " << llvm::format("%.6f", session.losses.back())
                     << ",";
      llvm::outs() << " " << llvm::format("%.3f", session.times.back() * 1e3)
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
void printSummary(const Session &session, int64_t firstStep, int64_t lastStep,
                  std::pair<int64_t, int64_t> replicas, bool anyNonFinite) {
  if (myRank != 0)
    return;
  const std::vector<double> &times = session.times;
  std::vector<double> sorted(times.begin() + (times.size() > 1), times.end());
  std::sort(sorted.begin(), sorted.end());
  llvm::raw_ostream &os = llvm::outs();
  os << "distopt-run: " << steps << " steps on " << worldSize << " ranks";
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
  if (!session.losses.empty())
    os << "distopt-run: loss " << llvm::format("%.6f", session.losses.front())
       << " at step " << firstStep << ", "
       << llvm::format("%.6f", session.losses.back()) << " at step " << lastStep
       << "\n";
  auto [compared, differing] = replicas;
  bool returnsParameters = llvm::any_of(
      session.results, [](const Slot &r) { return r.role == "param"; });
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

/// Rank 0 writes the checkpoint; every rank learns whether it worked.
void saveCheckpoint(const Session &session, int64_t lastStep) {
  checkpoint::Checkpoint ckpt =
      collectCheckpoint(session.comm, session.args, session.buffers, lastStep,
                        session.step.abi.model);
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
  check(distopt_rt_broadcast(session.comm, &failed, &failed, 1, DISTOPT_RT_I64,
                             0, DISTOPT_RT_I64),
        "agreeing on the checkpoint");
  if (failed)
    die("rank 0 could not save the checkpoint");
  llvm::outs().flush();
}

} // namespace

int main(int argc, char **argv) {
  // Only this tool's options in --help, not every LLVM backend's.
  cl::HideUnrelatedOptions(runCategory);
  cl::ParseCommandLineOptions(argc, argv,
                              "distopt-run: run a compiled step on N ranks\n");
  LoadedStep loaded;
  if (!loadStep(library, loaded))
    return 1;
  if (describeOnly.getNumOccurrences()) {
    if (describeOnly == "json") {
      llvm::outs() << distopt::step::toJSON(loaded.abi) << "\n";
      return 0;
    }
    if (!describeOnly.empty()) {
      llvm::errs() << "distopt-run: --describe takes nothing or 'json', not '"
                   << describeOnly << "'\n";
      return 1;
    }
    describe(loaded.abi);
    return 0;
  }
  const std::string &compiledFor = loaded.abi.device;
  if (deviceOption != "auto" && deviceOption != compiledFor) {
    llvm::errs() << "distopt-run: " << library << " was compiled for "
                 << compiledFor << " (distopt-compile --target=" << compiledFor
                 << "), not --device=" << deviceOption << "\n";
    return 1;
  }
  Session session;
  session.open(std::move(loaded), lrOption, lrOption.getNumOccurrences() > 0);

  // A resumed run continues the saved one: its state, its step count.
  int64_t firstStep = 1;
  if (!resumePath.empty()) {
    llvm::Expected<checkpoint::Checkpoint> ckpt = checkpoint::read(resumePath);
    if (!ckpt)
      die(llvm::toString(ckpt.takeError()));
    if (llvm::Error error = checkpoint::checkFits(*ckpt, session.step.abi))
      die(resumePath + ": " + llvm::toString(std::move(error)));
    restoreCheckpoint(*ckpt, resumePath, session.args, session.buffers);
    firstStep = ckpt->step + 1;
    if (myRank == 0)
      llvm::outs() << "distopt-run: resumed " << resumePath << " after step "
                   << ckpt->step << " (saved on " << ckpt->worldSize
                   << " ranks)\n";
  }
  int64_t lastStep = firstStep - 1 + steps;
  session.upload();
  Progress progress(firstStep, lastStep);
  for (int64_t step = firstStep; step <= lastStep; ++step) {
    session.run(step);
    progress.after(step, session);
  }
  session.download();

  // Replicas must agree on every parameter that is not sharded, and no
  // parameter may have diverged.
  std::pair<int64_t, int64_t> replicas = compareReplicas(session, printParams);
  int64_t nonFinite = countNonFiniteParameters(session);
  if (nonFinite && myRank == 0)
    llvm::errs() << "distopt-run: " << nonFinite
                 << " parameter elements are inf or NaN on some rank: the "
                    "run diverged (check the learning rate)\n";
  if (printParamBits)
    printParameterBits(session);
  if (printMemoryOption)
    distopt::run::printMemory(session);
  printSummary(session, firstStep, lastStep, replicas, nonFinite != 0);
  llvm::outs().flush();
  if (!savePath.empty())
    saveCheckpoint(session, lastStep);
  session.close();
  return replicas.second || nonFinite ? 1 : 0;
}
