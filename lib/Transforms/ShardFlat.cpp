//===- ShardFlat.cpp - ZeRO's flat strategy ---------------------*- C++ -*-===//
//
// --distopt-shard-optimizer=strategy=flat (DeepSpeed, Megatron): the tensors
// of a group of like updates are laid out in one flat buffer padded to a
// multiple of N chunks; rank r owns chunk r: reduce(-scatter) -> update the
// chunk -> all_gather. Hybrid: N is the shard group's size, and the chunk is
// also all-reduced across the replicate group. Groups of updates that read
// whole matrices go to owners instead (ShardGreedy.cpp), or are laid out
// the same way and updated whole on every rank from gathered chunks (the
// gather plan, `gathered`).
//
//===----------------------------------------------------------------------===//

#include "MeshGroups.h"
#include "ShardOptimizer.h"

#include "distopt/Dialect/DistOpt/IR/StepABI.h"

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"

#include <numeric>

using namespace mlir;
using namespace mlir::distopt;
using namespace mlir::distopt::zero;

/// Elements per alignment unit of the group's parameters.
static int64_t alignElements(const Update &first, int64_t alignment) {
  return alignment / getElementBytes(first.paramType().getElementType());
}

/// The matrix (rows x cols) of a parameter of rank 2 or more.
static std::pair<int64_t, int64_t> matrixShape(const Update &u) {
  ArrayRef<int64_t> shape = u.paramType().getShape();
  return {shape.front(), ShapedType::getNumElements(shape.drop_front())};
}

Sharder::FlatGroup Sharder::reduceFlat(func::FuncOp func,
                                       ArrayRef<Update *> group, Plan plan) {
  Update &first = *group.front();
  OpBuilder builder(func.getBody().front().getTerminator());
  Location loc = first.op->getLoc();
  FlatSymbolRefAttr groupRef = chunkGroup(first);
  int64_t size = lookupProcessGroup(func, groupRef).getSize();

  // One element layout for every buffer of the group, whatever its type.
  Type paramElement = first.paramType().getElementType();
  Type gradElement = first.reduction.getType().getElementType();
  int64_t alignElems = alignElements(first, alignment);
  auto bucketAlignment = [&](Type element) {
    return builder.getI64IntegerAttr(alignElems * getElementBytes(element));
  };
  SmallVector<Type> paramTypes;
  for (Update *u : group)
    paramTypes.push_back(u->paramType());
  FlatGroup flat;
  int64_t packed;
  flat.offsets = computeBucketOffsets(
      paramTypes, alignElems * getElementBytes(paramElement), &packed);
  flat.padded = llvm::alignTo(packed, size * alignElems);
  if (plan == Plan::RowShards) {
    // One matrix, each chunk whole rows, the last ones padding (not
    // rounded to the alignment: a small matrix would grow many times).
    auto [rows, cols] = matrixShape(first);
    flat.padded = size * llvm::divideCeil(rows, size) * cols;
  }
  flat.shard = flat.padded / size;

  // Gradients: this rank's chunk of the reduced flat gradient.
  SmallVector<Value> locals, reducedGrads;
  for (Update *u : group) {
    locals.push_back(u->reduction.getInput());
    reducedGrads.push_back(u->reduction.getResult());
  }
  if (stage >= 2) {
    auto bucket =
        BucketPackOp::create(builder, loc, flatType(flat.padded, gradElement),
                             locals, bucketAlignment(gradElement));
    AllReduceOp reduction = first.reduction;
    auto shardType = flatType(flat.shard, gradElement);
    // Hybrid: summed inside the shard group, then across the replicas.
    ReductionKind kind = reduction.getReduction();
    TwoStageReduction stages = replicateGroup
                                   ? splitReduction(kind)
                                   : TwoStageReduction{kind, kind, false};
    auto kindAttr = [&](ReductionKind k) {
      return ReductionKindAttr::get(builder.getContext(), k);
    };
    flat.grad = ReduceScatterOp::create(
        builder, loc, shardType, bucket, groupRef, reduction.getWireTypeAttr(),
        kindAttr(stages.first), reduction.getScaleAttr());
    if (replicateGroup)
      flat.grad = AllReduceOp::create(builder, loc, flat.grad, replicateGroup,
                                      reduction.getWireTypeAttr(),
                                      kindAttr(stages.second), FloatAttr());
    if (stages.divide) {
      int64_t world =
          lookupProcessGroup(func, reduction.getGroupAttr()).getSize();
      flat.grad =
          createDivision(builder, loc, flat.grad, static_cast<double>(world));
    }
  } else {
    auto bucket =
        BucketPackOp::create(builder, loc, flatType(flat.padded, gradElement),
                             reducedGrads, bucketAlignment(gradElement));
    flat.grad = ShardSliceOp::create(
        builder, loc, flatType(flat.shard, gradElement), bucket, groupRef);
  }
  return flat;
}

Value Sharder::packParamsFlat(func::FuncOp func, ArrayRef<Update *> group,
                              const FlatGroup &flat) {
  Update &first = *group.front();
  if (first.paramIsMain || stage == 3)
    return {};
  OpBuilder builder(func.getBody().front().getTerminator());
  Type paramElement = first.paramType().getElementType();
  SmallVector<Value> params;
  for (Update *u : group)
    params.push_back(u->param);
  auto bucket = BucketPackOp::create(
      builder, first.op->getLoc(), flatType(flat.padded, paramElement), params,
      builder.getI64IntegerAttr(alignElements(first, alignment) *
                                getElementBytes(paramElement)));
  return ShardSliceOp::create(builder, first.op->getLoc(),
                              flatType(flat.shard, paramElement), bucket,
                              chunkGroup(first));
}

void Sharder::updateFlat(func::FuncOp func, ArrayRef<Update *> group,
                         unsigned index, const FlatGroup &flat, Plan plan) {
  bool gathered = plan == Plan::Gathered;
  Update &first = *group.front();
  OpBuilder builder(func.getBody().front().getTerminator());
  Location loc = first.op->getLoc();
  FlatSymbolRefAttr groupRef = chunkGroup(first);
  Type paramElement = first.paramType().getElementType();
  Type gradElement = first.reduction.getType().getElementType();
  int64_t alignElems = alignElements(first, alignment);
  auto bucketAlignment = [&](Type element) {
    return builder.getI64IntegerAttr(alignElems * getElementBytes(element));
  };
  int64_t padded = flat.padded, shard = flat.shard;
  Value gradShard = flat.grad;
  std::string prefix = ("flat" + Twine(index)).str();
  NamedAttribute layout(builder.getStringAttr(abi::kLayout),
                        layoutAttr(builder, group, flat.offsets));
  NamedAttribute shardOf(builder.getStringAttr(abi::kShardOf),
                         builder.getI64IntegerAttr(padded));

  // Parameters: main parameters are state; plain ones are sharded at stage 3.
  Value paramShard;
  auto shardArgument = [&](Type element, StringRef role, StringRef name) {
    return addArgument(func, flatType(shard, element), role, name,
                       {layout, shardOf});
  };
  if (first.paramIsMain || stage == 3) {
    StringRef role = first.paramIsMain ? abi::kMainParam : abi::kParam;
    paramShard = shardArgument(paramElement, role, prefix + "." + role.str());
  } else if (!gathered) {
    paramShard = flat.param ? flat.param : packParamsFlat(func, group, flat);
  }

  // (Row shards: a state of its own shape, Dion's right factor, stays
  // whole, the same on every rank, under its own name.)
  SmallVector<BlockArgument> stateShards;
  SmallVector<bool> whole(first.state.size(), false);
  for (unsigned k = 0; k < first.state.size(); ++k) {
    auto type = cast<RankedTensorType>(first.state[k].getType());
    whole[k] = plan == Plan::RowShards &&
               cast<DionUpdateOp>(first.op).getStateKeys()[k] == "right_factor";
    if (whole[k]) {
      unsigned old = first.state[k].getArgNumber();
      DictionaryAttr attrs = func.getArgAttrDict(old);
      stateShards.push_back(
          addArgument(func, type, abi::kState, abi::getArgName(func, old),
                      attrs ? attrs.getValue() : ArrayRef<NamedAttribute>()));
      continue;
    }
    stateShards.push_back(
        shardArgument(type.getElementType(), abi::kState,
                      prefix + "." + stateKey(func, first, k)));
  }
  // Stage 3: where the step itself uses a parameter (a forward pass, say),
  // the parameter is gathered from the shards just before its first use.
  // The selects that kept the old tensors go with the updates.
  auto replaced = [&](Operation *user) {
    return llvm::any_of(
        group, [&](Update *u) { return llvm::is_contained(u->selects, user); });
  };
  auto gatherAtUses = [&](Value chunk, ArrayRef<Value> fulls,
                          ArrayRef<Operation *> updates) -> SmallVector<Value> {
    Block &entry = func.getBody().front();
    Operation *firstUse = nullptr;
    for (auto [full, update] : llvm::zip_equal(fulls, updates))
      for (Operation *user : full.getUsers())
        if (user != update && !replaced(user))
          if (Operation *inEntry = entry.findAncestorOpInBlock(*user))
            if (!firstUse || inEntry->isBeforeInBlock(firstUse))
              firstUse = inEntry;
    if (!firstUse)
      return {};
    OpBuilder at(firstUse);
    auto element = cast<RankedTensorType>(chunk.getType()).getElementType();
    Value all = AllGatherOp::create(at, loc, flatType(padded, element), chunk,
                                    groupRef, /*wire_type=*/nullptr);
    SmallVector<Type> types;
    for (Value full : fulls)
      types.push_back(full.getType());
    auto unpack =
        BucketUnpackOp::create(at, loc, types, all, bucketAlignment(element));
    for (auto [full, update, now] :
         llvm::zip_equal(fulls, updates, unpack.getResults())) {
      Operation *updateOp = update; // lambdas capture no structured bindings
      Value(full).replaceUsesWithIf(now, [&](OpOperand &use) {
        return use.getOwner() != updateOp && !replaced(use.getOwner());
      });
    }
    return SmallVector<Value>(unpack.getResults());
  };
  // The parameters gathered where the step uses them (whole, as the
  // update before them reads them).
  SmallVector<Value> paramsAtUses;
  if (stage == 3 && !first.paramIsMain) {
    SmallVector<Value> params;
    SmallVector<Operation *> updates;
    for (Update *u : group) {
      params.push_back(u->param);
      updates.push_back(u->op);
    }
    paramsAtUses = gatherAtUses(paramShard, params, updates);
  }

  // The new parameter's chunk and each new state's; and, gathered, each
  // new parameter whole (every rank computed them all).
  SmallVector<Value> updatedChunks;
  SmallVector<Value> wholeParams;
  if (plan == Plan::RowShards) {
    // The update on this rank's block of the matrix's rows.
    auto [rows, cols] = matrixShape(first);
    int64_t blockRows =
        llvm::divideCeil(rows, lookupProcessGroup(func, groupRef).getSize());
    SmallVector<ReassociationIndices> flatten = {{0, 1}};
    auto block = [&](Value chunk) -> Value {
      auto element = cast<RankedTensorType>(chunk.getType()).getElementType();
      return tensor::ExpandShapeOp::create(
          builder, loc, RankedTensorType::get({blockRows, cols}, element),
          chunk, flatten);
    };
    IRMapping mapping;
    mapping.map(first.op->getOperand(0), block(paramShard));
    mapping.map(first.op->getOperand(1), block(gradShard));
    for (auto [k, arg] : llvm::enumerate(stateShards))
      mapping.map(first.op->getOperand(2 + k),
                  whole[k] ? Value(arg) : block(arg));
    auto update = cast<DionUpdateOp>(builder.clone(*first.op, mapping));
    update.setRowGroupAttr(groupRef);
    update.setMatrixRows(rows);
    for (auto [r, result] : llvm::enumerate(update->getResults())) {
      auto type = cast<RankedTensorType>(result.getType());
      if (r > 0 && whole[r - 1]) {
        updatedChunks.push_back(result);
        continue;
      }
      result.setType(
          RankedTensorType::get({blockRows, cols}, type.getElementType()));
      updatedChunks.push_back(tensor::CollapseShapeOp::create(
          builder, loc, flatType(shard, type.getElementType()), result,
          flatten));
    }
  } else if (!gathered) {
    // The update, cloned onto the chunks.
    IRMapping mapping;
    mapping.map(first.op->getOperand(0), paramShard);
    mapping.map(first.op->getOperand(1), gradShard);
    for (auto [k, arg] : llvm::enumerate(stateShards))
      mapping.map(first.op->getOperand(2 + k), arg);
    Operation *update = builder.clone(*first.op, mapping);
    for (Value result : update->getResults()) {
      result.setType(flatType(
          shard, cast<RankedTensorType>(result.getType()).getElementType()));
      updatedChunks.push_back(result);
    }
  } else {
    // Every tensor whole from the gathered chunks (the parameters are
    // whole already at stages 1 and 2 without main parameters), updated as
    // unsharded, and this rank's chunk of each result kept.
    auto gatherWhole = [&](Value chunk, TypeRange types) {
      auto element = cast<RankedTensorType>(chunk.getType()).getElementType();
      Value all = AllGatherOp::create(builder, loc, flatType(padded, element),
                                      chunk, groupRef, /*wire_type=*/nullptr);
      return SmallVector<Value>(BucketUnpackOp::create(builder, loc, types, all,
                                                       bucketAlignment(element))
                                    .getResults());
    };
    auto chunkOf = [&](ValueRange wholes) -> Value {
      auto element =
          cast<RankedTensorType>(wholes.front().getType()).getElementType();
      Value all = BucketPackOp::create(builder, loc, flatType(padded, element),
                                       wholes, bucketAlignment(element));
      return ShardSliceOp::create(builder, loc, flatType(shard, element), all,
                                  groupRef);
    };
    auto typesOf = [&](function_ref<Type(Update &)> type) {
      return llvm::map_to_vector(group, [&](Update *u) { return type(*u); });
    };
    SmallVector<Value> params =
        llvm::map_to_vector(group, [](Update *u) -> Value { return u->param; });
    if (!paramsAtUses.empty())
      params = paramsAtUses;
    else if (first.paramIsMain || stage == 3)
      params = gatherWhole(
          paramShard, typesOf([](Update &u) { return u.param.getType(); }));
    // At stage 1 every rank holds the reduced gradients: only the clip
    // needs the chunks (its norm spans ranks); divisions and conversions
    // apply to the whole as they did to the chunk.
    SmallVector<Value> grads;
    if (stage == 1 && !first.clip) {
      for (Update *u : group) {
        Value g = u->reduction.getResult();
        if (u->divide)
          g = createDivision(builder, u->divide->getLoc(), g, u->divisor);
        for (Operation *link : u->elementwise)
          g = applyElementwiseLink(builder, link, g);
        grads.push_back(g);
      }
    } else {
      grads = gatherWhole(gradShard, typesOf([](Update &u) {
                            return u.op->getOperand(1).getType();
                          }));
    }
    SmallVector<SmallVector<Value>> states;
    for (auto [index, arg] : llvm::enumerate(stateShards)) {
      size_t k = index; // lambdas capture no structured bindings
      states.push_back(gatherWhole(
          arg, typesOf([&](Update &u) { return u.state[k].getType(); })));
    }
    SmallVector<SmallVector<Value>> results(1 + stateShards.size());
    for (auto [i, u] : llvm::enumerate(group)) {
      IRMapping mapping;
      mapping.map(u->op->getOperand(0), params[i]);
      mapping.map(u->op->getOperand(1), grads[i]);
      for (auto [k, state] : llvm::enumerate(states))
        mapping.map(u->op->getOperand(2 + k), state[i]);
      Operation *update = builder.clone(*u->op, mapping);
      for (auto [r, result] : llvm::enumerate(update->getResults()))
        results[r].push_back(result);
    }
    // (At stages 1 and 2 a plain parameter's chunk is not needed.)
    for (auto [r, wholes] : llvm::enumerate(results))
      updatedChunks.push_back(r == 0 && !first.paramIsMain && stage < 3
                                  ? Value()
                                  : chunkOf(wholes));
    if (stage < 3)
      for (auto [i, whole] : llvm::enumerate(results.front()))
        wholeParams.push_back(
            first.keep ? arith::SelectOp::create(builder, loc, first.keep,
                                                 whole, params[i])
                       : whole);
  }

  // A skipped step keeps the old chunks, as the selects kept the tensors.
  auto kept = [&](Value updated, Value old) -> Value {
    if (!first.keep)
      return updated;
    return arith::SelectOp::create(builder, loc, first.keep, updated, old);
  };
  auto resultAttrs = [&](BlockArgument arg) {
    return func.getArgAttrDict(arg.getArgNumber());
  };
  for (auto [k, arg] : llvm::enumerate(stateShards))
    newResults.push_back({kept(updatedChunks[1 + k], arg), resultAttrs(arg)});
  Value newParam =
      updatedChunks.front() ? kept(updatedChunks.front(), paramShard) : Value();
  if (first.paramIsMain || stage == 3)
    newResults.push_back(
        {newParam, resultAttrs(cast<BlockArgument>(paramShard))});

  // The updated parameters every rank needs: gathered, then unpacked.
  auto gatherInto = [&](Value chunk, ArrayRef<Value> replaced) {
    auto element = cast<RankedTensorType>(chunk.getType()).getElementType();
    Value full = AllGatherOp::create(builder, loc, flatType(padded, element),
                                     chunk, groupRef, /*wire_type=*/nullptr);
    SmallVector<Type> types;
    for (Value v : replaced)
      types.push_back(v.getType());
    auto unpack = BucketUnpackOp::create(builder, loc, types, full,
                                         bucketAlignment(element));
    for (auto [old, now] : llvm::zip_equal(replaced, unpack.getResults()))
      Value(old).replaceAllUsesWith(now);
  };
  if (gathered && stage < 3) {
    // Every rank holds the new parameters (or main parameters) whole.
    for (auto [u, whole] : llvm::zip_equal(group, wholeParams)) {
      if (!u->paramIsMain) {
        (u->selects.empty() ? u->op->getResult(0)
                            : u->selects.front().getResult())
            .replaceAllUsesWith(whole);
        continue;
      }
      for (arith::TruncFOp trunc : u->downcasts)
        trunc.getResult().replaceAllUsesWith(
            arith::TruncFOp::create(builder, loc, trunc.getType(), whole));
    }
  } else if (first.paramIsMain) {
    // Model parameters: rounded from the updated main chunk.
    Type modelElement = gradElement;
    if (!group.front()->downcasts.empty())
      modelElement =
          cast<RankedTensorType>(group.front()->downcasts.front().getType())
              .getElementType();
    Value rounded = arith::TruncFOp::create(
        builder, loc, flatType(shard, modelElement), newParam);
    if (stage == 3) {
      BlockArgument modelShard =
          shardArgument(modelElement, abi::kParam, prefix + ".param");
      newResults.push_back({rounded, resultAttrs(modelShard)});
      SmallVector<Value> models;
      for (Update *u : group)
        models.push_back(u->modelParam);
      gatherAtUses(modelShard, models,
                   SmallVector<Operation *>(models.size(), nullptr));
    } else {
      SmallVector<Value> models;
      for (Update *u : group)
        for (arith::TruncFOp trunc : u->downcasts)
          models.push_back(trunc.getResult());
      if (!models.empty())
        gatherInto(rounded, models);
    }
  } else if (stage < 3) {
    SmallVector<Value> params;
    for (Update *u : group)
      params.push_back(u->selects.empty() ? u->op->getResult(0)
                                          : u->selects.front().getResult());
    gatherInto(newParam, params);
  }
}
