//===- FuzzCommon.h - shared by the libFuzzer targets -----------*- C++ -*-===//

#ifndef DISTOPT_FUZZ_FUZZCOMMON_H
#define DISTOPT_FUZZ_FUZZCOMMON_H

#include "distopt/Conversion/DistOptToRuntime/BufferizableOpInterfaceImpl.h"
#include "distopt/Conversion/Passes.h"
#include "distopt/Dialect/DistOpt/IR/DistOptDialect.h"
#include "distopt/Transforms/Passes.h"
#include "distopt/Transforms/VerifyInput.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

namespace distopt::fuzz {

/// The dialects distopt-opt's users write steps in.
inline mlir::DialectRegistry registry() {
  mlir::DialectRegistry registry;
  registry.insert<mlir::distopt::DistOptDialect, mlir::arith::ArithDialect,
                  mlir::bufferization::BufferizationDialect,
                  mlir::cf::ControlFlowDialect, mlir::func::FuncDialect,
                  mlir::linalg::LinalgDialect, mlir::math::MathDialect,
                  mlir::memref::MemRefDialect, mlir::scf::SCFDialect,
                  mlir::shard::ShardDialect, mlir::tensor::TensorDialect>();
  return registry;
}

/// Parses `data` as a module in `context`, silencing diagnostics (bad
/// input is expected; only crashes matter). Null when it does not parse or
/// verify.
inline mlir::OwningOpRef<mlir::ModuleOp>
parse(mlir::MLIRContext &context, const uint8_t *data, size_t size) {
  context.getDiagEngine().registerHandler(
      [](mlir::Diagnostic &) { return mlir::success(); });
  // MLIR's lexer reads the byte after the text (a NUL ends it, as in every
  // file MemoryBuffer reads): libFuzzer's exact-size buffers lack one.
  std::string text(reinterpret_cast<const char *>(data), size);
  // Verified as the tools verify it (upstream verifiers crash on some input).
  mlir::ParserConfig config(&context, /*verifyAfterParse=*/false);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, config);
  if (!module || mlir::failed(mlir::distopt::verifyInput(*module)))
    return nullptr;
  return module;
}

} // namespace distopt::fuzz

#endif // DISTOPT_FUZZ_FUZZCOMMON_H
