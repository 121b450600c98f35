//===- ShardComposed.cpp - What spans ZeRO's shards -------------*- C++ -*-===//
//
// The overflow check, loss scaling and clipping by the global norm read
// every gradient. Under ZeRO a rank holds only its part of the reduced
// gradients, so both strategies rebuild them over those parts: the check
// and the norm are agreed over the group with one scalar reduction, and
// each update reads its gradient unscaled and clipped from its rank's part.
//
//===----------------------------------------------------------------------===//

#include "ShardOptimizer.h"

#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace mlir::distopt;
using namespace mlir::distopt::zero;

void Sharder::composeChunks(func::FuncOp func,
                            ArrayRef<SmallVector<Update *>> groups,
                            MutableArrayRef<Value> grads,
                            ArrayRef<SmallVector<int64_t>> bounds,
                            FlatSymbolRefAttr groupRef) {
  OpBuilder builder(func.getBody().front().getTerminator());
  // Spanning ops, each over the parts of the groups it read.
  auto members = [&](Operation *op) {
    SmallVector<unsigned> read;
    for (auto [g, group] : llvm::enumerate(groups))
      if (group.front()->finiteCheck == op || group.front()->clip == op)
        read.push_back(g);
    return read;
  };
  auto inputs = [&](ArrayRef<unsigned> read) {
    SmallVector<Value> values;
    for (unsigned g : read)
      values.push_back(grads[g]);
    return values;
  };
  SetVector<Operation *> finiteChecks, clips;
  for (ArrayRef<Update *> group : groups) {
    if (group.front()->finiteCheck)
      finiteChecks.insert(group.front()->finiteCheck);
    if (group.front()->clip)
      clips.insert(group.front()->clip);
  }
  // Divided (a mean no collective took), then checked and taken element by
  // element (converted, unscaled), like the updates' gradients: the check reads
  // the divided parts as it reads the divided gradients unsharded (a division
  // by K >= 1 keeps a finite value finite), so a split step's reduction of a
  // part ends with its division.
  for (auto [g, group] : llvm::enumerate(groups)) {
    Update &first = *group.front();
    if (first.divide)
      grads[g] = createDivision(builder, first.divide->getLoc(), grads[g],
                                first.divisor);
  }
  // The overflow check of the reduced parts, agreed over the group (only
  // the rank holding a poisoned part sees the inf).
  for (Operation *op : finiteChecks) {
    Value ok = AllFiniteOp::create(builder, op->getLoc(), inputs(members(op)),
                                   groupRef);
    for (ArrayRef<Update *> group : groups)
      for (Update *u : group)
        if (u->keep == op->getResult(0))
          u->keep = ok;
    op->getResult(0).replaceAllUsesWith(ok);
  }
  for (auto [g, group] : llvm::enumerate(groups)) {
    for (Operation *link : group.front()->elementwise)
      grads[g] = applyElementwiseLink(builder, link, grads[g]);
  }
  // Clipped by the global norm: each tensor's partial sums combined over
  // the group (one reduction) before its norm is rounded, as unsharded.
  for (Operation *op : clips) {
    auto clip = cast<ClipGradNormOp>(op);
    SmallVector<unsigned> read = members(op);
    SmallVector<Value> parts = inputs(read);
    SmallVector<Attribute> where;
    for (unsigned g : read)
      where.push_back(builder.getDenseI64ArrayAttr(bounds[g]));
    auto sharded = ClipGradNormOp::create(
        builder, clip.getLoc(), ValueRange(parts).getTypes(),
        clip.getTotalNorm().getType(), parts, clip.getMaxNormAttr(),
        clip.getNormTypeAttr(), groupRef, builder.getArrayAttr(where));
    for (auto [k, g] : llvm::enumerate(read))
      grads[g] = sharded.getClipped()[k];
    clip.getTotalNorm().replaceAllUsesWith(sharded.getTotalNorm());
  }
}

void Sharder::eraseComposed(ArrayRef<SmallVector<Update *>> groups) {
  // Users before producers: each kind of op, over all the updates, before
  // the ops it reads.
  SetVector<Operation *> erase;
  auto eraseEach = [&](function_ref<SmallVector<Operation *>(Update &)> ops) {
    for (ArrayRef<Update *> group : groups)
      for (Update *u : group)
        for (Operation *op : ops(*u))
          if (op)
            erase.insert(op);
  };
  eraseEach([](Update &u) {
    SmallVector<Operation *> ops(u.downcasts.begin(), u.downcasts.end());
    ops.append(u.selects.begin(), u.selects.end());
    ops.push_back(u.op);
    return ops;
  });
  eraseEach([](Update &u) { return SmallVector<Operation *>{u.clip}; });
  eraseEach([](Update &u) {
    return SmallVector<Operation *>(llvm::reverse(u.elementwise));
  });
  eraseEach([](Update &u) { return SmallVector<Operation *>{u.finiteCheck}; });
  eraseEach([&](Update &u) {
    SmallVector<Operation *> ops(u.divisionOps.begin(), u.divisionOps.end());
    ops.push_back(stage >= 2 ? u.reduction.getOperation() : nullptr);
    return ops;
  });
  toErase.append(erase.begin(), erase.end());
}
