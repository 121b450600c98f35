//===- StepStructure.cpp - how gradients reach the updates -----*- C++ -*-===//
//
// Walks each update's gradient back through the ops that may stand between
// a step's gradient argument and its update, one link at a time, and finds
// the selects that keep the update's results.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/DistOpt/Analysis/StepStructure.h"

#include "distopt/Dialect/DistOpt/IR/ExactDivision.h"

using namespace mlir;
using namespace mlir::distopt;

using Kind = GradientLink::Kind;

/// The link that yields `value`, or nullopt where no op on the list does.
static std::optional<GradientLink> linkYielding(Value value) {
  Operation *op = value.getDefiningOp();
  if (!op)
    return std::nullopt;
  unsigned result = cast<OpResult>(value).getResultNumber();
  if (auto clip = dyn_cast<ClipGradNormOp>(op)) {
    if (result >= clip.getInputs().size())
      return std::nullopt; // the norm
    return GradientLink{Kind::Clip, op, result, {}, clip.getInputs()[result]};
  }
  if (auto unscale = dyn_cast<UnscaleOp>(op))
    return GradientLink{Kind::Unscale, op, 0, {}, unscale.getInput()};
  // Before conversions: a truncation may end a division done wider.
  if (std::optional<ConstantDivision> division = matchConstantDivision(value))
    return GradientLink{
        Kind::Division,   op, 0, division->ops, division->dividend,
        division->divisor};
  if (isa<arith::ExtFOp, arith::TruncFOp>(op))
    return GradientLink{Kind::Convert, op, 0, {}, op->getOperand(0)};
  if (auto collective = dyn_cast<CollectiveOpInterface>(op);
      collective && collective.reduces() && !collective.isAsync())
    return GradientLink{Kind::Reduction, op, 0, {}, collective.getInput()};
  if (auto unpack = dyn_cast<BucketUnpackOp>(op)) {
    // The bucket back to its pack, through whole-bucket all-reduces.
    GradientLink link{Kind::Bucket, op, result, {}, Value()};
    Value bucket = unpack.getBucket();
    while (auto collective = bucket.getDefiningOp<CollectiveOpInterface>()) {
      if (!collective.reduces() || collective.isAsync() ||
          collective.getCollectiveKind() != CollectiveKind::AllReduce)
        return std::nullopt;
      link.ops.push_back(collective);
      bucket = collective.getInput();
    }
    auto pack = bucket.getDefiningOp<BucketPackOp>();
    if (!pack || pack.getInputs().size() != unpack.getResults().size())
      return std::nullopt;
    link.ops.push_back(pack);
    link.input = pack.getInputs()[result];
    return link;
  }
  return std::nullopt;
}

/// The chain from `grad` back to where it starts.
static void traceGradient(Value grad, GradientChain &chain) {
  while (std::optional<GradientLink> link = linkYielding(grad)) {
    grad = link->input;
    chain.links.push_back(std::move(*link));
  }
  chain.origin = grad;
}

/// The select that keeps `updated` only under a condition, against `old`.
static arith::SelectOp keepingSelect(Value updated, Value old) {
  if (!updated.hasOneUse())
    return {};
  auto select = dyn_cast<arith::SelectOp>(*updated.user_begin());
  if (!select || select.getTrueValue() != updated ||
      select.getFalseValue() != old ||
      !select.getCondition().getType().isInteger(1))
    return {};
  return select;
}

StepStructure::StepStructure(Operation *function) {
  function->walk([&](OptimizerOpInterface update) {
    GradientChain chain;
    chain.update = update;
    traceGradient(update.getGrad(), chain);
    chain.selects.push_back(
        keepingSelect(update.getNewParam(), update.getParam()));
    for (auto [updated, old] :
         llvm::zip_equal(update.getNewState(), update.getState()))
      chain.selects.push_back(keepingSelect(updated, old));
    indexOf[update] = allChains.size();
    allChains.push_back(std::move(chain));
  });
}

const GradientChain *StepStructure::chainOf(Operation *update) const {
  auto it = indexOf.find(update);
  return it == indexOf.end() ? nullptr : &allChains[it->second];
}

BlockArgument GradientChain::source() const {
  return dyn_cast<BlockArgument>(origin);
}

bool GradientChain::onlyThrough(ArrayRef<GradientLink::Kind> kinds,
                                ArrayRef<CollectiveKind> reductions) const {
  return llvm::all_of(links, [&](const GradientLink &link) {
    if (!llvm::is_contained(kinds, link.kind))
      return false;
    return link.kind != Kind::Reduction || reductions.empty() ||
           llvm::is_contained(
               reductions,
               cast<CollectiveOpInterface>(link.op).getCollectiveKind());
  });
}

Value GradientChain::keep() const {
  Value condition;
  for (arith::SelectOp select : selects) {
    if (!select || (condition && select.getCondition() != condition))
      return {};
    condition = select.getCondition();
  }
  return condition;
}
