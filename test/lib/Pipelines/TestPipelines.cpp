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

namespace {
struct TestLoweringOptions : public PassPipelineOptions<TestLoweringOptions> {
  Option<bool> runtimeAllocator{
      *this, "runtime-allocator",
      llvm::cl::desc("Allocate with the runtime's allocator, as "
                     "distopt-compile does (distopt-run frees with it)"),
      llvm::cl::init(false)};
};
} // namespace

void mlir::distopt::test::registerDistOptTestPipelines() {
  PassPipelineRegistration<TestLoweringOptions>(
      "distopt-test-lower-to-gpu-on-host",
      "Testing: the GPU lowering's split of a step, run on the CPU (see "
      "--distopt-emulate-gpu-on-host)",
      [](OpPassManager &pm, const TestLoweringOptions &options) {
        // Small blocks, so that partial tiles are the rule.
        buildOffloadPipeline(pm, /*blockSize=*/4);
        // Index maps of launches use their ids, which loops do not make
        // valid affine dimensions.
        pm.addPass(createLowerAffinePass());
        pm.addNestedPass<func::FuncOp>(test::createEmulateGPUOnHostPass());
        buildLoopsToLLVMPipeline(pm, options.runtimeAllocator);
      });
  PassPipelineRegistration<TestLoweringOptions>(
      "distopt-test-lower-to-cpu-runtime-shards",
      "Testing: distopt-lower-to-cpu with every shard of a pack cut at run "
      "time (as beyond 64 ranks)",
      [](OpPassManager &pm, const TestLoweringOptions &options) {
        buildBufferizedStepPipeline(pm, /*maxShardCases=*/0);
        buildLoopsToLLVMPipeline(pm, options.runtimeAllocator);
      });
}
