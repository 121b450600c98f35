//===- distopt-compile.cpp - a step to an object or shared library -*- C++
//-*-===//
//
// distopt-compile step.mlir --target=cpu -o step.so
//
// Parses the step, runs distopt-pipeline if asked, and compiles it with the
// step library (include/distopt/Target/StepLibrary.h): lowers @step with
// distopt-lower-to-cpu, translates it to LLVM IR, optimises it for this
// machine's CPU (O3) and emits an object file, or links a shared library
// with lld, all in this process. The output exports
//   int32_t distopt_step_packed(void **args) - calls the step: args[0]
//       points to the storage of the results it returns, args[1 + i] to
//       argument i (a memref descriptor, or a scalar); returns 0, or the
//       distopt_rt_status of the runtime call that failed. Results updated
//       in their argument's buffer are not returned (in_place_arg in the
//       interface);
//   const char distopt_step_abi[]          - the step's interface as JSON:
//       each argument's and result's role, name, dtype, shape and sharded
//       layout (docs/step-abi.md), and the world size;
//   int32_t distopt_step_packed_<name>(void **args) - for a split step
//       (--distopt-split-step), each entry point @step_<name> the same way.
// distopt-run loads it and runs it on N ranks.
//
//===----------------------------------------------------------------------===//

#include "TestPasses.h"
#include "distopt/Conversion/DistOptToRuntime/BufferizableOpInterfaceImpl.h"
#include "distopt/Conversion/Passes.h"
#include "distopt/Dialect/DistOpt/IR/DistOptDialect.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Pipelines/Pipelines.h"
#include "distopt/Planner/Planner.h"
#include "distopt/Target/StepLibrary.h"
#include "distopt/Transforms/Passes.h"
#include "distopt/Transforms/VerifyInput.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"

using namespace mlir;

namespace cl = llvm::cl;

static cl::OptionCategory compileCategory("distopt-compile options");

static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<step.mlir>"),
                                      cl::init("-"), cl::cat(compileCategory));
static cl::opt<std::string> outputFile("o",
                                       cl::desc("Output file: .o (object) "
                                                "or .so (shared library)"),
                                       cl::value_desc("file"), cl::Required,
                                       cl::cat(compileCategory));
static cl::opt<std::string>
    target("target",
           cl::desc("Target: cpu, or cuda (NVIDIA GPU kernels embedded in "
                    "host code; buffers in device memory)"),
           cl::init("cpu"), cl::cat(compileCategory));
static cl::opt<std::string>
    gpuChip("gpu-chip", cl::desc("GPU architecture for --target=cuda"),
            cl::init("sm_90"), cl::cat(compileCategory));
static cl::opt<std::string> gpuFormat(
    "gpu-format",
    cl::desc("What --target=cuda embeds: fatbin (cubin and PTX; needs the "
             "CUDA toolkit's ptxas), isa (PTX, compiled by the driver when "
             "loaded) or auto (fatbin when the toolkit is found)"),
    cl::init("auto"), cl::cat(compileCategory));
static cl::opt<std::string> cudaToolkit(
    "cuda-toolkit",
    cl::desc("CUDA toolkit for fatbin (default: $CUDA_ROOT, $CUDA_HOME, "
             "/usr/local/cuda)"),
    cl::init(""), cl::cat(compileCategory));
static cl::opt<std::string>
    pipeline("pipeline",
             cl::desc("Options of distopt-pipeline to run first, e.g. "
                      "'zero-stage=2 powersgd-rank=4' (default: none), or "
                      "'auto [options kept]': chosen by the planner from "
                      "--plan-calibration (distopt-plan)"),
             cl::init(""), cl::cat(compileCategory));
static cl::opt<std::string> planCalibration(
    "plan-calibration",
    cl::desc("--pipeline=auto: distopt-calibrate --compute --json's output "
             "(default: $DISTOPT_CALIBRATION)"),
    cl::init(""), cl::cat(compileCategory));
static cl::opt<std::string> planMemoryPerRank(
    "plan-memory-per-rank",
    cl::desc("--pipeline=auto: model state one rank may hold (8GiB, 512MiB; "
             "default: no limit)"),
    cl::init(""), cl::cat(compileCategory));
static cl::opt<int64_t> planNodes("plan-nodes",
                                  cl::desc("--pipeline=auto: nodes of the run"),
                                  cl::init(1), cl::cat(compileCategory));
static cl::opt<bool> planAllowLossy(
    "plan-allow-lossy",
    cl::desc("--pipeline=auto: also consider PowerSGD and 16-bit reductions"),
    cl::init(false), cl::cat(compileCategory));
static cl::opt<bool> runPipeline("distopt-pipeline",
                                 cl::desc("Run distopt-pipeline first"),
                                 cl::init(false), cl::cat(compileCategory));
static cl::opt<unsigned> optLevel("O", cl::desc("LLVM optimisation level"),
                                  cl::init(3), cl::Prefix,
                                  cl::cat(compileCategory));
static cl::opt<std::string> lowering(
    "lowering",
    cl::desc("Passes (textual, without the builtin.module anchor) that "
             "lower the step to the LLVM dialect instead of --target's; for "
             "tests: they must allocate with the runtime's allocator"),
    cl::init(""), cl::Hidden, cl::cat(compileCategory));
static cl::opt<std::string>
    cpu("cpu",
        cl::desc("CPU to compile for: native (this machine, with all its "
                 "features) or an LLVM CPU name such as x86-64"),
        cl::init("native"), cl::cat(compileCategory));
static cl::list<std::string> cpuFeatures(
    "cpu-features",
    cl::desc("Target features to add (+name) or remove (-name) after "
             "--cpu's, as llc's -mattr takes them, e.g. +prefer-256-bit"),
    cl::CommaSeparated, cl::cat(compileCategory));

static cl::opt<unsigned> elementwiseVectorBits(
    "elementwise-vector-bits",
    cl::desc("Vector width, in bits, of a CPU step's element-wise loops "
             "(updates, scalings, casts): a power of two, or 0 for --cpu's "
             "choice. Contractions and reductions keep --cpu's choice; "
             "--target=cuda's kernels are not affected"),
    cl::init(mlir::distopt::kDefaultElementwiseVectorBits),
    cl::cat(compileCategory));

/// Reports `message`.
static void fail(const Twine &message) {
  llvm::errs() << "distopt-compile: " << message << "\n";
}

/// --pipeline=auto: the planner's choice for `step`, keeping `kept`
/// (include/distopt/Planner/Planner.h), said on stderr.
static std::optional<std::string> plan(ModuleOp step, StringRef kept) {
  mlir::distopt::PlanRequest request;
  std::string path = planCalibration;
  if (path.empty())
    if (const char *fromEnv = std::getenv("DISTOPT_CALIBRATION"))
      path = fromEnv;
  if (path.empty()) {
    fail("--pipeline=auto needs measured links: --plan-calibration=FILE or "
         "$DISTOPT_CALIBRATION (mpirun -np N distopt-calibrate --compute "
         "--json > FILE)");
    return std::nullopt;
  }
  llvm::Expected<mlir::distopt::Calibration> calibration =
      mlir::distopt::readCalibrationFile(path);
  if (!calibration) {
    fail(llvm::toString(calibration.takeError()));
    return std::nullopt;
  }
  request.calibration = *calibration;
  if (!planMemoryPerRank.empty()) {
    std::optional<double> bytes =
        mlir::distopt::parseByteSize(planMemoryPerRank);
    if (!bytes || !(*bytes > 0)) {
      fail("--plan-memory-per-rank: expected a size such as 8GiB, not '" +
           planMemoryPerRank + "'");
      return std::nullopt;
    }
    request.memoryPerRank = *bytes;
  }
  auto world = step->getAttrOfType<IntegerAttr>(mlir::distopt::abi::kWorldSize);
  if (!world || planNodes < 1 || world.getInt() % planNodes) {
    fail("--pipeline=auto: --plan-nodes must divide the step's world size");
    return std::nullopt;
  }
  request.topology.nodes = planNodes;
  request.topology.ranksPerNode = world.getInt() / planNodes;
  request.allowLossy = planAllowLossy;
  request.fixedOptions = kept.str();
  llvm::Expected<mlir::distopt::Plan> plan =
      mlir::distopt::planPipeline(step, request);
  if (!plan) {
    fail("--pipeline=auto: " + llvm::toString(plan.takeError()));
    return std::nullopt;
  }
  const mlir::distopt::Candidate *chosen = plan->chosen();
  if (!chosen) {
    fail("--pipeline=auto: " + mlir::distopt::describeNoChoice(*plan) +
         " (distopt-plan lists the configurations)");
    return std::nullopt;
  }
  llvm::errs() << llvm::format("distopt-compile: --pipeline=auto chose "
                               "\"%s\" (predicted %.3g ms per step, %.1f MiB "
                               "of model state per rank)\n",
                               chosen->options.c_str(),
                               chosen->prediction.seconds * 1e3,
                               chosen->prediction.memoryBytes / (1 << 20));
  return chosen->options;
}

/// Parses and verifies the input (verifyInput: some upstream verifiers
/// crash on bad input) and runs distopt-pipeline if asked.
static OwningOpRef<ModuleOp> loadStep(MLIRContext &context,
                                      llvm::SourceMgr &sourceMgr) {
  std::string error;
  auto input = openInputFile(inputFile, &error);
  if (!input) {
    fail(error);
    return nullptr;
  }
  sourceMgr.AddNewSourceBuffer(std::move(input), llvm::SMLoc());
  ParserConfig parserConfig(&context, /*verifyAfterParse=*/false);
  OwningOpRef<ModuleOp> module =
      parseSourceFile<ModuleOp>(sourceMgr, parserConfig);
  if (!module || failed(mlir::distopt::verifyInput(*module)))
    return nullptr;
  // The pipeline infers a hand-written step's roles first; without it,
  // that pass alone.
  PassManager pm(&context);
  std::string chosen = pipeline;
  std::optional<std::string> kept = mlir::distopt::getPlannedOptions(pipeline);
  // The planner's options mean nothing without it: refused, not ignored.
  for (cl::Option *option : {static_cast<cl::Option *>(&planCalibration),
                             static_cast<cl::Option *>(&planMemoryPerRank),
                             static_cast<cl::Option *>(&planNodes),
                             static_cast<cl::Option *>(&planAllowLossy)})
    if (!kept && option->getNumOccurrences()) {
      fail("--" + option->ArgStr + " is for --pipeline=auto");
      return nullptr;
    }
  if (kept) {
    std::optional<std::string> planned = plan(*module, *kept);
    if (!planned)
      return nullptr;
    chosen = *planned;
  }
  if (runPipeline || !chosen.empty()) {
    mlir::distopt::DistOptPipelineOptions options;
    if (failed(options.parseFromString(chosen))) {
      fail("bad --pipeline options '" + chosen + "'");
      return nullptr;
    }
    mlir::distopt::buildDistOptPipeline(pm, options);
  } else {
    pm.addNestedPass<func::FuncOp>(mlir::distopt::createInferStepRolesPass());
  }
  if (failed(pm.run(*module)))
    return nullptr;
  return module;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  // What --lowering may name: the passes and pipelines, the tests' too.
  mlir::distopt::registerDistOptPasses();
  mlir::distopt::registerDistOptPipeline();
  mlir::distopt::test::registerDistOptTestPipelines();
  // Only this tool's options in --help, not every LLVM backend's.
  cl::HideUnrelatedOptions(compileCategory);
  cl::ParseCommandLineOptions(
      argc, argv, "distopt-compile: a step to an object or shared library\n");
  mlir::distopt::StepLibraryOptions options;
  options.target = target;
  options.gpuChip = gpuChip;
  options.gpuFormat = gpuFormat;
  options.cudaToolkit = cudaToolkit;
  options.lowering = lowering;
  options.cpu = cpu;
  options.cpuFeatures.assign(cpuFeatures.begin(), cpuFeatures.end());
  options.optLevel = optLevel;
  options.elementwiseVectorBits = elementwiseVectorBits;

  DialectRegistry registry;
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registry.insert<mlir::distopt::DistOptDialect>();
  mlir::distopt::registerBufferizableOpInterfaceExternalModels(registry);
  mlir::distopt::registerStepLibraryTranslations(registry);
  MLIRContext context(registry);
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  // Errors about the compilation as a whole (no location) read as the
  // tool's own.
  ScopedDiagnosticHandler unlocated(&context, [](Diagnostic &diag) {
    if (diag.getSeverity() != DiagnosticSeverity::Error ||
        !isa<UnknownLoc>(diag.getLocation()))
      return failure(); // to the source manager's handler
    llvm::errs() << "distopt-compile: " << diag << "\n";
    return success();
  });
  // Bad options are refused before any work.
  if (failed(mlir::distopt::checkStepLibraryOptions(&context, options,
                                                    outputFile)))
    return 1;
  OwningOpRef<ModuleOp> module = loadStep(context, sourceMgr);
  if (!module)
    return 1;
  return failed(
      mlir::distopt::compileStepLibrary(*module, options, outputFile));
}
