//===- DistOpt.cpp - C API of the distopt dialect and passes ----*- C++ -*-===//

#include "distopt-c/DistOpt.h"

#include "distopt/Conversion/DistOptToRuntime/BufferizableOpInterfaceImpl.h"
#include "distopt/Conversion/Passes.h"
#include "distopt/Dialect/DistOpt/IR/DistOptDialect.h"
#include "distopt/Pipelines/Pipelines.h"
#include "distopt/Target/StepLibrary.h"
#include "distopt/Transforms/Passes.h"

#include "mlir/CAPI/IR.h"
#include "mlir/CAPI/Registration.h"
#include "mlir/CAPI/Support.h"
#include "mlir/Conversion/ConvertToLLVM/ToLLVMInterface.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Bufferization/Transforms/FuncBufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include "llvm/Support/raw_ostream.h"

#include <mutex>

using namespace mlir;

MLIR_DEFINE_CAPI_DIALECT_REGISTRATION(DistOpt, distopt,
                                      mlir::distopt::DistOptDialect)

void distoptRegisterDialects(MlirDialectRegistry cRegistry) {
  DialectRegistry &registry = *unwrap(cRegistry);
  registry.insert<distopt::DistOptDialect, arith::ArithDialect,
                  bufferization::BufferizationDialect, cf::ControlFlowDialect,
                  func::FuncDialect, linalg::LinalgDialect, LLVM::LLVMDialect,
                  math::MathDialect, memref::MemRefDialect, scf::SCFDialect,
                  shard::ShardDialect, tensor::TensorDialect>();
  arith::registerBufferizableOpInterfaceExternalModels(registry);
  bufferization::func_ext::registerBufferizableOpInterfaceExternalModels(
      registry);
  linalg::registerBufferizableOpInterfaceExternalModels(registry);
  scf::registerBufferizableOpInterfaceExternalModels(registry);
  tensor::registerBufferizableOpInterfaceExternalModels(registry);
  distopt::registerBufferizableOpInterfaceExternalModels(registry);
  distopt::registerStepLibraryTranslations(registry);
}

void distoptRegisterPasses() {
  // The pass registry is global and refuses a second registration of a name.
  static std::once_flag once;
  std::call_once(once, [] {
    distopt::registerDistOptPasses();
    distopt::registerDistOptPipeline();
  });
}

MlirLogicalResult distoptRunPipeline(MlirModule cModule,
                                     MlirStringRef cPipeline) {
  ModuleOp module = unwrap(cModule);
  std::string parseErrors;
  llvm::raw_string_ostream errorStream(parseErrors);
  // The anchored form: "builtin.module(...)" runs on the module itself (the
  // unanchored parser would nest it, to run on modules inside this one).
  FailureOr<OpPassManager> parsed =
      parsePassPipeline(unwrap(cPipeline), errorStream);
  if (failed(parsed)) {
    module.emitError("invalid pass pipeline '")
        << unwrap(cPipeline) << "': " << StringRef(parseErrors).trim();
    return mlirLogicalResultFailure();
  }
  StringRef anchor = parsed->getOpAnchorName();
  if (anchor != OpPassManager::getAnyOpAnchorName() &&
      anchor != ModuleOp::getOperationName()) {
    module.emitError("pass pipeline '")
        << unwrap(cPipeline) << "' runs on '" << anchor
        << "', not on the module: write builtin.module(...)";
    return mlirLogicalResultFailure();
  }
  PassManager pm(module->getContext(), anchor);
  static_cast<OpPassManager &>(pm) = std::move(*parsed);
  return wrap(pm.run(module));
}

MlirLogicalResult distoptCompileStep(MlirModule module, MlirStringRef target,
                                     MlirStringRef outputPath) {
  distopt::StepLibraryOptions options;
  options.target = unwrap(target).str();
  return wrap(
      distopt::compileStepLibrary(unwrap(module), options, unwrap(outputPath)));
}
