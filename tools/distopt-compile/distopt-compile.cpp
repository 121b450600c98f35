//===- distopt-compile.cpp - a step to an object or shared library -*- C++
//-*-===//
//
// distopt-compile step.mlir --target=cpu -o step.so
//
// Lowers @step with distopt-lower-to-cpu, translates it to LLVM IR, optimises
// it for this machine's CPU (O3) and emits an object file, or links a shared
// library with lld, all in this process. The output exports
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

#include "DescribeStep.h"
#include "TestPasses.h"
#include "distopt/Conversion/DistOptToRuntime/BufferizableOpInterfaceImpl.h"
#include "distopt/Conversion/DistOptToRuntime/RuntimeCalls.h"
#include "distopt/Conversion/Passes.h"
#include "distopt/Dialect/DistOpt/IR/DistOptDialect.h"
#include "distopt/Pipelines/Pipelines.h"
#include "distopt/StepInterface/StepInterface.h"
#include "distopt/Transforms/Passes.h"
#include "distopt/Transforms/VerifyInput.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/OpenMP/OpenMPToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "lld/Common/Driver.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/SubtargetFeature.h"

LLD_HAS_DRIVER(elf)

using namespace mlir;
namespace si = ::distopt::step;

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
                      "'zero-stage=2 powersgd-rank=4' (default: none)"),
             cl::init(""), cl::cat(compileCategory));
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

/// Adds `int32_t packedName(void **args)`, which loads each parameter of
/// the C interface wrapper of `function` from args[i], calls it, and
/// returns the status the function returns last (`returnsStatus`,
/// --distopt-return-status), or 0 for a step that makes no runtime call.
static LogicalResult addPackedEntry(llvm::Module &module, StringRef function,
                                    StringRef packedName, unsigned numStepArgs,
                                    bool returnsStatus) {
  llvm::Function *ciface =
      module.getFunction(("_mlir_ciface_" + function).str());
  llvm::Function *callee = module.getFunction(function);
  if (!ciface || !callee)
    return failure();
  llvm::LLVMContext &context = module.getContext();
  auto *ptr = llvm::PointerType::get(context, 0);
  auto *i32 = llvm::Type::getInt32Ty(context);
  auto *type = llvm::FunctionType::get(i32, {ptr}, false);
  auto *packed = llvm::Function::Create(
      type, llvm::GlobalValue::ExternalLinkage, packedName, module);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(context, "entry", packed));
  auto load = [&](llvm::Type *type, unsigned i) {
    llvm::Value *slot =
        b.CreateLoad(ptr, b.CreateConstGEP1_64(ptr, packed->getArg(0), i));
    return b.CreateLoad(type, slot);
  };
  // The C interface takes a pointer to the results' storage first when the
  // step returns several values, returns a single scalar by value, and
  // takes only the arguments when it returns nothing. The packed entry
  // leaves the step's own results in args[0]'s storage, laid out as the
  // struct of them (a prefix of the struct with the status).
  bool byValue = !ciface->getReturnType()->isVoidTy();
  bool byPointer = ciface->arg_size() == numStepArgs + 1 && !byValue;
  if (ciface->arg_size() != numStepArgs && !byPointer)
    return failure();
  llvm::Value *storage =
      b.CreateLoad(ptr, b.CreateLoad(ptr, packed->getArg(0)));
  auto *all = dyn_cast<llvm::StructType>(callee->getReturnType());
  llvm::Value *results = storage;
  if (byPointer && returnsStatus) {
    if (!all || all->getNumElements() < 2)
      return failure();
    results = b.CreateAlloca(all);
  }
  llvm::SmallVector<llvm::Value *> args;
  if (byPointer)
    args.push_back(results);
  // Argument k of the step is args[1 + k].
  unsigned first = byPointer ? 1 : 0;
  for (unsigned i = first; i < ciface->arg_size(); ++i)
    args.push_back(load(ciface->getArg(i)->getType(), 1 + i - first));
  llvm::Value *returned = b.CreateCall(ciface, args);
  if (!returnsStatus) {
    if (byValue)
      b.CreateStore(returned, storage);
    b.CreateRet(b.getInt32(0));
    return success();
  }
  if (byValue) { // the status alone: every result was updated in place
    if (returned->getType() != i32)
      return failure();
    b.CreateRet(returned);
    return success();
  }
  unsigned last = all->getNumElements() - 1;
  if (all->getElementType(last) != i32)
    return failure();
  auto *own = llvm::StructType::get(context, all->elements().drop_back());
  for (unsigned k = 0; k < last; ++k)
    b.CreateStore(b.CreateLoad(all->getElementType(k),
                               b.CreateStructGEP(all, results, k)),
                  b.CreateStructGEP(own, storage, k));
  b.CreateRet(b.CreateLoad(i32, b.CreateStructGEP(all, results, last)));
  return success();
}

static void addAbiString(llvm::Module &module, StringRef text) {
  llvm::LLVMContext &context = module.getContext();
  auto *init = llvm::ConstantDataArray::getString(context, text, true);
  new llvm::GlobalVariable(module, init->getType(), /*isConstant=*/true,
                           llvm::GlobalValue::ExternalLinkage, init,
                           "distopt_step_abi");
}

/// Reports `message`; a failure for phases, 1 for main.
struct Failed {
  operator LogicalResult() const { return failure(); }
  template <typename T> operator FailureOr<T>() const { return failure(); }
  operator int() const { return 1; }
};
static Failed fail(const Twine &message) {
  llvm::errs() << "distopt-compile: " << message << "\n";
  return {};
}

/// The CUDA toolkit to assemble kernels with: the option if given, else
/// the first of $CUDA_ROOT, $CUDA_HOME and /usr/local/cuda that has ptxas;
/// "" if none does.
static std::string findCudaToolkit() {
  SmallVector<std::string> candidates;
  if (!cudaToolkit.empty()) {
    candidates.push_back(cudaToolkit);
  } else {
    for (const char *var : {"CUDA_ROOT", "CUDA_HOME"})
      if (const char *value = std::getenv(var))
        candidates.push_back(value);
    candidates.push_back("/usr/local/cuda");
  }
  for (const std::string &dir : candidates) {
    llvm::SmallString<128> ptxas(dir);
    llvm::sys::path::append(ptxas, "bin", "ptxas");
    if (llvm::sys::fs::can_execute(ptxas))
      return dir;
  }
  return "";
}

/// --target=cuda's options: the chip, and what to embed (fatbin where the
/// toolkit's ptxas is found, else PTX).
static LogicalResult
configureGPU(mlir::distopt::DistOptLowerToGPUOptions &options) {
  options.chip = gpuChip;
  std::string toolkit = findCudaToolkit();
  if (gpuFormat == "auto")
    options.format = toolkit.empty() ? "isa" : "fatbin";
  else if (gpuFormat == "fatbin" || gpuFormat == "isa")
    options.format = gpuFormat;
  else
    return fail("unknown --gpu-format '" + gpuFormat +
                "' (fatbin, isa or auto)");
  if (options.format == "fatbin" && toolkit.empty())
    return fail("--gpu-format=fatbin needs the CUDA toolkit's ptxas: not "
                "in " +
                (cudaToolkit.empty()
                     ? std::string("$CUDA_ROOT, $CUDA_HOME or /usr/local/cuda")
                     : "--cuda-toolkit=" + cudaToolkit));
  options.toolkit = toolkit;
  return success();
}

/// Parses and verifies the input (verifyInput: some upstream verifiers
/// crash on bad input) and runs distopt-pipeline if asked.
static OwningOpRef<ModuleOp> loadStep(MLIRContext &context,
                                      llvm::SourceMgr &sourceMgr) {
  std::string error;
  auto input = openInputFile(inputFile, &error);
  if (!input) {
    (void)fail(error);
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
  if (runPipeline || !pipeline.empty()) {
    mlir::distopt::DistOptPipelineOptions options;
    if (failed(options.parseFromString(pipeline))) {
      (void)fail("bad --pipeline options '" + pipeline + "'");
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

/// Lowers the step to the LLVM dialect (--lowering's passes, or --target's)
/// and completes its interface with the results it leaves in argument
/// buffers. Returns the interface as JSON.
static FailureOr<std::string>
lowerStep(ModuleOp module, si::Interface abiInfo,
          const mlir::distopt::DistOptLowerToGPUOptions *gpu,
          llvm::StringSet<> &returnsStatus) {
  PassManager pm(module.getContext());
  if (!lowering.empty()) {
    // Anchored, the passes would run on modules nested in the input's.
    if (StringRef(lowering).starts_with("builtin.module("))
      return fail("--lowering takes the passes without the builtin.module "
                  "anchor");
    if (failed(parsePassPipeline(lowering, pm)))
      return fail("bad --lowering pipeline '" + lowering + "'");
  } else if (gpu) {
    mlir::distopt::buildDistOptLowerToGPUPipeline(pm, *gpu);
  } else {
    mlir::distopt::DistOptLowerToCPUOptions cpuOptions;
    cpuOptions.elementwiseVectorBits = elementwiseVectorBits;
    mlir::distopt::buildDistOptLowerToCPUPipeline(pm, cpuOptions,
                                                  /*runtimeAllocator=*/true);
  }
  if (failed(pm.run(module)))
    return failure();
  // Which results each entry point updated in its arguments' buffers (and
  // no longer returns): the driver needs to know.
  auto markInPlace = [&](StringRef function,
                         std::vector<si::Value> &results) -> LogicalResult {
    auto lowered = module.lookupSymbol<LLVM::LLVMFuncOp>(function);
    auto inPlace = lowered ? lowered->getAttrOfType<DenseI64ArrayAttr>(
                                 "distopt.in_place_results")
                           : DenseI64ArrayAttr();
    if (!inPlace)
      return fail("@" + function +
                  " is called inside the module: distopt-compile needs it "
                  "to be an entry point that the driver calls");
    if (inPlace.size() != static_cast<int64_t>(results.size()))
      return fail("the results of @" + function +
                  " do not match its interface");
    for (auto [result, arg] : llvm::zip_equal(results, inPlace.asArrayRef()))
      if (arg >= 0)
        result.inPlaceArg = arg;
    if (lowered->hasAttr(mlir::distopt::RuntimeCalls::kReturnsStatusAttr))
      returnsStatus.insert(function);
    return success();
  };
  if (failed(markInPlace("step", abiInfo.results)))
    return failure();
  for (si::Entry &entry : abiInfo.entries)
    if (failed(markInPlace("step_" + entry.name, entry.results)))
      return failure();
  // An entry point returns a failed runtime call's status to the driver;
  // a call that would end the process instead is a lowering without it.
  if (module.lookupSymbol(mlir::distopt::RuntimeCalls::kFatal))
    return fail("the lowering leaves calls of " +
                mlir::distopt::RuntimeCalls::kFatal +
                ": run --distopt-return-status after --convert-scf-to-cf");
  std::string abiText = si::toJSON(abiInfo).str();
  // What distopt-run reads back must be valid: a check of the writer.
  if (auto reread = si::parseInterface(abiText); !reread)
    return fail(reread.error());
  // The interface is in the JSON now; LLVM has no use for these attributes.
  module->walk([](LLVM::LLVMFuncOp func) {
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      if (DictionaryAttr attrs = func.getArgAttrDict(i))
        for (NamedAttribute attr : attrs)
          if (attr.getName().strref().starts_with("distopt."))
            func.removeArgAttr(i, attr.getName());
    for (unsigned i = 0; i < func.getNumResults(); ++i)
      if (DictionaryAttr attrs = func.getResultAttrDict(i))
        for (NamedAttribute attr : attrs)
          if (attr.getName().strref().starts_with("distopt."))
            func.removeResultAttr(i, attr.getName());
  });
  return abiText;
}

/// The LLVM module the object holds: the step, its packed entry point and
/// interface (the only symbols exported), optimised for --cpu.
static std::unique_ptr<llvm::Module>
translateStep(ModuleOp module, llvm::LLVMContext &llvmContext,
              llvm::TargetMachine &machine, unsigned numStepArgs,
              const si::Interface &abiInfo, StringRef abiText,
              const llvm::StringSet<> &returnsStatus) {
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, llvmContext);
  if (!llvmModule) {
    (void)fail("translation to LLVM IR failed");
    return nullptr;
  }
  llvm::StringSet<> exported = {"distopt_step_packed"};
  if (failed(addPackedEntry(*llvmModule, "step", "distopt_step_packed",
                            numStepArgs, returnsStatus.contains("step")))) {
    (void)fail("no C interface for @step was generated");
    return nullptr;
  }
  for (const si::Entry &entry : abiInfo.entries) {
    std::string packed = "distopt_step_packed_" + entry.name;
    std::string function = "step_" + entry.name;
    if (failed(addPackedEntry(*llvmModule, function, packed, numStepArgs,
                              returnsStatus.contains(function)))) {
      (void)fail("no C interface for @step_" + entry.name + " was generated");
      return nullptr;
    }
    exported.insert(packed);
  }
  addAbiString(*llvmModule, abiText);
  // Only the entry points and the interface are exported: an exported
  // `step` would be preempted by libc's legacy regexp step() when loaded.
  for (llvm::Function &function : *llvmModule)
    if (!function.isDeclaration() && !exported.contains(function.getName()))
      function.setLinkage(llvm::GlobalValue::InternalLinkage);
  llvmModule->setTargetTriple(machine.getTargetTriple());
  llvmModule->setDataLayout(machine.createDataLayout());
  if (llvm::Error err = makeOptimizingTransformer(optLevel, /*sizeLevel=*/0,
                                                  &machine)(llvmModule.get())) {
    (void)fail("LLVM optimisation failed: " + toString(std::move(err)));
    return nullptr;
  }
  return llvmModule;
}

/// This machine's CPU and its features (FMA, AVX-512 where present) for
/// --cpu=native, else the CPU named; then --cpu-features. A CPU or feature
/// LLVM does not know is an error here: LLVM would only warn, and then
/// abort on a CPU name it cannot use.
static std::unique_ptr<llvm::TargetMachine> targetMachine() {
  llvm::Triple triple(llvm::sys::getDefaultTargetTriple());
  std::string error;
  const llvm::Target *llvmTarget =
      llvm::TargetRegistry::lookupTarget(triple, error);
  if (!llvmTarget) {
    (void)fail(error);
    return nullptr;
  }
  std::unique_ptr<llvm::MCSubtargetInfo> known(
      llvmTarget->createMCSubtargetInfo(triple, "", ""));
  llvm::SubtargetFeatures features;
  std::string cpuName = cpu;
  if (cpuName == "native") {
    cpuName = llvm::sys::getHostCPUName().str();
    for (auto &[feature, enabled] : llvm::sys::getHostCPUFeatures())
      features.AddFeature(feature, enabled);
  } else if (!known->isCPUStringValid(cpuName)) {
    (void)fail("unknown --cpu '" + cpuName + "' for " + triple.str() +
               " (llc -mcpu=help lists the CPUs)");
    return nullptr;
  }
  for (const std::string &feature : cpuFeatures) {
    StringRef name = StringRef(feature).drop_front();
    bool signedName = StringRef(feature).starts_with("+") ||
                      StringRef(feature).starts_with("-");
    if (!signedName || llvm::none_of(known->getAllProcessorFeatures(),
                                     [&](const llvm::SubtargetFeatureKV &kv) {
                                       return name == kv.Key;
                                     })) {
      (void)fail("--cpu-features: '" + feature +
                 "' is not +name or -name of a feature of " + triple.str() +
                 " (llc -mattr=help lists them)");
      return nullptr;
    }
    features.AddFeature(feature);
  }
  llvm::TargetOptions targetOptions;
  return std::unique_ptr<llvm::TargetMachine>(llvmTarget->createTargetMachine(
      triple, cpuName, features.getString(), targetOptions, llvm::Reloc::PIC_));
}

/// Writes the object file, and for a .so links it with lld (in process).
static LogicalResult emit(llvm::Module &llvmModule,
                          llvm::TargetMachine &machine) {
  // lld resets the command-line options of the whole process: keep copies.
  std::string output = outputFile;
  bool shared = llvm::sys::path::extension(output) == ".so";
  std::string objectPath = output;
  llvm::SmallString<128> temporary;
  if (shared) {
    if (llvm::sys::fs::createTemporaryFile("distopt-step", "o", temporary))
      return fail("cannot create a temporary object file");
    objectPath = temporary.str().str();
  }
  {
    std::string error;
    std::unique_ptr<llvm::ToolOutputFile> object =
        openOutputFile(objectPath, &error);
    if (!object)
      return fail(error);
    llvm::legacy::PassManager codegen;
    if (machine.addPassesToEmitFile(codegen, object->os(), nullptr,
                                    llvm::CodeGenFileType::ObjectFile))
      return fail("this target cannot emit object files");
    codegen.run(llvmModule);
    object->keep();
  }
  if (!shared)
    return success();
  // The runtime's symbols are resolved when the library is loaded.
  const char *args[] = {"ld.lld",           "-shared", "-Bsymbolic",
                        objectPath.c_str(), "-o",      output.c_str()};
  lld::Result linked = lld::lldMain(args, llvm::outs(), llvm::errs(),
                                    {{lld::Gnu, &lld::elf::link}});
  llvm::sys::fs::remove(objectPath);
  if (linked.retCode != 0)
    return fail("linking " + output + " failed");
  return success();
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
  if (target != "cpu" && target != "cuda")
    return fail("unknown --target '" + target + "' (cpu or cuda)");
  bool cuda = target == "cuda";
  mlir::distopt::DistOptLowerToGPUOptions gpu;
  if (cuda && failed(configureGPU(gpu)))
    return 1;
  // Here, not only in the pass, so that the error is one line, before
  // any lowering.
  if (elementwiseVectorBits != 0 && !llvm::isPowerOf2_32(elementwiseVectorBits))
    return fail("--elementwise-vector-bits must be a power of two, or 0, "
                "got " +
                Twine(elementwiseVectorBits));
  StringRef extension = llvm::sys::path::extension(outputFile);
  if (extension != ".o" && extension != ".so")
    return fail("the output must end in .o or .so, got '" + outputFile + "'");
  // Before the lowering, so a bad --cpu or --cpu-features fails at once.
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  std::unique_ptr<llvm::TargetMachine> machine = targetMachine();
  if (!machine)
    return 1;

  DialectRegistry registry;
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registry.insert<mlir::distopt::DistOptDialect>();
  mlir::distopt::registerBufferizableOpInterfaceExternalModels(registry);
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  registerOpenMPDialectTranslation(registry); // parallel loops
  registerAllGPUToLLVMIRTranslations(registry);
  MLIRContext context(registry);
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  OwningOpRef<ModuleOp> module = loadStep(context, sourceMgr);
  if (!module)
    return 1;

  auto step = module->lookupSymbol<func::FuncOp>("step");
  if (!step || step.isExternal())
    return fail("the module has no @step function to compile");
  FailureOr<si::Interface> abiInfo = describeStep(*module, step, target);
  if (failed(abiInfo))
    return 1;
  unsigned numStepArgs = step.getNumArguments();
  step->setAttr("llvm.emit_c_interface", UnitAttr::get(&context));
  for (const si::Entry &entry : abiInfo->entries)
    module->lookupSymbol(StringAttr::get(&context, "step_" + entry.name))
        ->setAttr("llvm.emit_c_interface", UnitAttr::get(&context));
  llvm::StringSet<> returnsStatus;
  FailureOr<std::string> abiText =
      lowerStep(*module, *abiInfo, cuda ? &gpu : nullptr, returnsStatus);
  if (failed(abiText))
    return 1;

  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateStep(*module, llvmContext, *machine, numStepArgs, *abiInfo,
                    *abiText, returnsStatus);
  if (!llvmModule || failed(emit(*llvmModule, *machine)))
    return 1;
  return 0;
}
