//===- BufferUses.cpp - who uses a buffer, after bufferization --*- C++ -*-===//

#include "distopt/Conversion/DistOptToRuntime/BufferUses.h"

#include "mlir/IR/Block.h"
#include "mlir/IR/Operation.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

using namespace mlir;

Value mlir::distopt::rootBuffer(Value value) {
  while (auto view = value.getDefiningOp<ViewLikeOpInterface>())
    value = view.getViewSource();
  return value;
}

bool mlir::distopt::unusedAfter(Value root, Operation *op) {
  Block *block = op->getBlock();
  SmallVector<Value> views = {root};
  while (!views.empty()) {
    Value view = views.pop_back_val();
    for (OpOperand &use : view.getUses()) {
      Operation *user = use.getOwner();
      if (user == op)
        continue;
      Operation *inBlock = block->findAncestorOpInBlock(*user);
      if (!inBlock || !inBlock->isBeforeInBlock(op))
        return false;
      if (auto viewOp = dyn_cast<ViewLikeOpInterface>(user))
        if (viewOp.getViewSource() == view)
          llvm::append_range(views, user->getResults());
    }
  }
  return true;
}
