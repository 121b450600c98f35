//===- pipeline_fuzzer.cpp - libFuzzer: distopt's passes on valid IR ------===//
//
// Whatever parses and verifies goes through distopt's passes in several
// configurations (the pipeline at each ZeRO stage and strategy, PowerSGD,
// wider reductions, gradients and parameters as bucket views, the shard
// conversion, the CPU lowering's own passes). A pass may reject its input with
// a diagnostic; it must not crash, and what it accepts must verify afterwards.
//
//===----------------------------------------------------------------------===//

#include "FuzzCommon.h"

#include "TestPasses.h"
#include "distopt/Pipelines/Pipelines.h"

#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <cstdlib>

static const char *const kPipelines[] = {
    "builtin.module(distopt-pipeline)",
    "builtin.module(distopt-pipeline{zero-stage=1 zero-strategy=greedy})",
    "builtin.module(distopt-pipeline{zero-stage=2 powersgd-rank=2 "
    "reduce-dtype=f32})",
    // PowerSGD's factors batched, through the lowering that batches them.
    "builtin.module(distopt-pipeline{powersgd-rank=1 powersgd-batch-mb=1},"
    "func.func(distopt-lower-optimizers),distopt-lower-local-ops)",
    "builtin.module(distopt-pipeline{zero-stage=3 bucket-cap-mb=0.001})",
    // Caps from a link model: 10 bytes of latency, so many small buckets.
    "builtin.module(distopt-pipeline{bucket-latency-us=0.01 "
    "bucket-bandwidth-gb-per-s=1 grad-as-bucket-view})",
    "builtin.module(distopt-pipeline{zero-stage=2 grad-as-bucket-view "
    "param-as-bucket-view})",
    "builtin.module(func.func(distopt-widen-reductions{dtype=f64},"
    "distopt-grad-as-bucket-view),distopt-report{output=/dev/null})",
    "builtin.module(convert-shard-to-distopt,distopt-report{output=/dev/null})",
    "builtin.module(func.func(distopt-lower-optimizers))",
    "builtin.module(distopt-lower-local-ops)",
    "builtin.module(distopt-mark-in-place-results)",
    "builtin.module(func.func(distopt-offload-to-gpu))",
    // The GPU split (emulated): kernel code generation is too slow here.
    "builtin.module(distopt-test-lower-to-gpu-on-host)",
};

namespace {
struct VerifyAfterEachPass : public mlir::PassInstrumentation {
  void runAfterPass(mlir::Pass *pass, mlir::Operation *op) override {
    if (mlir::succeeded(mlir::verify(op)))
      return;
    llvm::errs() << pass->getArgument() << " succeeded but left invalid IR\n";
    std::abort();
  }
};
} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  mlir::distopt::registerDistOptPasses();
  mlir::distopt::registerDistOptPipeline();
  mlir::distopt::test::registerDistOptTestPasses();
  mlir::distopt::test::registerDistOptTestPipelines();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mlir::DialectRegistry registry = distopt::fuzz::registry();
  mlir::distopt::registerBufferizableOpInterfaceExternalModels(registry);
  mlir::MLIRContext context(registry, mlir::MLIRContext::Threading::DISABLED);
  mlir::OwningOpRef<mlir::ModuleOp> original =
      distopt::fuzz::parse(context, data, size);
  if (!original)
    return 0;
  for (const char *pipeline : kPipelines) {
    mlir::OwningOpRef<mlir::ModuleOp> module = original->clone();
    std::string errors;
    llvm::raw_string_ostream errorStream(errors);
    mlir::FailureOr<mlir::OpPassManager> parsed =
        mlir::parsePassPipeline(pipeline, errorStream);
    if (mlir::failed(parsed))
      std::abort(); // the list above is wrong
    mlir::PassManager pm(&context, parsed->getOpAnchorName());
    static_cast<mlir::OpPassManager &>(pm) = std::move(*parsed);
    // A pass that succeeds must leave valid IR: checked after each one (the
    // pass manager's own check would only make the run fail quietly).
    pm.enableVerifier(false);
    pm.addInstrumentation(std::make_unique<VerifyAfterEachPass>());
    (void)pm.run(*module);
  }
  return 0;
}
