//===- Pipelines.cpp - the distopt pass pipeline ----------------*- C++ -*-===//

#include "distopt/Dialect/DistOpt/Transforms/Pipelines.h"

#include "distopt/Dialect/DistOpt/Transforms/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace mlir::distopt;

void mlir::distopt::buildDistOptPipeline(
    OpPassManager &pm, const DistOptPipelineOptions &options) {
  // Folds group sizes and collectives on one rank first, so that the passes
  // see the constants they match.
  pm.addPass(createCanonicalizerPass());
  OpPassManager &func = pm.nest<func::FuncOp>();
  func.addPass(createFuseDivIntoAllReducePass(
      FuseDivIntoAllReducePassOptions{options.backend}));
  // Stage 0 means no sharding; any other value goes to the pass, which
  // rejects what it does not support.
  if (options.zeroStage != 0)
    func.addPass(createShardOptimizerPass(ShardOptimizerPassOptions{
        options.zeroStage, options.zeroStrategy, /*alignment=*/64}));
  if (options.powersgdRank != 0)
    func.addPass(createPowerSGDPass(
        PowerSGDPassOptions{options.powersgdRank, options.minCompressionRate,
                            options.errorFeedback, options.warmStart}));
  if (options.bucketize)
    func.addPass(createBucketizePass(BucketizePassOptions{
        options.bucketCapMb, options.firstBucketCapMb, /*reverse=*/true,
        /*alignment=*/64}));
  if (options.overlap)
    func.addPass(createOverlapCollectivesPass());
  if (options.verify)
    pm.addPass(createVerifyCollectivesPass());
}

void mlir::distopt::registerDistOptPipeline() {
  PassPipelineRegistration<DistOptPipelineOptions>(
      "distopt-pipeline",
      "The distopt transformations: division fusion, ZeRO sharding, "
      "PowerSGD, bucketing, overlap and cross-rank checks",
      buildDistOptPipeline);
}
