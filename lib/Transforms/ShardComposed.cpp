//===- ShardComposed.cpp - What spans ZeRO's shards -------------*- C++ -*-===//
//
// The order of the sharding (each group's part of the reduced gradients,
// what spans the groups, the updates) and what spans them: the overflow
// check, loss scaling and clipping by the global norm read every gradient.
// Under ZeRO a rank holds only its part of the reduced gradients, so both
// strategies rebuild them over those parts: the check and the norm are
// agreed over the group with one scalar reduction, and each update reads
// its gradient unscaled and clipped from its rank's part. Also the helpers
// both strategies share (layouts, new arguments).
//
//===----------------------------------------------------------------------===//

#include "ShardOptimizer.h"

#include "distopt/Dialect/DistOpt/IR/StepABI.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"

using namespace mlir;
using namespace mlir::distopt;
using namespace mlir::distopt::zero;

namespace mlir::distopt::zero {

RankedTensorType flatType(int64_t size, Type element) {
  return RankedTensorType::get({size}, element);
}

/// The attribute describing where each tensor of a group lives.
ArrayAttr layoutAttr(Builder &builder, ArrayRef<Update *> group,
                     ArrayRef<int64_t> offsets, ArrayRef<int64_t> owners,
                     std::optional<unsigned> state) {
  SmallVector<Attribute> entries;
  for (auto [i, u] : llvm::enumerate(group)) {
    auto type = state ? cast<RankedTensorType>(u->state[*state].getType())
                      : u->paramType();
    entries.push_back(abi::layoutEntry(
        builder, u->name, offsets[i], type.getShape(),
        owners.empty() ? std::nullopt : std::optional<int64_t>(owners[i])));
  }
  return builder.getArrayAttr(entries);
}

/// The torch state key of a state argument ("exp_avg" of "w.exp_avg").
std::string stateKey(func::FuncOp func, const Update &u, unsigned k) {
  StringRef name = abi::getArgName(func, u.state[k].getArgNumber());
  if (name.consume_front(u.name) && name.consume_front("."))
    return name.str();
  return ("state" + Twine(k)).str();
}

BlockArgument Sharder::addArgument(func::FuncOp func, Type type, StringRef role,
                                   StringRef name,
                                   ArrayRef<NamedAttribute> extra) {
  Builder builder(func.getContext());
  NamedAttrList attrs;
  attrs.set(abi::kRole, builder.getStringAttr(role));
  attrs.set(abi::kName, builder.getStringAttr(name));
  for (NamedAttribute attr : extra)
    attrs.set(attr.getName(), attr.getValue());
  unsigned index = func.getNumArguments();
  (void)func.insertArgument(index, type, attrs.getDictionary(func.getContext()),
                            func.getLoc());
  return func.getArgument(index);
}

} // namespace mlir::distopt::zero

/// Each tensor's [begin, end) in a greedy group's buffer of N x capacity
/// elements whose chunk r is rank r's, in order.
static SmallVector<int64_t> ownedBounds(ArrayRef<Update *> group,
                                        const Sharder::GreedyGroup &greedy) {
  SmallVector<std::pair<int64_t, int64_t>> where;
  for (auto [i, u] : llvm::enumerate(group)) {
    int64_t begin = greedy.owners[i] * greedy.capacity + greedy.offsets[i];
    where.push_back({begin, begin + u->numel()});
  }
  llvm::sort(where);
  SmallVector<int64_t> pairs;
  for (auto [begin, end] : where)
    llvm::append_values(pairs, begin, end);
  return pairs;
}

void Sharder::shard(func::FuncOp func, ArrayRef<SmallVector<Update *>> groups,
                    ArrayRef<Plan> plans) {
  // Flat layouts (chunk by chunk or gathered) against owners.
  SmallVector<bool> flat = llvm::map_to_vector(
      plans, [](Plan plan) { return plan != Plan::Owners; });
  bool mixed =
      llvm::is_contained(flat, true) && llvm::is_contained(flat, false);
  SmallVector<FlatGroup> flats(groups.size());
  SmallVector<GreedyGroup, 0> greedy(groups.size());
  // Every group's part of the reduced gradients first.
  for (auto [g, group] : llvm::enumerate(groups)) {
    if (flat[g])
      flats[g] = reduceFlat(func, group, plans[g]);
    else
      greedy[g] = assignGreedy(func, group, /*composeAtStage1=*/mixed);
  }
  // What spans the groups reads every part at once: packing the flat
  // groups' parameters first gives the reduce-scatters work to overlap with
  // (--distopt-overlap-collectives), as the updates do without it.
  bool spanning = llvm::any_of(groups, [](ArrayRef<Update *> group) {
    return group.front()->finiteCheck || group.front()->clip;
  });
  // The parts: a flat group's chunk (always: its divisions and conversions
  // apply to it), a greedy one's buffer of owned gradients where one was
  // built (something spans them); with, for each, where its tensors lie in
  // a flat buffer whose chunk r is rank r's part.
  SmallVector<SmallVector<Update *>> parts;
  SmallVector<unsigned> members;
  SmallVector<Value> grads;
  SmallVector<SmallVector<int64_t>> bounds;
  for (auto [g, group] : llvm::enumerate(groups)) {
    if (flat[g]) {
      // (The gather plan reads whole parameters.)
      if (spanning && plans[g] != Plan::Gathered)
        flats[g].param = packParamsFlat(func, group, flats[g]);
      grads.push_back(flats[g].grad);
      SmallVector<int64_t> &pairs = bounds.emplace_back();
      for (auto [u, offset] : llvm::zip_equal(group, flats[g].offsets))
        llvm::append_values(pairs, offset, offset + u->numel());
    } else if (greedy[g].grad) {
      grads.push_back(greedy[g].grad);
      bounds.push_back(ownedBounds(group, greedy[g]));
    } else {
      continue;
    }
    parts.push_back(group);
    members.push_back(g);
  }
  if (!parts.empty())
    composeChunks(func, parts, grads, bounds,
                  flat[members.front()]
                      ? chunkGroup(*parts.front().front())
                      : parts.front().front()->reduction.getGroupAttr());
  for (auto [k, g] : llvm::enumerate(members))
    (flat[g] ? flats[g].grad : greedy[g].grad) = grads[k];

  // The updates, each kind's buffers numbered apart ("flat0", "owned0").
  unsigned flatIndex = 0, ownedIndex = 0;
  for (auto [g, group] : llvm::enumerate(groups)) {
    if (flat[g])
      updateFlat(func, group, flatIndex++, flats[g], plans[g]);
    else
      updateGreedy(func, group, ownedIndex++, greedy[g]);
  }

  // What the parts replaced goes. At stage 1 a greedy group whose
  // gradients were not gathered into parts keeps what the step computed
  // from the reduced gradients (every rank holds them).
  SmallVector<SmallVector<Update *>> composed;
  for (auto [g, group] : llvm::enumerate(groups)) {
    if (flat[g] || stage == 2 || greedy[g].grad) {
      composed.push_back(group);
      continue;
    }
    for (Update *u : group) {
      if (u->paramIsMain)
        toErase.append(u->downcasts.begin(), u->downcasts.end());
      toErase.append(u->selects.begin(), u->selects.end());
      toErase.push_back(u->op);
      if (!u->chained())
        toErase.append(u->elementwise.rbegin(), u->elementwise.rend());
    }
  }
  eraseComposed(composed);
}

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
    auto check = cast<AllFiniteOp>(op);
    SmallVector<unsigned> read = members(op);
    // What it reads besides the sharded updates' gradients (which
    // checkSpanningOps let through only on a check agreed over a group)
    // stays whole, agreed over that group.
    llvm::SmallPtrSet<Value, 8> replaced;
    for (unsigned g : read)
      for (Update *u : groups[g]) {
        replaced.insert(u->reduction.getResult());
        if (u->divide)
          replaced.insert(u->divide->getResult(0));
      }
    SmallVector<Value> whole;
    for (Value input : check.getInputs())
      if (!replaced.contains(input))
        whole.push_back(input);
    SmallVector<Value> checked = inputs(read);
    bool sameGroup = check.getGroupAttr() == groupRef;
    if (sameGroup)
      checked.append(whole);
    Value ok = AllFiniteOp::create(builder, op->getLoc(), checked, groupRef);
    if (!sameGroup && !whole.empty())
      ok = arith::AndIOp::create(builder, op->getLoc(), ok,
                                 AllFiniteOp::create(builder, op->getLoc(),
                                                     whole,
                                                     check.getGroupAttr()));
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
  // The model copies rounded from main parameters were replaced; a
  // rounding of a plain parameter reads its replacement and stays.
  eraseEach([](Update &u) {
    SmallVector<Operation *> ops;
    if (u.paramIsMain)
      ops.append(u.downcasts.begin(), u.downcasts.end());
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
