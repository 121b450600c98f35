//===- VerifyInput.cpp - verify what the tools read -------------*- C++ -*-===//

#include "distopt/Transforms/VerifyInput.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Verifier.h"

using namespace mlir;

LogicalResult mlir::distopt::verifyInput(Operation *op) {
  bool ok = true;
  op->walk([&](shard::GridOp grid) {
    if (llvm::is_contained(grid.getShape(), 0)) {
      grid.emitOpError("has an axis of size 0: a grid needs at least one "
                       "process along every axis");
      ok = false;
    }
  });
  if (!ok)
    return failure();
  return verify(op);
}
