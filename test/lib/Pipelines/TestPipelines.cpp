//===- TestPipelines.cpp - pipelines only the tests use --------*- C++ -*-===//
//
// Variants of the lowerings that lit tests run through distopt-opt: the GPU
// split emulated on the CPU, and the CPU lowering with every ZeRO shard of
// a pack cut at run time.
//
//===----------------------------------------------------------------------===//

#include "TestPasses.h"

#include "distopt/Pipelines/Pipelines.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace mlir::distopt;

void mlir::distopt::test::registerDistOptTestPipelines() {
  PassPipelineRegistration<>(
      "distopt-test-lower-to-gpu-on-host",
      "Testing: the GPU lowering's split of a step, run on the CPU (see "
      "--distopt-emulate-gpu-on-host)",
      [](OpPassManager &pm) {
        // Small blocks, so that partial tiles are the rule.
        buildOffloadPipeline(pm, /*blockSize=*/4);
        // Index maps of launches use their ids, which loops do not make
        // valid affine dimensions.
        pm.addPass(createLowerAffinePass());
        pm.addNestedPass<func::FuncOp>(test::createEmulateGPUOnHostPass());
        buildLoopsToLLVMPipeline(pm, /*runtimeAllocator=*/false);
      });
  PassPipelineRegistration<>(
      "distopt-test-lower-to-cpu-runtime-shards",
      "Testing: distopt-lower-to-cpu with every shard of a pack cut at run "
      "time (as beyond 64 ranks)",
      [](OpPassManager &pm) {
        buildBufferizedStepPipeline(pm, /*maxShardCases=*/0);
        buildLoopsToLLVMPipeline(pm, /*runtimeAllocator=*/false);
      });
}
