//===- distopt-plan.cpp - choose distopt-pipeline's options -----*- C++ -*-===//
//
// distopt-plan SPEC --calibration=calib.json --memory-per-rank=8GiB
//              [--nodes=N --ranks-per-node=R] [--allow-lossy]
//
// Imports a parameter spec (or reads a step's MLIR) for N x R ranks, runs
// distopt-pipeline with each configuration the planner considers
// (include/distopt/Planner/Planner.h), predicts each one's step time and
// model state per rank from calibrated links and rates, and prints the best
// few, why the others lost and the chosen options (-o writes them alone,
// --json everything).
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/DistOpt/IR/DistOptDialect.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Planner/Planner.h"
#include "distopt/Target/ParamSpec.h"
#include "distopt/Transforms/VerifyInput.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;
namespace cl = llvm::cl;

static cl::OptionCategory planCategory("distopt-plan options");
static cl::opt<std::string> inputFile(cl::Positional,
                                      cl::desc("<spec.json or step.mlir>"),
                                      cl::Required, cl::cat(planCategory));
static cl::opt<std::string> calibrationFile(
    "calibration",
    cl::desc("distopt-calibrate --compute --json's output (links and rates)"),
    cl::Required, cl::cat(planCategory));
static cl::opt<std::string> memoryPerRank(
    "memory-per-rank",
    cl::desc("Model state one rank may hold: 8GiB, 512MiB, 2GB (default: "
             "no limit)"),
    cl::init(""), cl::cat(planCategory));
static cl::opt<int64_t> nodes("nodes", cl::desc("Nodes of the run"),
                              cl::init(1), cl::cat(planCategory));
static cl::opt<int64_t> ranksPerNode(
    "ranks-per-node",
    cl::desc("Ranks per node (default: the spec's world size / --nodes)"),
    cl::init(0), cl::cat(planCategory));
static cl::opt<bool> allowLossy(
    "allow-lossy",
    cl::desc("Also consider PowerSGD and reducing 16-bit gradients in their "
             "own type"),
    cl::init(false), cl::cat(planCategory));
static cl::opt<double> backwardMs(
    "backward-ms",
    cl::desc("A backward pass of this many ms that the gradients' reductions "
             "overlap, as a training loop's hooks start them (default 0: the "
             "step runs after backward)"),
    cl::init(0), cl::cat(planCategory));
static cl::opt<std::string>
    keep("keep",
         cl::desc("distopt-pipeline options every candidate keeps, e.g. "
                  "\"backend=mpi\" or \"zero-stage=3\""),
         cl::init(""), cl::cat(planCategory));
static cl::opt<unsigned> top("top", cl::desc("How many candidates to list"),
                             cl::init(5), cl::cat(planCategory));
static cl::opt<bool> jsonOutput("json",
                                cl::desc("Print every candidate as JSON"),
                                cl::init(false), cl::cat(planCategory));
static cl::opt<std::string> outputFile(
    "o", cl::desc("Write the chosen distopt-pipeline options to this file"),
    cl::value_desc("filename"), cl::init(""), cl::cat(planCategory));

static int fail(const llvm::Twine &message) {
  llvm::errs() << "distopt-plan: " << message << "\n";
  return 1;
}

/// The spec's text with its world_size set to `world` (0: as it is).
static std::optional<std::string>
specForWorld(llvm::StringRef text, int64_t world, int64_t *specWorld) {
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed) {
    llvm::consumeError(parsed.takeError());
    return std::nullopt; // (the importer says what is wrong)
  }
  llvm::json::Object *root = parsed->getAsObject();
  if (!root)
    return std::nullopt;
  if (std::optional<int64_t> given = root->getInteger("world_size"))
    *specWorld = *given;
  if (world > 0)
    (*root)["world_size"] = world;
  std::string out;
  llvm::raw_string_ostream os(out);
  os << llvm::json::Value(std::move(*parsed));
  return out;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(planCategory);
  cl::ParseCommandLineOptions(
      argc, argv,
      "distopt-plan: choose distopt-pipeline's options for a model, a "
      "memory budget and measured links\n");

  mlir::distopt::PlanRequest request;
  if (!memoryPerRank.empty()) {
    std::optional<double> bytes = mlir::distopt::parseByteSize(memoryPerRank);
    if (!bytes || !(*bytes > 0))
      return fail("--memory-per-rank: expected a size such as 8GiB or "
                  "512MiB, not '" +
                  memoryPerRank + "'");
    request.memoryPerRank = *bytes;
  }
  if (nodes < 1 || nodes > 4096 || ranksPerNode < 0 || ranksPerNode > 4096)
    return fail("--nodes and --ranks-per-node take 1 to 4096");
  if (!(backwardMs >= 0) || backwardMs > 1e7)
    return fail("--backward-ms must be a number of milliseconds, at least 0");
  request.allowLossy = allowLossy;
  request.backwardSeconds = backwardMs * 1e-3;
  request.fixedOptions = keep;

  llvm::Expected<mlir::distopt::Calibration> calibration =
      mlir::distopt::readCalibrationFile(calibrationFile);
  if (!calibration)
    return fail(llvm::toString(calibration.takeError()));
  request.calibration = *calibration;

  DialectRegistry registry;
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registry.insert<mlir::distopt::DistOptDialect>();
  MLIRContext context(registry);
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);

  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> input = openInputFile(inputFile, &error);
  if (!input)
    return fail(error);
  OwningOpRef<ModuleOp> step;
  int64_t world = 0;
  if (llvm::StringRef(inputFile).ends_with(".json")) {
    // The spec as it is first (its errors at the user's lines), then for
    // the topology's world.
    int64_t specWorld = 0;
    int64_t wanted = ranksPerNode > 0 ? nodes * ranksPerNode : 0;
    std::optional<std::string> text =
        specForWorld(input->getBuffer(), wanted, &specWorld);
    sourceMgr.AddNewSourceBuffer(std::move(input), llvm::SMLoc());
    step = mlir::distopt::importParamSpec(sourceMgr, &context);
    if (step && text && wanted > 0 && wanted != specWorld) {
      llvm::SourceMgr forWorld;
      SourceMgrDiagnosticHandler handler(forWorld, &context);
      forWorld.AddNewSourceBuffer(
          llvm::MemoryBuffer::getMemBufferCopy(*text, inputFile),
          llvm::SMLoc());
      step = mlir::distopt::importParamSpec(forWorld, &context);
    }
    world = wanted > 0 ? wanted : specWorld;
  } else {
    sourceMgr.AddNewSourceBuffer(std::move(input), llvm::SMLoc());
    ParserConfig config(&context, /*verifyAfterParse=*/false);
    step = parseSourceFile<ModuleOp>(sourceMgr, config);
    if (step && failed(mlir::distopt::verifyInput(*step)))
      return 1;
    if (step)
      if (auto attr = (*step)->getAttrOfType<IntegerAttr>(
              mlir::distopt::abi::kWorldSize))
        world = attr.getInt();
  }
  if (!step)
    return 1;
  if (world <= 0)
    return fail("the step does not say its world size; give "
                "--ranks-per-node");
  request.topology.nodes = nodes;
  request.topology.ranksPerNode =
      ranksPerNode > 0 ? ranksPerNode : world / nodes;
  if (request.topology.worldSize() != world)
    return fail("the world of " + llvm::Twine(world) +
                " ranks is not --nodes=" + llvm::Twine(nodes) +
                " nodes of equal size");

  llvm::Expected<mlir::distopt::Plan> plan =
      mlir::distopt::planPipeline(*step, request);
  if (!plan)
    return fail(llvm::toString(plan.takeError()));
  if (jsonOutput)
    llvm::outs() << mlir::distopt::planToJSON(*plan) << "\n";
  else
    mlir::distopt::printPlan(*plan, request, llvm::outs(), top);
  const mlir::distopt::Candidate *chosen = plan->chosen();
  if (!outputFile.empty() && chosen) {
    std::unique_ptr<llvm::ToolOutputFile> file =
        openOutputFile(outputFile, &error);
    if (!file)
      return fail(error);
    file->os() << chosen->options << "\n";
    file->keep();
  }
  // Nothing within the budget is an answer, but not one to build on.
  return chosen ? 0 : 2;
}
