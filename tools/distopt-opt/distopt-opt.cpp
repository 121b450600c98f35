//===- distopt-opt.cpp - mlir-opt with the distopt dialect ------*- C++ -*-===//
//
// Like mlir-opt (every upstream dialect and pass), plus the distopt dialect,
// its passes and its pipelines.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/DistOpt/IR/DistOptDialect.h"
#include "distopt/Dialect/DistOpt/Transforms/BufferizableOpInterfaceImpl.h"
#include "distopt/Dialect/DistOpt/Transforms/Passes.h"
#include "distopt/Dialect/DistOpt/Transforms/Pipelines.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  mlir::distopt::registerDistOptPasses();
  mlir::distopt::registerDistOptPipeline();

  mlir::DialectRegistry registry;
  registry.insert<mlir::distopt::DistOptDialect, mlir::arith::ArithDialect,
                  mlir::bufferization::BufferizationDialect,
                  mlir::cf::ControlFlowDialect, mlir::func::FuncDialect,
                  mlir::gpu::GPUDialect, mlir::linalg::LinalgDialect,
                  mlir::LLVM::LLVMDialect, mlir::math::MathDialect,
                  mlir::memref::MemRefDialect, mlir::scf::SCFDialect,
                  mlir::tensor::TensorDialect>();

  // Every upstream dialect, like mlir-opt, with the interface models
  // (bufferization, conversion to LLVM) that pipelines need.
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  mlir::distopt::registerBufferizableOpInterfaceExternalModels(registry);
  // gpu-module-to-binary (in distopt-lower-to-gpu) translates kernels.
  mlir::registerAllGPUToLLVMIRTranslations(registry);

  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "distopt optimizer driver\n", registry));
}
