//===- ShardGreedy.cpp - ZeRO's greedy strategy -----------------*- C++ -*-===//
//
// --distopt-shard-optimizer=strategy=greedy (ZeroRedundancyOptimizer, OSS):
// whole parameters are given to ranks, largest first, each to the least
// loaded rank (counting the groups of updates before); the owner updates
// them inside distopt.owned_by and broadcasts the result. Also the owner
// plan of the flat strategy's updates that read whole matrices. Each
// rank's state lives in one buffer per state key as large as the most
// loaded rank's. At stage 2, what spans the gradients (the overflow check,
// clipping) reads a buffer laid out the same way, into which each owner
// copies the gradients reduced to it; at stage 1 too where flat groups
// share the check or the clip (composeAtStage1).
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

/// Whether what the update reads passes through more than a conversion,
/// or its gradient is read by an op that spans the updates.
static bool composed(const Update &u) {
  return u.clip || u.finiteCheck || u.chained();
}

/// `value` as the 1-d tensor of its elements (0-d tensors included).
static Value flatten(OpBuilder &b, Location loc, Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getRank() == 1)
    return value;
  auto flat = flatType(type.getNumElements(), type.getElementType());
  if (type.getRank() == 0)
    return tensor::ExpandShapeOp::create(b, loc, flat, value,
                                         ArrayRef<ReassociationIndices>{});
  ReassociationIndices all =
      llvm::to_vector(llvm::seq<int64_t>(0, type.getRank()));
  return tensor::CollapseShapeOp::create(b, loc, flat, value, {all});
}

/// A 1-d tensor in `shape` (the inverse of flatten).
static Value unflatten(OpBuilder &b, Location loc, Value flat,
                       ArrayRef<int64_t> shape) {
  auto element = cast<RankedTensorType>(flat.getType()).getElementType();
  auto type = RankedTensorType::get(shape, element);
  if (shape.size() == 1)
    return flat;
  if (shape.empty())
    return tensor::CollapseShapeOp::create(b, loc, type, flat,
                                           ArrayRef<ReassociationIndices>{});
  ReassociationIndices all =
      llvm::to_vector(llvm::seq<int64_t>(0, shape.size()));
  return tensor::ExpandShapeOp::create(b, loc, type, flat, {all});
}

/// The `size` elements of the 1-d `buffer` from `offset`. (A tensor with no
/// elements is no slice: the verifier refuses offset 0 of an empty buffer.)
static Value sliceAt(OpBuilder &b, Location loc, Value buffer, int64_t offset,
                     int64_t size) {
  Type element = cast<RankedTensorType>(buffer.getType()).getElementType();
  if (size == 0)
    return tensor::EmptyOp::create(b, loc, ArrayRef<int64_t>{0}, element);
  return tensor::ExtractSliceOp::create(
      b, loc, flatType(size, element), buffer,
      ArrayRef<OpFoldResult>{b.getIndexAttr(offset)},
      ArrayRef<OpFoldResult>{b.getIndexAttr(size)},
      ArrayRef<OpFoldResult>{b.getIndexAttr(1)});
}

/// `buffer` with the 1-d `flat` written over its elements from `offset`.
static Value insertAt(OpBuilder &b, Location loc, Value flat, Value buffer,
                      int64_t offset) {
  int64_t size = cast<RankedTensorType>(flat.getType()).getDimSize(0);
  if (size == 0)
    return buffer;
  return tensor::InsertSliceOp::create(
      b, loc, flat, buffer, ArrayRef<OpFoldResult>{b.getIndexAttr(offset)},
      ArrayRef<OpFoldResult>{b.getIndexAttr(size)},
      ArrayRef<OpFoldResult>{b.getIndexAttr(1)});
}

void mlir::distopt::zero::assignSortedGreedy(
    ArrayRef<double> weights, MutableArrayRef<double> load,
    function_ref<void(unsigned, int64_t)> assigned) {
  SmallVector<unsigned> order(weights.size());
  std::iota(order.begin(), order.end(), 0);
  llvm::stable_sort(
      order, [&](unsigned a, unsigned b) { return weights[a] > weights[b]; });
  for (unsigned i : order) {
    // (The first least loaded: the lower rank on a tie.)
    int64_t rank = llvm::min_element(load) - load.begin();
    load[rank] += weights[i];
    assigned(i, rank);
  }
}

Sharder::GreedyGroup Sharder::assignGreedy(func::FuncOp func,
                                           ArrayRef<Update *> group,
                                           bool composeAtStage1) {
  Update &first = *group.front();
  FlatSymbolRefAttr groupRef = first.reduction.getGroupAttr();
  int64_t size = lookupProcessGroup(func, groupRef).getSize();

  // Sorted-greedy: the heaviest first, each to the least loaded rank
  // counting the groups assigned before (ties: the lower rank, then program
  // order), as ZeroRedundancyOptimizer does. An element-wise update weighs
  // its elements (its memory and its time both grow with them), counting
  // every group's; one that reads whole matrices its arithmetic (Muon's
  // Newton-Schulz products grow with m^2 n, not m n), balanced against
  // such updates only.
  bool byFlops =
      balanceFlops && !cast<OptimizerOpInterface>(first.op).isElementwise();
  // (In doubles: sums of FLOPs may pass int64_t's range, elements are
  // exact below 2^53.)
  SmallVector<double> weight;
  for (Update *u : group)
    weight.push_back(static_cast<double>(
        byFlops ? cast<OptimizerOpInterface>(u->op).getUpdateFlops()
                : u->numel()));
  SmallVector<double> &elements = ownedElements[groupRef];
  elements.resize(size, 0);
  SmallVector<double> &owned = byFlops ? ownedFlops[groupRef] : elements;
  owned.resize(size, 0);
  SmallVector<double> load(owned);
  GreedyGroup greedy;
  greedy.loads.assign(size, 0);
  greedy.owners.resize(group.size());
  greedy.offsets.resize(group.size());
  assignSortedGreedy(weight, load, [&](unsigned i, int64_t rank) {
    greedy.owners[i] = rank;
    greedy.offsets[i] = greedy.loads[rank];
    greedy.loads[rank] += group[i]->numel();
  });
  for (int64_t r = 0; r < size; ++r) {
    if (byFlops)
      owned[r] = load[r];
    elements[r] += static_cast<double>(greedy.loads[r]);
  }
  greedy.capacity = *llvm::max_element(greedy.loads);
  if (stage == 2) {
    // Each gradient is reduced to its owner only.
    for (auto [i, u] : llvm::enumerate(group)) {
      OpBuilder at(u->reduction);
      greedy.reduced.push_back(ReduceOp::create(
          at, u->reduction.getLoc(), u->reduction.getType(),
          u->reduction.getInput(), groupRef, u->reduction.getWireTypeAttr(),
          u->reduction.getReductionAttr(), u->reduction.getScaleAttr(),
          at.getI64IntegerAttr(greedy.owners[i])));
    }
  } else if (composeAtStage1 && (first.clip || first.finiteCheck)) {
    // Every rank holds each reduced gradient; the buffer below takes the
    // ones this rank owns, as at stage 2, for what spans them.
    for (Update *u : group)
      greedy.reduced.push_back(u->reduction.getResult());
  } else {
    return greedy;
  }
  if (!composed(first))
    return greedy;
  // The owners' copies into this rank's buffer of reduced gradients, and
  // zeros after its last tensor (the overflow check reads them).
  OpBuilder builder(func.getBody().front().getTerminator());
  Location loc = first.op->getLoc();
  Type gradElement = first.reduction.getType().getElementType();
  auto ownedInsert = [&](int64_t rank, Value buffer, int64_t offset,
                         function_ref<Value(OpBuilder &)> value) {
    auto owned =
        OwnedByOp::create(builder, loc, TypeRange{buffer.getType()}, groupRef,
                          builder.getI64IntegerAttr(rank), ValueRange{buffer});
    OpBuilder inner = OpBuilder::atBlockEnd(&owned.getBody().emplaceBlock());
    YieldOp::create(inner, loc,
                    insertAt(inner, loc, value(inner), buffer, offset));
    return owned.getResult(0);
  };
  Value buffer = tensor::EmptyOp::create(
      builder, loc, ArrayRef<int64_t>{greedy.capacity}, gradElement);
  for (auto [i, u] : llvm::enumerate(group))
    buffer = ownedInsert(greedy.owners[i], buffer, greedy.offsets[i],
                         [&](OpBuilder &inner) {
                           return flatten(inner, loc, greedy.reduced[i]);
                         });
  for (auto [rank, load] : llvm::enumerate(greedy.loads)) {
    int64_t tail = greedy.capacity - load;
    if (tail > 0)
      buffer = ownedInsert(rank, buffer, load, [&](OpBuilder &inner) {
        auto type = flatType(tail, gradElement);
        return arith::ConstantOp::create(
            inner, loc, type,
            DenseElementsAttr::get(type, inner.getZeroAttr(gradElement)));
      });
  }
  greedy.grad = buffer;
  return greedy;
}

void Sharder::updateGreedy(func::FuncOp func, ArrayRef<Update *> group,
                           unsigned index, const GreedyGroup &greedy) {
  Update &first = *group.front();
  OpBuilder builder(func.getBody().front().getTerminator());
  FlatSymbolRefAttr groupRef = first.reduction.getGroupAttr();
  ArrayRef<int64_t> owner = greedy.owners, offset = greedy.offsets;

  std::string prefix = ("owned" + Twine(index)).str();
  // This rank's buffers: main parameters (if any), then each state tensor.
  // A state tensor of a shape of its own (Dion's right factor) has a
  // buffer laid out as the parameters' (by owner, in the same order), with
  // its own sizes.
  SmallVector<std::optional<unsigned>> bufferState;
  if (first.paramIsMain)
    bufferState.push_back(std::nullopt);
  for (unsigned k = 0; k < first.state.size(); ++k)
    bufferState.push_back(k);
  auto typeIn = [&](const Update &u, std::optional<unsigned> state) {
    return state ? cast<RankedTensorType>(u.state[*state].getType())
                 : u.paramType();
  };
  SmallVector<int64_t> byOwner = llvm::to_vector(
      llvm::seq<int64_t>(0, static_cast<int64_t>(group.size())));
  llvm::sort(byOwner, [&](int64_t a, int64_t b) {
    return std::make_pair(owner[a], offset[a]) <
           std::make_pair(owner[b], offset[b]);
  });
  SmallVector<SmallVector<int64_t>> bufferOffsets;
  SmallVector<BlockArgument> bufferArgs;
  for (std::optional<unsigned> state : bufferState) {
    SmallVector<int64_t> &offsets = bufferOffsets.emplace_back(group.size());
    SmallVector<int64_t> loads(greedy.loads.size(), 0);
    for (int64_t i : byOwner) {
      offsets[i] = loads[owner[i]];
      loads[owner[i]] += typeIn(*group[i], state).getNumElements();
    }
    NamedAttribute layout(builder.getStringAttr(abi::kLayout),
                          layoutAttr(builder, group, offsets, owner, state));
    Type element = typeIn(first, state).getElementType();
    std::string name = state ? prefix + "." + stateKey(func, first, *state)
                             : prefix + ".main_param";
    bufferArgs.push_back(
        addArgument(func, flatType(*llvm::max_element(loads), element),
                    state ? abi::kState : abi::kMainParam, name, {layout}));
  }
  SmallVector<Value> buffers(bufferArgs.begin(), bufferArgs.end());

  for (size_t i = 0; i < group.size(); ++i) {
    auto *u = group[i];
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
    OpBuilder inner = OpBuilder::atBlockEnd(&owned.getBody().emplaceBlock());
    Location ploc = u->op->getLoc();
    // This parameter's tensor of `type` at `at` in a rank buffer.
    auto sliceOf = [&](Value buffer, int64_t at, RankedTensorType type) {
      return unflatten(inner, ploc,
                       sliceAt(inner, ploc, buffer, at, type.getNumElements()),
                       type.getShape());
    };
    // Its slot in rank buffer `b`, in its own shape.
    auto slot = [&](unsigned b) -> Value {
      return sliceOf(buffers[b], bufferOffsets[b][i],
                     typeIn(*u, bufferState[b]));
    };
    auto store = [&](Value value, unsigned b) -> Value {
      return insertAt(inner, ploc, flatten(inner, ploc, value), buffers[b],
                      bufferOffsets[b][i]);
    };
    IRMapping mapping;
    unsigned b = 0;
    SmallVector<Value> oldSlots;
    if (u->paramIsMain) {
      oldSlots.push_back(slot(b++));
      mapping.map(u->op->getOperand(0), oldSlots.back());
    }
    // The gradient: where composed (stage 2, or stage 1 beside flat groups
    // that share the check or the clip), from this rank's buffer of reduced
    // gradients, unscaled and clipped; otherwise at stage 1 every rank
    // holds the reduced gradient, and what the step computes from it
    // (unscaling, clipping, the overflow check) stays as it is.
    Value g;
    if (greedy.grad) {
      g = sliceOf(greedy.grad, offset[i], u->paramType());
    } else if (stage == 1 && u->chained()) {
      g = u->op->getOperand(1);
    } else {
      g = stage == 2 ? greedy.reduced[i] : u->reduction.getResult();
      for (Operation *link : u->elementwise) // conversions only
        g = applyElementwiseLink(inner, link, g);
    }
    mapping.map(u->op->getOperand(1), g);
    for (unsigned k = 0; k < u->state.size(); ++k) {
      oldSlots.push_back(slot(b + k));
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
      yielded.push_back(store(kept(update->getResult(0), oldSlots[0]), b));
      ++b;
    }
    for (unsigned k = 0; k < u->state.size(); ++k)
      yielded.push_back(
          store(kept(update->getResult(1 + k), oldSlots[b + k]), b + k));
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
  }
  for (auto [k, arg] : llvm::enumerate(bufferArgs))
    newResults.push_back({buffers[k], func.getArgAttrDict(arg.getArgNumber())});
}
