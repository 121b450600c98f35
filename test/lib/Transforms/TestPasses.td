//===- TestPasses.td - passes only the tests use -----------*- tablegen -*-===//
//
// Registered by distopt-opt for lit tests; not part of the product.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_TEST_LIB_TRANSFORMS_TESTPASSES_TD
#define DISTOPT_TEST_LIB_TRANSFORMS_TESTPASSES_TD

include "mlir/Pass/PassBase.td"

def EmulateGPUOnHostPass
    : Pass<"distopt-emulate-gpu-on-host", "::mlir::func::FuncOp"> {
  let summary = "Testing: run GPU-structured IR on the CPU";
  let description = [{
    A testing aid for the GPU lowering on machines without a GPU. After
    `--distopt-offload-to-gpu` and `convert-parallel-loops-to-gpu`, each
    `gpu.launch` becomes an `scf.parallel` over its blocks and threads, and
    `gpu.alloc`/`dealloc`/`memcpy` become their memref twins, so that the CPU
    lowering runs the step exactly as the GPU lowering split it
    (`distopt-test-lower-to-gpu-on-host`). Code generation for the GPU is not
    exercised.
  }];
  let dependentDialects = ["::mlir::scf::SCFDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::arith::ArithDialect"];
}

#endif // DISTOPT_TEST_LIB_TRANSFORMS_TESTPASSES_TD
