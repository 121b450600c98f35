//===- mycc-opt.cpp - an ML compiler's opt tool embedding distopt ---------===//
//
// The driver of a (pretend) ML compiler "mycc": the upstream dialects it uses,
// distopt's dialect and passes, mycc's own pass over distopt ops
// (CompressWire.cpp) and its data-parallel pipeline built with distopt's C++
// API. Built against an installed distopt.
//
//===----------------------------------------------------------------------===//

#include "CompressWire.h"

#include "distopt/Conversion/Passes.h"
#include "distopt/Dialect/DistOpt/IR/DistOptDialect.h"
#include "distopt/Pipelines/Pipelines.h"
#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

namespace {

/// mycc's choices for its users: ZeRO-1 over MPI, 4 MB buckets, no PowerSGD.
struct MyccDataParallelOptions
    : public mlir::PassPipelineOptions<MyccDataParallelOptions> {
  Option<int64_t> zeroStage{*this, "zero-stage",
                            llvm::cl::desc("ZeRO stage (0-3)"),
                            llvm::cl::init(1)};
};

void buildMyccDataParallelPipeline(mlir::OpPassManager &pm,
                                   const MyccDataParallelOptions &options) {
  pm.addPass(mlir::createCanonicalizerPass());
  mlir::distopt::DistOptPipelineOptions distopt;
  distopt.backend = mlir::distopt::CollectiveBackend::Mpi;
  distopt.zeroStage = options.zeroStage;
  distopt.bucketCapMb = 4.0;
  distopt.firstBucketCapMb = 4.0;
  mlir::distopt::buildDistOptPipeline(pm, distopt);
}

} // namespace

int main(int argc, char **argv) {
  mlir::registerCanonicalizerPass();
  mycc::registerCompressWirePass();
  mlir::distopt::registerDistOptPasses();
  mlir::distopt::registerDistOptPipeline();
  mlir::PassPipelineRegistration<MyccDataParallelOptions>(
      "mycc-data-parallel",
      "mycc's data-parallel step: canonicalize, then distopt (ZeRO-1, MPI)",
      buildMyccDataParallelPipeline);

  mlir::DialectRegistry registry;
  registry.insert<mlir::distopt::DistOptDialect, mlir::arith::ArithDialect,
                  mlir::func::FuncDialect, mlir::linalg::LinalgDialect,
                  mlir::math::MathDialect, mlir::scf::SCFDialect,
                  mlir::tensor::TensorDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "mycc optimizer driver\n", registry));
}
