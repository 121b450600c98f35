//===- Pipelines.cpp - the distopt pass pipeline ----------------*- C++ -*-===//

#include "distopt/Pipelines/Pipelines.h"

#include "distopt/Codegen/Passes.h"
#include "distopt/Conversion/Passes.h"
#include "distopt/Transforms/Passes.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/BufferizationToMemRef/BufferizationToMemRef.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/GPUCommon/GPUCommonPass.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/OpenMPToLLVM/ConvertOpenMPToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/SCFToGPU/SCFToGPUPass.h"
#include "mlir/Conversion/SCFToOpenMP/SCFToOpenMP.h"
#include "mlir/Conversion/UBToLLVM/UBToLLVM.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/Format.h"

using namespace mlir;
using namespace mlir::distopt;

/// The bucketing pass as the pipeline's options ask. With a link model it
/// is configured from text, so that it sees which options were given and
/// refuses caps given as well (every option of an options struct counts as
/// given).
static std::unique_ptr<Pass>
createPipelineBucketizePass(const DistOptPipelineOptions &options) {
  if (options.bucketLatencyUs == 0 && options.bucketBandwidthGbPerS == 0)
    return createBucketizePass(BucketizePassOptions{
        options.bucketCapMb, options.firstBucketCapMb, /*reverse=*/true,
        /*alignment=*/64});
  std::string text;
  llvm::raw_string_ostream os(text);
  auto print = [&](StringRef name, double value) {
    os << name << "=" << llvm::format("%.17g", value) << " ";
  };
  print("latency-us", options.bucketLatencyUs);
  print("bandwidth-gb-per-s", options.bucketBandwidthGbPerS);
  if (options.bucketCapMb.hasValue())
    print("cap-mb", options.bucketCapMb);
  if (options.firstBucketCapMb.hasValue())
    print("first-bucket-cap-mb", options.firstBucketCapMb);
  std::unique_ptr<Pass> pass = createBucketizePass();
  // Numbers printed in full always parse; the pass checks their values.
  (void)pass->initializeOptions(text, [](const Twine &) { return failure(); });
  return pass;
}

namespace {

/// Options given for a pass the pipeline does not run: refused when the
/// pipeline starts, by name, rather than ignored (a pass that fails to
/// initialize, with the message).
struct RefuseUnusedOptions
    : public PassWrapper<RefuseUnusedOptions, OperationPass<>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(RefuseUnusedOptions)

  explicit RefuseUnusedOptions(std::string message)
      : message(std::move(message)) {}
  StringRef getArgument() const override {
    return "distopt-refuse-unused-options";
  }
  LogicalResult initialize(MLIRContext *context) override {
    return emitError(UnknownLoc::get(context)) << message;
  }
  void runOnOperation() override {}

  std::string message;
};

/// Stage 0 means no sharding; any other value goes to the pass, which
/// rejects what it does not support (stage 0 with hybrid sharding or the
/// matrix plan's rates too).
bool runsShardOptimizer(const DistOptPipelineOptions &options) {
  return options.zeroStage != 0 || options.hybridShardSize != 0 ||
         options.zeroUpdateGflops != 0 || options.zeroLatencyUs != 0 ||
         options.zeroBandwidthGbPerS != 0;
}

/// The options given that only a pass the pipeline leaves out reads, each
/// with the option that would run it; "" when there are none.
std::string unusedOptions(const DistOptPipelineOptions &options) {
  std::string text;
  llvm::raw_string_ostream os(text);
  auto refuse = [&](bool unused, StringRef needs, const auto &...given) {
    auto check = [&](const auto &option) {
      if (unused && option.hasValue())
        os << (text.empty() ? "" : "; ") << option.getArgStr() << " needs "
           << needs;
    };
    (check(given), ...);
  };
  refuse(!options.dionLowRankSync,
         "dion-low-rank-sync (it batches that sync's all-reduces)",
         options.dionBatchMb);
  refuse(options.powersgdRank == 0,
         "powersgd-rank (PowerSGD is off without it)",
         options.minCompressionRate, options.errorFeedback, options.warmStart,
         options.powersgdSeed, options.powersgdStartIter,
         options.powersgdOrthogonalizationEpsilon, options.powersgdBatchMb);
  refuse(!runsShardOptimizer(options),
         "zero-stage (ZeRO is off at stage 0 without hybrid-shard-size)",
         options.zeroStrategy, options.zeroOwnerBalance,
         options.zeroMatrixPlan);
  refuse(!options.splitStep, "split-step (the gathers are its entries)",
         options.gatherParams);
  refuse(!options.bucketize, "bucketize (buckets are off)", options.bucketCapMb,
         options.firstBucketCapMb, options.bucketLatencyUs,
         options.bucketBandwidthGbPerS);
  return text;
}

} // namespace

void mlir::distopt::buildDistOptPipeline(
    OpPassManager &pm, const DistOptPipelineOptions &options) {
  if (std::string unused = unusedOptions(options); !unused.empty()) {
    pm.addPass(
        std::make_unique<RefuseUnusedOptions>("distopt-pipeline: " + unused));
    return;
  }
  // Folds group sizes and collectives on one rank first, so that the passes
  // see the constants they match.
  pm.addPass(createCanonicalizerPass());
  // Hybrid sharding's groups are module symbols: declared before the
  // function passes.
  if (options.hybridShardSize != 0)
    pm.addPass(
        createHybridMeshPass(HybridMeshPassOptions{options.hybridShardSize}));
  OpPassManager &func = pm.nest<func::FuncOp>();
  // The passes below find parameters, gradients and state by role.
  func.addPass(createInferStepRolesPass());
  // Before anything else reshapes the gradients' reductions: it takes the
  // importer's sum and division.
  if (options.dionLowRankSync)
    func.addPass(createDionLowRankSyncPass(
        DionLowRankSyncPassOptions{options.dionBatchMb}));
  func.addPass(createFuseDivIntoAllReducePass(
      FuseDivIntoAllReducePassOptions{options.backend}));
  if (options.reduceDtype != ReduceDtype::None)
    func.addPass(createWidenReductionsPass(
        WidenReductionsPassOptions{options.reduceDtype}));
  if (runsShardOptimizer(options)) {
    ShardOptimizerPassOptions shard{
        options.zeroStage,      options.zeroStrategy,
        /*alignment=*/64,       options.zeroOwnerBalance,
        options.zeroMatrixPlan, options.zeroUpdateGflops,
        options.zeroLatencyUs,  options.zeroBandwidthGbPerS};
    if (options.hybridShardSize != 0) {
      shard.shardGroup = "hybrid_shard";
      shard.replicateGroup = "hybrid_replicate";
    }
    func.addPass(createShardOptimizerPass(shard));
  }
  if (options.powersgdRank != 0)
    func.addPass(createPowerSGDPass(PowerSGDPassOptions{
        options.powersgdRank, options.minCompressionRate, options.errorFeedback,
        options.warmStart, options.powersgdBatchMb,
        options.powersgdOrthogonalizationEpsilon, options.powersgdStartIter,
        options.powersgdSeed}));
  if (options.bucketize)
    func.addPass(createPipelineBucketizePass(options));
  if (options.gradAsBucketView)
    func.addPass(createGradAsBucketViewPass());
  if (options.paramAsBucketView)
    func.addPass(createParamAsBucketViewPass());
  // Hierarchy on the buckets as they will be reduced (a module pass: it
  // declares the node groups), before the collectives become asynchronous.
  OpPassManager *late = &func;
  if (options.hierarchicalNodeSize != 0) {
    pm.addPass(createHierarchicalAllReducePass(HierarchicalAllReducePassOptions{
        options.hierarchicalNodeSize, options.hierarchicalMinBytes}));
    late = &pm.nest<func::FuncOp>();
  }
  if (options.overlap)
    late->addPass(createOverlapCollectivesPass());
  if (options.verify)
    pm.addPass(createVerifyCollectivesPass());
  // After the checks: they hold for @step, which the entries split.
  if (options.splitStep)
    pm.addPass(createSplitStepPass(SplitStepPassOptions{options.gatherParams}));
}

void mlir::distopt::buildBufferizedStepPipeline(OpPassManager &pm,
                                                int64_t maxShardCases) {
  pm.addPass(createCanonicalizerPass());
  pm.addNestedPass<func::FuncOp>(createLowerOptimizersPass());
  pm.addPass(createLowerLocalOpsPass(LowerLocalOpsPassOptions{maxShardCases}));
  pm.addNestedPass<func::FuncOp>(createConvertElementwiseToLinalgPass());
  pm.addPass(createFoldSplatInputsPass());
  pm.addPass(createFuseElementwiseProducersPass());
  // Element-wise results that are packed into a bucket (gradients extended
  // to f32 by --distopt-widen-reductions) are computed in the bucket's slot
  // instead of a temporary copied there.
  pm.addPass(bufferization::createEmptyTensorEliminationPass());
  bufferization::OneShotBufferizePassOptions bufferize;
  bufferize.bufferizeFunctionBoundaries = true;
  bufferize.functionBoundaryTypeConversion =
      bufferization::LayoutMapOption::IdentityLayoutMap;
  // An owner loop (an owned_by) may yield a new buffer, as a branch may: a
  // bf16 parameter rounded from its main copy.
  bufferize.allowReturnAllocsFromLoops = true;
  pm.addPass(bufferization::createOneShotBufferizePass(bufferize));
  pm.addNestedPass<func::FuncOp>(createOwnerLoopsToBranchesPass());
  // Asynchronous collectives in their input's buffer where that is safe (a
  // copy of every bucket less).
  pm.addPass(createAsyncInPlacePass());
  pm.addPass(createSymbolDCEPass()); // the process groups, now unused
  // Results that are updated arguments are dropped (the driver reads them in
  // the argument's buffer): returned, they would be copied by the
  // deallocation pipeline, which must own what a function returns.
  pm.addPass(createMarkInPlaceResultsPass());
  // Free what the step allocates and does not return (each step would leak
  // its temporaries otherwise); returned buffers belong to the caller.
  bufferization::buildBufferDeallocationPipeline(
      pm, bufferization::BufferDeallocationPipelineOptions());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createConvertBufferizationToMemRefPass());
  // Loops over contiguous memory as one loop: LLVM vectorizes N-D nests
  // with small inner sizes (conv weights' 3x3) with gathers and scatters.
  pm.addNestedPass<func::FuncOp>(createCollapseContiguousLoopsPass());
}

void mlir::distopt::buildParallelLoopsPipeline(OpPassManager &pm) {
  pm.addNestedPass<func::FuncOp>(createParallelizeLoopsPass());
  pm.addPass(createConvertSCFToOpenMPPass());
  // The OpenMP loops' bodies come wrapped in memref.alloca_scope, which
  // must keep one block: inline those that allocate nothing (all of them
  // here) before --convert-scf-to-cf turns a split reduction's inner loop
  // into blocks.
  pm.addPass(createCanonicalizerPass());
}

void mlir::distopt::buildLoopsToLLVMPipeline(OpPassManager &pm,
                                             bool runtimeAllocator,
                                             unsigned elementwiseVectorBits) {
  pm.addNestedPass<func::FuncOp>(createConvertLinalgToLoopsPass());
  // Streaming updates at one width, contractions at the target's.
  pm.addNestedPass<func::FuncOp>(createAnnotateVectorWidthPass(
      AnnotateVectorWidthPassOptions{elementwiseVectorBits}));
  pm.addPass(createLowerAffinePass());
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(createReturnStatusPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  FinalizeMemRefToLLVMConversionPassOptions memrefToLLVM;
  // The runtime's allocator caches large blocks across steps.
  memrefToLLVM.useGenericFunctions = runtimeAllocator;
  pm.addPass(createFinalizeMemRefToLLVMConversionPass(memrefToLLVM));
  // Debian 12's libgcc has no __truncsfbf2 or __truncdfbf2 for LLVM to call.
  pm.addPass(createExpandBF16TruncationsPass());
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createConvertOpenMPToLLVMPass());
  pm.addPass(createUBToLLVMConversionPass()); // a failed step's results
  pm.addPass(createReconcileUnrealizedCastsPass());
}

void mlir::distopt::buildDistOptLowerToCPUPipeline(
    OpPassManager &pm, const DistOptLowerToCPUOptions &options,
    bool runtimeAllocator) {
  buildBufferizedStepPipeline(pm);
  // Matrix products through the runtime's BLAS.
  pm.addPass(createContractionsToRuntimePass());
  buildParallelLoopsPipeline(pm);
  buildLoopsToLLVMPipeline(pm, runtimeAllocator, options.elementwiseVectorBits);
}

void mlir::distopt::buildOffloadPipeline(OpPassManager &pm, int64_t blockSize) {
  buildBufferizedStepPipeline(pm);
  pm.addNestedPass<func::FuncOp>(
      createOffloadToGPUPass(OffloadToGPUPassOptions{blockSize}));
  pm.addNestedPass<func::FuncOp>(createConvertParallelLoopToGpuPass());
  pm.addNestedPass<func::FuncOp>(createVerifyOffloadPass());
}

void mlir::distopt::buildDistOptLowerToGPUPipeline(
    OpPassManager &pm, const DistOptLowerToGPUOptions &options) {
  buildOffloadPipeline(pm, options.blockSize);
  pm.addPass(createGpuKernelOutliningPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  // Host and device ops on one stream, waited for before the host reads.
  pm.addNestedPass<func::FuncOp>(createGpuAsyncRegionPass());

  GpuNVVMAttachTargetOptions target;
  target.chip = options.chip;
  target.features = options.features;
  target.optLevel = options.optLevel;
  pm.addPass(createGpuNVVMAttachTarget(target));
  OpPassManager &device = pm.nest<gpu::GPUModuleOp>();
  device.addPass(createSCFToControlFlowPass());
  device.addPass(memref::createExpandStridedMetadataPass());
  device.addPass(createLowerAffinePass());
  device.addPass(createExactGPUSqrtPass());
  device.addPass(createConvertGpuOpsToNVVMOps());
  device.addPass(createCanonicalizerPass());
  device.addPass(createCSEPass());
  device.addPass(createReconcileUnrealizedCastsPass());

  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(createReturnStatusPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createGpuToLLVMConversionPass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createExpandBF16TruncationsPass()); // host code, as on the CPU
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createUBToLLVMConversionPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  GpuModuleToBinaryPassOptions binary;
  binary.compilationTarget = options.format;
  binary.toolkitPath = options.toolkit;
  pm.addPass(createGpuModuleToBinaryPass(binary));
}

void mlir::distopt::registerDistOptPipeline() {
  PassPipelineRegistration<DistOptLowerToGPUOptions>(
      "distopt-lower-to-gpu",
      "Lower a step to LLVM-dialect host code with embedded NVIDIA GPU "
      "kernels, calling the distopt runtime",
      buildDistOptLowerToGPUPipeline);
  PassPipelineRegistration<DistOptLowerToCPUOptions>(
      "distopt-lower-to-cpu",
      "Lower a step to LLVM-dialect code for CPUs calling the distopt runtime",
      [](OpPassManager &pm, const DistOptLowerToCPUOptions &options) {
        buildDistOptLowerToCPUPipeline(pm, options);
      });
  PassPipelineRegistration<DistOptPipelineOptions>(
      "distopt-pipeline",
      "The distopt transformations: division fusion, ZeRO sharding, "
      "PowerSGD, bucketing, overlap and cross-rank checks",
      buildDistOptPipeline);
}

void mlir::distopt::registerDistOptPasses() {
  registerDistOptTransformsPasses();
  registerDistOptConversionPasses();
  registerDistOptCodegenPasses();
}
