//===- StepLibrary.cpp - a step compiled into a loadable library -*- C++
//-*-===//
//
// Lowers @step with the target's pipeline, translates it to LLVM IR, adds
// the packed entry points (int32_t distopt_step_packed[_<name>](void **args):
// args[0] points to the storage of the results returned, args[1 + i] to
// argument i; each returns 0 or the status of the runtime call that failed)
// and the interface as JSON (distopt_step_abi, docs/step-abi.md), optimises
// it for the CPU (O3) and emits an object file, or links a shared library
// with lld, all in this process.
//
//===----------------------------------------------------------------------===//

#include "distopt/Target/StepLibrary.h"

#include "DescribeStep.h"
#include "distopt/Conversion/DistOptToRuntime/RuntimeCalls.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/StepInterface/StepInterface.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
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
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/SubtargetFeature.h"

#include <mutex>

LLD_HAS_DRIVER(elf)

using namespace mlir;
using namespace mlir::distopt;
namespace si = ::distopt::step;

/// An error about the compilation as a whole: no op to point at.
static InFlightDiagnostic fail(MLIRContext *context, const Twine &message) {
  return emitError(UnknownLoc::get(context), message);
}

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

/// The CUDA toolkit to assemble kernels with: the option if given, else
/// the first of $CUDA_ROOT, $CUDA_HOME and /usr/local/cuda that has ptxas;
/// "" if none does.
static std::string findCudaToolkit(StringRef cudaToolkit) {
  SmallVector<std::string> candidates;
  if (!cudaToolkit.empty()) {
    candidates.push_back(cudaToolkit.str());
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

/// --target=cuda's lowering options into `gpu`: the chip, and what to
/// embed (fatbin where the toolkit's ptxas is found, else PTX).
static LogicalResult configureGPU(MLIRContext *context,
                                  const StepLibraryOptions &options,
                                  DistOptLowerToGPUOptions &gpu) {
  gpu.chip = options.gpuChip;
  std::string toolkit = findCudaToolkit(options.cudaToolkit);
  const std::string &format = options.gpuFormat;
  if (format == "auto")
    gpu.format = toolkit.empty() ? "isa" : "fatbin";
  else if (format == "fatbin" || format == "isa")
    gpu.format = format;
  else
    return fail(context,
                "unknown --gpu-format '" + format + "' (fatbin, isa or auto)");
  if (gpu.format == "fatbin" && toolkit.empty())
    return fail(
        context,
        "--gpu-format=fatbin needs the CUDA toolkit's ptxas: not "
        "in " +
            (options.cudaToolkit.empty()
                 ? std::string("$CUDA_ROOT, $CUDA_HOME or /usr/local/cuda")
                 : "--cuda-toolkit=" + options.cudaToolkit));
  gpu.toolkit = toolkit;
  return success();
}

/// Lowers the step to the LLVM dialect (--lowering's passes, or --target's)
/// and completes its interface with the results it leaves in argument
/// buffers. Returns the interface as JSON.
static FailureOr<std::string> lowerStep(ModuleOp module, si::Interface abiInfo,
                                        const StepLibraryOptions &options,
                                        const DistOptLowerToGPUOptions *gpu,
                                        llvm::StringSet<> &returnsStatus) {
  MLIRContext *context = module.getContext();
  const std::string &lowering = options.lowering;
  PassManager pm(context);
  if (!lowering.empty()) {
    // Anchored, the passes would run on modules nested in the input's.
    if (StringRef(lowering).starts_with("builtin.module("))
      return fail(context,
                  "--lowering takes the passes without the builtin.module "
                  "anchor");
    if (failed(parsePassPipeline(lowering, pm)))
      return fail(context, "bad --lowering pipeline '" + lowering + "'");
  } else if (gpu) {
    buildDistOptLowerToGPUPipeline(pm, *gpu);
  } else {
    DistOptLowerToCPUOptions cpuOptions;
    cpuOptions.elementwiseVectorBits = options.elementwiseVectorBits;
    buildDistOptLowerToCPUPipeline(pm, cpuOptions, /*runtimeAllocator=*/true);
  }
  if (failed(pm.run(module)))
    return failure();
  // Which results each entry point updated in its arguments' buffers (and
  // no longer returns): the driver needs to know.
  auto markInPlace = [&](StringRef function,
                         std::vector<si::Value> &results) -> LogicalResult {
    auto lowered = module.lookupSymbol<LLVM::LLVMFuncOp>(function);
    auto inPlace =
        lowered
            ? lowered->getAttrOfType<DenseI64ArrayAttr>(abi::kInPlaceResults)
            : DenseI64ArrayAttr();
    if (!inPlace)
      return fail(context,
                  "@" + function +
                      " is called inside the module: distopt-compile needs it "
                      "to be an entry point that the driver calls");
    if (inPlace.size() != static_cast<int64_t>(results.size()))
      return fail(context, "the results of @" + function +
                               " do not match its interface");
    for (auto [result, arg] : llvm::zip_equal(results, inPlace.asArrayRef()))
      if (arg >= 0)
        result.inPlaceArg = arg;
    if (lowered->hasAttr(abi::kReturnsStatus))
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
  if (module.lookupSymbol(RuntimeCalls::kFatal))
    return fail(context,
                "the lowering leaves calls of " + RuntimeCalls::kFatal +
                    ": run --distopt-return-status after --convert-scf-to-cf");
  std::string abiText = si::toJSON(abiInfo).str();
  // What distopt-run reads back must be valid: a check of the writer.
  if (auto reread = si::parseInterface(abiText); !reread)
    return fail(context, reread.error());
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
              const llvm::StringSet<> &returnsStatus, unsigned optLevel) {
  MLIRContext *context = module.getContext();
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, llvmContext);
  if (!llvmModule) {
    (void)fail(context, "translation to LLVM IR failed");
    return nullptr;
  }
  llvm::StringSet<> exported = {"distopt_step_packed"};
  if (failed(addPackedEntry(*llvmModule, "step", "distopt_step_packed",
                            numStepArgs, returnsStatus.contains("step")))) {
    (void)fail(context, "no C interface for @step was generated");
    return nullptr;
  }
  for (const si::Entry &entry : abiInfo.entries) {
    std::string packed = "distopt_step_packed_" + entry.name;
    std::string function = "step_" + entry.name;
    if (failed(addPackedEntry(*llvmModule, function, packed, numStepArgs,
                              returnsStatus.contains(function)))) {
      (void)fail(context,
                 "no C interface for @step_" + entry.name + " was generated");
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
    (void)fail(context,
               "LLVM optimisation failed: " + toString(std::move(err)));
    return nullptr;
  }
  return llvmModule;
}

/// This machine's CPU and its features (FMA, AVX-512 where present) for
/// --cpu=native, else the CPU named; then --cpu-features. A CPU or feature
/// LLVM does not know is an error here: LLVM would only warn, and then
/// abort on a CPU name it cannot use.
static std::unique_ptr<llvm::TargetMachine>
targetMachine(MLIRContext *context, const StepLibraryOptions &options) {
  llvm::Triple triple(llvm::sys::getDefaultTargetTriple());
  std::string error;
  const llvm::Target *llvmTarget =
      llvm::TargetRegistry::lookupTarget(triple, error);
  if (!llvmTarget) {
    (void)fail(context, error);
    return nullptr;
  }
  std::unique_ptr<llvm::MCSubtargetInfo> known(
      llvmTarget->createMCSubtargetInfo(triple, "", ""));
  llvm::SubtargetFeatures features;
  std::string cpuName = options.cpu;
  if (cpuName == "native") {
    cpuName = llvm::sys::getHostCPUName().str();
    for (auto &[feature, enabled] : llvm::sys::getHostCPUFeatures())
      features.AddFeature(feature, enabled);
  } else if (!known->isCPUStringValid(cpuName)) {
    (void)fail(context, "unknown --cpu '" + cpuName + "' for " + triple.str() +
                            " (llc -mcpu=help lists the CPUs)");
    return nullptr;
  }
  for (const std::string &feature : options.cpuFeatures) {
    StringRef name = StringRef(feature).drop_front();
    bool signedName = StringRef(feature).starts_with("+") ||
                      StringRef(feature).starts_with("-");
    if (!signedName || llvm::none_of(known->getAllProcessorFeatures(),
                                     [&](const llvm::SubtargetFeatureKV &kv) {
                                       return name == kv.Key;
                                     })) {
      (void)fail(context, "--cpu-features: '" + feature +
                              "' is not +name or -name of a feature of " +
                              triple.str() + " (llc -mattr=help lists them)");
      return nullptr;
    }
    features.AddFeature(feature);
  }
  llvm::TargetOptions targetOptions;
  // Global constructors (a GPU step's module load) in .init_array, which the
  // dynamic loader runs; it ignores .ctors, and lld keeps that section as is.
  targetOptions.UseInitArray = true;
  return std::unique_ptr<llvm::TargetMachine>(llvmTarget->createTargetMachine(
      triple, cpuName, features.getString(), targetOptions, llvm::Reloc::PIC_));
}

/// Writes the object file, and for a .so links it with lld (in process).
static LogicalResult emit(MLIRContext *context, llvm::Module &llvmModule,
                          llvm::TargetMachine &machine, StringRef outputPath) {
  std::string output = outputPath.str();
  bool shared = llvm::sys::path::extension(output) == ".so";
  std::string objectPath = output;
  llvm::SmallString<128> temporary;
  if (shared) {
    if (llvm::sys::fs::createTemporaryFile("distopt-step", "o", temporary))
      return fail(context, "cannot create a temporary object file");
    objectPath = temporary.str().str();
  }
  {
    std::string error;
    std::unique_ptr<llvm::ToolOutputFile> object =
        openOutputFile(objectPath, &error);
    if (!object)
      return fail(context, error);
    llvm::legacy::PassManager codegen;
    if (machine.addPassesToEmitFile(codegen, object->os(), nullptr,
                                    llvm::CodeGenFileType::ObjectFile))
      return fail(context, "this target cannot emit object files");
    codegen.run(llvmModule);
    object->keep();
  }
  if (!shared)
    return success();
  // The runtime's symbols are resolved when the library is loaded.
  const char *args[] = {"ld.lld",           "-shared", "-Bsymbolic",
                        objectPath.c_str(), "-o",      output.c_str()};
  // lld's driver keeps process-wide state: one link at a time.
  static std::mutex linking;
  lld::Result linked = [&] {
    std::lock_guard<std::mutex> lock(linking);
    return lld::lldMain(args, llvm::outs(), llvm::errs(),
                        {{lld::Gnu, &lld::elf::link}});
  }();
  llvm::sys::fs::remove(objectPath);
  if (linked.retCode != 0)
    return fail(context, "linking " + output + " failed");
  return success();
}

void mlir::distopt::registerStepLibraryTranslations(DialectRegistry &registry) {
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  registerOpenMPDialectTranslation(registry); // parallel loops
  registerAllGPUToLLVMIRTranslations(registry);
}

/// The native target, once per process.
static void initializeNativeTarget() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

namespace {
/// What the options resolve to: the machine to compile for and, for
/// --target=cuda, the GPU lowering's options.
struct Target {
  std::unique_ptr<llvm::TargetMachine> machine;
  DistOptLowerToGPUOptions gpu;
  bool cuda = false;
};
} // namespace

/// Checks the options and resolves them, before any work.
static LogicalResult prepareTarget(MLIRContext *context,
                                   const StepLibraryOptions &options,
                                   StringRef outputPath, Target &target) {
  if (options.target != "cpu" && options.target != "cuda")
    return fail(context,
                "unknown --target '" + options.target + "' (cpu or cuda)");
  target.cuda = options.target == "cuda";
  if (target.cuda && failed(configureGPU(context, options, target.gpu)))
    return failure();
  unsigned bits = options.elementwiseVectorBits;
  if (bits != 0 && !llvm::isPowerOf2_32(bits))
    return fail(context, "--elementwise-vector-bits must be a power of two, "
                         "or 0, got " +
                             Twine(bits));
  if (options.optLevel > 3)
    return fail(context,
                "-O must be 0, 1, 2 or 3, got " + Twine(options.optLevel));
  StringRef extension = llvm::sys::path::extension(outputPath);
  if (extension != ".o" && extension != ".so")
    return fail(context,
                "the output must end in .o or .so, got '" + outputPath + "'");
  initializeNativeTarget();
  target.machine = targetMachine(context, options);
  return success(target.machine != nullptr);
}

LogicalResult
mlir::distopt::checkStepLibraryOptions(MLIRContext *context,
                                       const StepLibraryOptions &options,
                                       StringRef outputPath) {
  Target target;
  return prepareTarget(context, options, outputPath, target);
}

LogicalResult mlir::distopt::compileStepLibrary(
    ModuleOp module, const StepLibraryOptions &options, StringRef outputPath) {
  MLIRContext *context = module.getContext();
  Target target;
  if (failed(prepareTarget(context, options, outputPath, target)))
    return failure();
  DialectRegistry translations;
  registerStepLibraryTranslations(translations);
  context->appendDialectRegistry(translations);

  auto step = module.lookupSymbol<func::FuncOp>("step");
  if (!step || step.isExternal())
    return fail(context, "the module has no @step function to compile");
  FailureOr<si::Interface> abiInfo = describeStep(module, step, options.target);
  if (failed(abiInfo))
    return failure();
  unsigned numStepArgs = step.getNumArguments();
  // The entry points C code calls: each gets a C interface, and returns
  // the status of a runtime call that failed (--distopt-return-status).
  step->setAttr("llvm.emit_c_interface", UnitAttr::get(context));
  for (const si::Entry &entry : abiInfo->entries)
    module.lookupSymbol(StringAttr::get(context, "step_" + entry.name))
        ->setAttr("llvm.emit_c_interface", UnitAttr::get(context));
  llvm::StringSet<> returnsStatus;
  FailureOr<std::string> abiText =
      lowerStep(module, *abiInfo, options, target.cuda ? &target.gpu : nullptr,
                returnsStatus);
  if (failed(abiText))
    return failure();

  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateStep(module, llvmContext, *target.machine, numStepArgs, *abiInfo,
                    *abiText, returnsStatus, options.optLevel);
  if (!llvmModule)
    return failure();
  return emit(context, *llvmModule, *target.machine, outputPath);
}
