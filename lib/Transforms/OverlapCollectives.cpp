//===- OverlapCollectives.cpp - asynchronous collectives --------*- C++ -*-===//
//
// --distopt-overlap-collectives: each synchronous collective becomes a
// `*_start` placed as early as its input allows and a `distopt.wait` placed
// just before the first use of its result, so that the work in between
// overlaps with the communication, when there is enough of it to pay for
// the copy of the input that a start makes.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_OVERLAPCOLLECTIVESPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

/// Creates the `*_start` twin of a synchronous collective: the same
/// operands and attributes, and a token for the result.
static Operation *createStart(OpBuilder &builder, CollectiveOpInterface op) {
  OperationState state(op->getLoc(),
                       (op->getName().getStringRef() + "_start").str());
  state.addOperands(op->getOperands());
  state.propertiesAttr = op->getPropertiesAsAttribute();
  state.addAttributes(op->getDiscardableAttrDictionary().getValue());
  state.addTypes(TokenType::get(op->getContext(), op.getYieldedType()));
  return builder.create(state);
}

/// Bytes of the tensors `op` and the ops nested in it produce: roughly what
/// they write. Constants and views write nothing.
int64_t bytesWritten(Operation *op) {
  int64_t bytes = 0;
  op->walk([&](Operation *nested) {
    if (nested->hasTrait<OpTrait::ConstantLike>() ||
        isa<ViewLikeOpInterface, tensor::ExtractSliceOp,
            tensor::CollapseShapeOp, tensor::ExpandShapeOp>(nested))
      return;
    for (Type type : nested->getResultTypes())
      if (auto tensor = dyn_cast<RankedTensorType>(type))
        bytes += getShapedBytes(tensor);
  });
  return bytes;
}

struct OverlapCollectivesPass
    : public distopt::impl::OverlapCollectivesPassBase<OverlapCollectivesPass> {
  using OverlapCollectivesPassBase::OverlapCollectivesPassBase;

  void runOnOperation() override {
    SmallVector<Block *> blocks;
    getOperation().walk([&](Block *block) { blocks.push_back(block); });
    for (Block *block : blocks)
      overlapBlock(*block);
  }

  void overlapBlock(Block &block) {
    if (block.empty() || !block.mightHaveTerminator())
      return;
    // Starts keep the order of all communication (every rank issues it
    // alike): each goes right after its input's definition, but never above
    // an earlier communicating op or start.
    SmallVector<Operation *> ops;
    for (Operation &op : block)
      ops.push_back(&op);
    Operation *barrier = nullptr;
    for (Operation *it : ops) {
      auto op = dyn_cast<CollectiveOpInterface>(it);
      if (!op || op.isAsync()) {
        if (communicates(it))
          barrier = it;
        continue;
      }
      Operation *anchor = barrier;
      if (Operation *def = op->getOperand(0).getDefiningOp())
        if (Operation *inBlock = block.findAncestorOpInBlock(*def))
          if (!anchor || anchor->isBeforeInBlock(inBlock))
            anchor = inBlock;
      // The wait goes before the first user in this block, or at its end.
      Operation *firstUse = block.getTerminator();
      for (Operation *user : op->getUsers())
        if (Operation *inBlock = block.findAncestorOpInBlock(*user))
          if (inBlock->isBeforeInBlock(firstUse))
            firstUse = inBlock;
      // The work that would run while the data is on the wire.
      int64_t work = 0;
      for (Operation *it = anchor ? anchor->getNextNode() : &block.front();
           it != firstUse; it = it->getNextNode())
        if (it != op.getOperation())
          work += bytesWritten(it);
      int64_t inputBytes =
          getShapedBytes(cast<RankedTensorType>(op.getInput().getType()));
      if (static_cast<double>(work) <
          minWorkRatio * static_cast<double>(inputBytes)) {
        barrier = op.getOperation();
        ++numKept;
        continue;
      }

      OpBuilder builder(op->getContext());
      if (anchor)
        builder.setInsertionPointAfter(anchor);
      else
        builder.setInsertionPointToStart(&block);
      Operation *start = createStart(builder, op);
      barrier = start;
      builder.setInsertionPoint(firstUse);
      auto wait = WaitOp::create(builder, op->getLoc(), start->getResult(0));
      op->getResult(0).replaceAllUsesWith(wait.getResult());
      op->erase();
      ++numOverlapped;
    }
  }
};

} // namespace
