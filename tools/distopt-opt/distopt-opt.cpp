//===- distopt-opt.cpp - mlir-opt with the distopt dialect ------*- C++ -*-===//
//
// Like mlir-opt (every upstream dialect and pass), plus the distopt dialect,
// its passes and its pipelines. The input is verified by verifyInput, as the
// first pass, rather than on parsing: some upstream verifiers crash on input
// they should reject (docs/reliability.md).
//
//===----------------------------------------------------------------------===//

#include "TestPasses.h"
#include "distopt/Conversion/DistOptToRuntime/BufferizableOpInterfaceImpl.h"
#include "distopt/Conversion/Passes.h"
#include "distopt/Dialect/DistOpt/IR/DistOptDialect.h"
#include "distopt/Pipelines/Pipelines.h"
#include "distopt/Transforms/Passes.h"
#include "distopt/Transforms/VerifyInput.h"

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
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"

namespace {
/// verifyInput on the whole input, before any other pass.
struct VerifyInputPass
    : public mlir::PassWrapper<VerifyInputPass, mlir::OperationPass<>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(VerifyInputPass)
  llvm::StringRef getArgument() const override {
    return "distopt-verify-input";
  }
  void runOnOperation() override {
    if (mlir::failed(mlir::distopt::verifyInput(getOperation())))
      signalPassFailure();
  }
};
} // namespace

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  mlir::distopt::registerDistOptPasses();
  mlir::distopt::registerDistOptPipeline();
  // Passes only lit tests use (test/lib).
  mlir::distopt::test::registerDistOptTestPasses();
  mlir::distopt::test::registerDistOptTestPipelines();

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

  auto [inputFile, outputFile] = mlir::registerAndParseCLIOptions(
      argc, argv, "distopt optimizer driver\n", registry);
  mlir::MlirOptMainConfig config =
      mlir::MlirOptMainConfig::createFromCLOptions();
  // Listing dialects or passes (nothing is parsed), or verification turned
  // off on purpose: upstream's driver as it is.
  if (config.shouldShowDialects() || config.shouldListPasses() ||
      !config.shouldVerifyOnParsing())
    return mlir::asMainReturnCode(
        mlir::MlirOptMain(argc, argv, inputFile, outputFile, registry));
  mlir::MlirOptMainConfig fromCommandLine = config;
  config.verifyOnParsing(false).setPassPipelineSetupFn(
      [fromCommandLine](mlir::PassManager &pm) {
        pm.addPass(std::make_unique<VerifyInputPass>());
        return fromCommandLine.setupPassPipeline(pm);
      });

  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> input =
      mlir::openInputFile(inputFile, &error);
  std::unique_ptr<llvm::ToolOutputFile> output =
      input ? mlir::openOutputFile(outputFile, &error) : nullptr;
  if (!output) {
    llvm::errs() << error << "\n";
    return 1;
  }
  if (mlir::failed(
          mlir::MlirOptMain(output->os(), std::move(input), registry, config)))
    return 1;
  output->keep();
  return 0;
}
