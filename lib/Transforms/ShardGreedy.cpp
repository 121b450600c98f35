//===- ShardGreedy.cpp - ZeRO's greedy strategy -----------------*- C++ -*-===//
//
// --distopt-shard-optimizer=strategy=greedy (ZeroRedundancyOptimizer, OSS):
// whole parameters are given to ranks, largest first, each to the least
// loaded rank; the owner updates them inside distopt.owned_by and
// broadcasts the result. Each rank's state lives in one buffer as large as
// the most loaded rank's.
//
//===----------------------------------------------------------------------===//

#include "ShardOptimizer.h"

#include "distopt/Dialect/DistOpt/IR/StepABI.h"

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"

#include <numeric>

using namespace mlir;
using namespace mlir::distopt;
using namespace mlir::distopt::zero;

LogicalResult Sharder::shardGreedy(func::FuncOp func, ArrayRef<Update *> group,
                                   unsigned index) {
  Update &first = *group.front();
  OpBuilder builder(func.getBody().front().getTerminator());
  FlatSymbolRefAttr groupRef = first.reduction.getGroupAttr();
  int64_t size = lookupProcessGroup(func, groupRef).getSize();

  // Sorted-greedy: largest first, each to the least loaded rank (ties: the
  // lower rank, then program order), as ZeroRedundancyOptimizer does.
  SmallVector<unsigned> order(group.size());
  std::iota(order.begin(), order.end(), 0);
  llvm::stable_sort(order, [&](unsigned a, unsigned b) {
    return group[a]->numel() > group[b]->numel();
  });
  SmallVector<int64_t> load(size, 0), owner(group.size()), offset(group.size());
  for (unsigned i : order) {
    int64_t rank = std::min_element(load.begin(), load.end()) - load.begin();
    owner[i] = rank;
    offset[i] = load[rank];
    load[rank] += group[i]->numel();
  }
  int64_t capacity = *std::max_element(load.begin(), load.end());

  Type paramElement = first.paramType().getElementType();
  std::string prefix = ("owned" + Twine(index)).str();
  NamedAttribute layout(builder.getStringAttr(abi::kLayout),
                        layoutAttr(builder, group, offset, owner));
  auto ownedArgument = [&](Type element, StringRef role, StringRef name) {
    return addArgument(func, flatType(capacity, element), role, name, {layout});
  };
  // This rank's buffers: main parameters (if any), then each state tensor.
  SmallVector<Value> buffers;
  SmallVector<BlockArgument> bufferArgs;
  if (first.paramIsMain) {
    bufferArgs.push_back(
        ownedArgument(paramElement, abi::kMainParam, prefix + ".main_param"));
  }
  for (unsigned k = 0; k < first.state.size(); ++k)
    bufferArgs.push_back(ownedArgument(
        cast<RankedTensorType>(first.state[k].getType()).getElementType(),
        abi::kState, prefix + "." + stateKey(func, first, k)));
  for (BlockArgument arg : bufferArgs)
    buffers.push_back(arg);

  for (size_t i = 0; i < group.size(); ++i) {
    auto *u = group[i];
    // Stage 2: the gradient is reduced to its owner only.
    Value grad = u->reduction.getResult();
    if (stage == 2) {
      OpBuilder at(u->reduction);
      grad = ReduceOp::create(
          at, u->reduction.getLoc(), u->reduction.getType(),
          u->reduction.getInput(), groupRef, u->reduction.getWireTypeAttr(),
          u->reduction.getReductionAttr(), u->reduction.getScaleAttr(),
          at.getI64IntegerAttr(owner[i]));
    }
    // What the owner produces and the others keep: the buffers, and the
    // parameter every rank needs (the model copy with main parameters).
    Value visible = u->paramIsMain
                        ? (u->downcasts.empty() ? Value() : u->modelParam)
                        : Value(u->param);
    SmallVector<Value> otherwise(buffers);
    if (visible)
      otherwise.push_back(visible);
    auto owned = OwnedByOp::create(
        builder, u->op->getLoc(), ValueRange(otherwise).getTypes(), groupRef,
        builder.getI64IntegerAttr(owner[i]), otherwise);
    Block *body = new Block();
    owned.getBody().push_back(body);
    OpBuilder inner = OpBuilder::atBlockEnd(body);
    Location ploc = u->op->getLoc();
    auto paramType = u->paramType();
    int64_t numel = u->numel();
    auto flat1d = [&](Type element) { return flatType(numel, element); };
    SmallVector<ReassociationIndices> all = {
        llvm::to_vector(llvm::seq<int64_t>(0, paramType.getRank()))};
    // A view of this parameter's slot in a rank buffer, in its own shape.
    auto slot = [&](Value buffer) -> Value {
      Type element = cast<RankedTensorType>(buffer.getType()).getElementType();
      Value flat = tensor::ExtractSliceOp::create(
          inner, ploc, flat1d(element), buffer,
          ArrayRef<OpFoldResult>{inner.getIndexAttr(offset[i])},
          ArrayRef<OpFoldResult>{inner.getIndexAttr(numel)},
          ArrayRef<OpFoldResult>{inner.getIndexAttr(1)});
      if (paramType.getRank() == 1)
        return flat;
      return tensor::ExpandShapeOp::create(
          inner, ploc, RankedTensorType::get(paramType.getShape(), element),
          flat, all);
    };
    auto store = [&](Value value, Value buffer) -> Value {
      if (paramType.getRank() != 1)
        value = tensor::CollapseShapeOp::create(inner, ploc, value, all);
      return tensor::InsertSliceOp::create(
          inner, ploc, value, buffer,
          ArrayRef<OpFoldResult>{inner.getIndexAttr(offset[i])},
          ArrayRef<OpFoldResult>{inner.getIndexAttr(numel)},
          ArrayRef<OpFoldResult>{inner.getIndexAttr(1)});
    };
    IRMapping mapping;
    unsigned b = 0;
    SmallVector<Value> oldSlots;
    if (u->paramIsMain) {
      oldSlots.push_back(slot(buffers[b++]));
      mapping.map(u->op->getOperand(0), oldSlots.back());
    }
    // At stage 1 every rank holds the reduced gradient: what the step
    // computes from it (unscaling, clipping, the overflow check) stays as
    // it is, and the owner updates from its result.
    Value g = grad;
    if (u->chained())
      g = u->op->getOperand(1);
    else if (u->convert)
      g = convertGradient(inner, ploc, g, u->paramType());
    mapping.map(u->op->getOperand(1), g);
    for (unsigned k = 0; k < u->state.size(); ++k) {
      oldSlots.push_back(slot(buffers[b + k]));
      mapping.map(u->op->getOperand(2 + k), oldSlots.back());
    }
    Operation *update = inner.clone(*u->op, mapping);
    // A skipped step keeps the old values, as the selects did.
    auto kept = [&](Value updated, Value old) -> Value {
      if (!u->keep)
        return updated;
      return arith::SelectOp::create(inner, ploc, u->keep, updated, old);
    };
    SmallVector<Value> yielded;
    b = 0;
    if (u->paramIsMain) {
      yielded.push_back(
          store(kept(update->getResult(0), oldSlots[0]), buffers[b]));
      ++b;
    }
    for (unsigned k = 0; k < u->state.size(); ++k)
      yielded.push_back(store(kept(update->getResult(1 + k), oldSlots[b + k]),
                              buffers[b + k]));
    if (visible) {
      Value newVisible =
          kept(update->getResult(0), u->paramIsMain ? oldSlots[0] : u->param);
      if (u->paramIsMain)
        newVisible = arith::TruncFOp::create(
            inner, ploc, u->downcasts.front().getType(), newVisible);
      yielded.push_back(newVisible);
    }
    YieldOp::create(inner, ploc, yielded);

    for (unsigned k = 0; k < buffers.size(); ++k)
      buffers[k] = owned.getResult(k);
    if (visible) {
      Value shared = BroadcastOp::create(
          builder, ploc, owned.getResults().back(), groupRef,
          /*wire_type=*/nullptr, builder.getI64IntegerAttr(owner[i]));
      if (u->paramIsMain) {
        for (arith::TruncFOp trunc : u->downcasts)
          trunc.getResult().replaceAllUsesWith(shared);
      } else {
        (u->selects.empty() ? u->op->getResult(0)
                            : u->selects.front().getResult())
            .replaceAllUsesWith(shared);
      }
    }
    for (arith::TruncFOp trunc : u->downcasts)
      toErase.push_back(trunc);
    toErase.append(u->selects.begin(), u->selects.end());
    toErase.push_back(u->op);
    if (u->convert && !u->chained())
      toErase.push_back(u->convert);
    if (stage == 2)
      toErase.push_back(u->reduction);
  }
  for (auto [k, arg] : llvm::enumerate(bufferArgs))
    newResults.push_back({buffers[k], func.getArgAttrDict(arg.getArgNumber())});
  return success();
}
