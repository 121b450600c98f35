//===- CompressWire.cpp - mycc's own pass over distopt ops ------*- C++ -*-===//
//
// --mycc-compress-wire: large f32 all-reduces send bf16 on the wire, as
// PyTorch DDP's bf16 compression hook does. The worked example of
// docs/tutorial-writing-a-pass.md; its test is test/compress-wire.mlir.
//
//===----------------------------------------------------------------------===//

#include "CompressWire.h"

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace {

struct CompressWirePass
    : public PassWrapper<CompressWirePass, OperationPass<func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(CompressWirePass)

  CompressWirePass() = default;
  CompressWirePass(const CompressWirePass &other) : PassWrapper(other) {}

  StringRef getArgument() const final { return "mycc-compress-wire"; }
  StringRef getDescription() const final {
    return "Send large f32 all-reduces as bf16 on the wire";
  }

  Option<int64_t> minBytes{
      *this, "min-bytes",
      llvm::cl::desc("Compress all-reduces of at least this many bytes"),
      llvm::cl::init(1 << 20)};
  Statistic numCompressed{this, "num-compressed", "All-reduces that send bf16"};

  // Options are checked once, before any function is visited.
  LogicalResult initialize(MLIRContext *context) override {
    if (minBytes < 0)
      return emitError(UnknownLoc::get(context))
             << "--mycc-compress-wire: min-bytes must be >= 0, got "
             << minBytes.getValue();
    return success();
  }

  void runOnOperation() override {
    getOperation().walk([&](distopt::AllReduceOp op) {
      auto type = cast<RankedTensorType>(op.getInput().getType());
      // Leave alone what is not f32, already compressed, or small enough
      // that latency, not bandwidth, decides its time.
      if (!type.getElementType().isF32() || op.getWireTypeAttr() ||
          type.getNumElements() * 4 < minBytes)
        return;
      op.setWireTypeAttr(TypeAttr::get(Builder(op).getBF16Type()));
      ++numCompressed;
    });
  }
};

} // namespace

void mycc::registerCompressWirePass() { PassRegistration<CompressWirePass>(); }
