//===- StepStructure.cpp - how gradients reach the updates -----*- C++ -*-===//
//
// Walks each update's gradient back through the ops that may stand between
// a step's gradient argument and its update, one link at a time, and finds
// the selects that keep the update's results; walks each reduction of
// gradient arguments back to the arguments and forward to its mean.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/DistOpt/Analysis/StepStructure.h"

#include "distopt/Dialect/DistOpt/IR/ExactDivision.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace mlir::distopt;

using Kind = GradientLink::Kind;

/// The element-wise ops a gradient may pass through.
template <typename... Ops> struct OpList {
  static bool contains(Operation *op) { return isa<Ops...>(op); }
  static std::string names() {
    std::string names;
    ((names += (names.empty() ? "" : ", ") + Ops::getOperationName().str()),
     ...);
    return names;
  }
};
using ElementwiseLinks = OpList<arith::ExtFOp, arith::TruncFOp, UnscaleOp>;

bool mlir::distopt::isElementwiseLink(Operation *op) {
  if (!ElementwiseLinks::contains(op) || op->getNumResults() != 1 ||
      op->getNumOperands() == 0)
    return false;
  auto input = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
  auto result = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  return input && result && input.getShape() == result.getShape() &&
         llvm::all_of(op->getOperands().drop_front(), [](Value operand) {
           return !isa<ShapedType>(operand.getType());
         });
}

std::string mlir::distopt::describeElementwiseLinks() {
  return ElementwiseLinks::names();
}

Value mlir::distopt::applyElementwiseLink(OpBuilder &builder, Operation *link,
                                          Value part) {
  IRMapping mapping;
  mapping.map(link->getOperand(0), part);
  Operation *copy = builder.clone(*link, mapping);
  Value result = copy->getResult(0);
  result.setType(cast<RankedTensorType>(part.getType())
                     .clone(getElementTypeOrSelf(result.getType())));
  return result;
}

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
  // Before conversions: a truncation may end a division done wider.
  if (std::optional<ConstantDivision> division = matchConstantDivision(value))
    return GradientLink{
        Kind::Division,   op, 0, division->ops, division->dividend,
        division->divisor};
  if (isElementwiseLink(op))
    return GradientLink{Kind::Elementwise, op, 0, {}, op->getOperand(0)};
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

//===----------------------------------------------------------------------===//
// Reductions, from the gradient arguments
//===----------------------------------------------------------------------===//

bool mlir::distopt::isConstantScaling(Operation *op) {
  return isa<arith::DivFOp, arith::MulFOp>(op) &&
         matchPattern(op->getOperand(1), m_Constant());
}

/// The single user of `v`, or null.
static Operation *soleUser(Value v) {
  return v.hasOneUse() ? *v.user_begin() : nullptr;
}

/// Whether `op` may come before a reduction in its chain.
static bool mayPrepare(Operation *op) {
  return isa<BucketPackOp, arith::ExtFOp, arith::TruncFOp, arith::AddFOp>(op) ||
         isConstantScaling(op);
}

/// Gathers into `chain` what `v` (the input of the chain's first
/// collective) is made of: gradient arguments of `entry`, through ops that
/// only prepare them for the reduction and have no other use. False when
/// it is made of anything else.
static bool collectInputs(Value v, Block &entry, ReductionChain &chain,
                          SetVector<Operation *> &prepared) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    auto function = dyn_cast<FunctionOpInterface>(entry.getParentOp());
    if (!function || arg.getOwner() != &entry || !arg.hasOneUse())
      return false;
    StringRef role = abi::getArgRole(function, arg.getArgNumber());
    // The f32 sum of the micro-batches before this one (grad_accumulation):
    // read by the reduction, zeroed by the driver after the step.
    if (role == abi::kGradAccum)
      return true;
    if (role != abi::kGrad)
      return false;
    chain.args.push_back(arg.getArgNumber());
    return true;
  }
  Operation *op = v.getDefiningOp();
  if (op->hasTrait<OpTrait::ConstantLike>())
    return true;
  if (!mayPrepare(op) || !v.hasOneUse() || op->getBlock() != &entry)
    return false;
  for (Value operand : op->getOperands())
    if (!collectInputs(operand, entry, chain, prepared))
      return false;
  prepared.insert(op);
  return true;
}

/// A collective that reduces gradients: its own or started.
static bool startsReduction(Operation *op) {
  auto c = dyn_cast<CollectiveOpInterface>(op);
  return c && c.reduces() &&
         (c.getCollectiveKind() == CollectiveKind::AllReduce ||
          c.getCollectiveKind() == CollectiveKind::ReduceScatter);
}

/// The reduction chain that starts at `first`, or nullopt where `first`
/// reduces anything but gradient arguments.
static std::optional<ReductionChain> reductionFrom(Operation *first) {
  ReductionChain chain;
  Block &entry = *first->getBlock();
  SetVector<Operation *> prepared;
  Value v = cast<CollectiveOpInterface>(first).getInput();
  if (!collectInputs(v, entry, chain, prepared))
    return std::nullopt;
  chain.ops.assign(prepared.begin(), prepared.end());
  llvm::sort(chain.ops,
             [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  while (Operation *user = soleUser(v)) {
    auto c = dyn_cast<CollectiveOpInterface>(user);
    if (c && c.getInput() == v &&
        (startsReduction(user) ||
         c.getCollectiveKind() == CollectiveKind::AllGather)) {
      if (c.getCollectiveKind() == CollectiveKind::ReduceScatter)
        chain.shardOf = cast<ShapedType>(v.getType()).getNumElements();
      chain.ops.push_back(user);
      v = user->getResult(0);
      if (c.isAsync()) {
        auto wait = dyn_cast_if_present<WaitOp>(soleUser(v));
        if (!wait) // a token waited on more than once, or in a region
          return std::nullopt;
        chain.ops.push_back(wait);
        v = wait.getResult();
      }
      if (!c.keepsShape() && c.getCollectiveKind() == CollectiveKind::AllGather)
        chain.shardOf = 0; // gathered whole again
    } else if ((isConstantScaling(user) || isa<arith::TruncFOp>(user)) &&
               user->getOperand(0) == v && user->getBlock() == &entry) {
      chain.ops.push_back(user);
      v = user->getResult(0);
    } else {
      break;
    }
  }
  chain.reduced = v;
  return chain;
}

//===----------------------------------------------------------------------===//
// StepStructure
//===----------------------------------------------------------------------===//

StepStructure::StepStructure(Operation *function) : function(function) {
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

ArrayRef<ReductionChain> StepStructure::reductions() const {
  if (allReductions)
    return *allReductions;
  allReductions.emplace();
  Region &body = function->getRegion(0);
  if (!body.hasOneBlock())
    return *allReductions;
  DenseSet<Operation *> chained;
  for (Operation &op : body.front())
    if (startsReduction(&op) && !chained.contains(&op))
      if (std::optional<ReductionChain> chain = reductionFrom(&op)) {
        chained.insert(chain->ops.begin(), chain->ops.end());
        allReductions->push_back(std::move(*chain));
      }
  return *allReductions;
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
