//===- StepStructure.h - how gradients reach the updates -------*- C++ -*-===//
//
// The structure of a step, found once: for every optimizer update, the ops
// its gradient passes through on its way from the step's gradient argument
// (reductions, the 1/K division, conversions, the unscale, the clip, the
// bucket it travelled in), and the condition its results are kept under (an
// overflow check's arith.select); and, seen from the other end, each
// reduction of the step's gradient arguments with what prepares them for it
// and what makes its mean (the pieces a split step reduces on their own).
// Passes read it instead of walking use-def chains of their own; a new op
// on the gradient's path is taught here.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_DIALECT_DISTOPT_ANALYSIS_STEPSTRUCTURE_H
#define DISTOPT_DIALECT_DISTOPT_ANALYSIS_STEPSTRUCTURE_H

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/DenseMap.h"

namespace mlir::distopt {

/// One op (or group of ops) on a gradient's way to its update.
struct GradientLink {
  enum class Kind {
    /// distopt.clip_grad_norm: the gradient is its result `index`.
    Clip,
    /// An op applied to the gradient element by element, its other
    /// operands scalars (isElementwiseLink: a conversion, distopt.unscale).
    Elementwise,
    /// A division by a splat constant (ExactDivision.h); `ops` are its ops.
    Division,
    /// A synchronous collective that reduces (CollectiveOpInterface).
    Reduction,
    /// Result `index` of a distopt.bucket_unpack whose bucket comes from a
    /// distopt.bucket_pack through synchronous all-reduces only: `ops` are
    /// those all-reduces, then the pack; the gradient was the pack's input
    /// `index`.
    Bucket,
  };
  Kind kind;
  /// The op that yields the gradient at this link (the division's first,
  /// the bucket's unpack).
  Operation *op;
  unsigned index = 0;
  SmallVector<Operation *, 3> ops;
  /// The value the link takes: where the chain goes on.
  Value input;
  /// A division's divisor.
  double divisor = 0;
};

/// The way from a step's gradient to one update.
struct GradientChain {
  OptimizerOpInterface update;
  /// Nearest the update first.
  SmallVector<GradientLink> links;
  /// Where the chain starts: the first value no link explains (a step
  /// argument, or the result of an op not on the list above).
  Value origin;
  /// Per result of the update, the arith.select that keeps it only under a
  /// condition (`select %c, %new, %old` with %old the operand it updates,
  /// its only use), or null.
  SmallVector<arith::SelectOp> selects;

  /// The step's argument the gradient starts at, or null.
  BlockArgument source() const;
  /// Whether every link is of one of `kinds` (and each reduction, where
  /// `reductions` is given, of one of those collective kinds).
  bool onlyThrough(ArrayRef<GradientLink::Kind> kinds,
                   ArrayRef<CollectiveKind> reductions = {}) const;
  /// The condition every result is kept under, or null when some result
  /// is not selected or two are under different conditions.
  Value keep() const;
};

/// A reduction of gradient arguments, seen from the arguments: what
/// prepares them for it (a bucket's packing, a cast to a wider type, a
/// scaling, the sum with the micro-batches accumulated before), its
/// collectives (an all-reduce or reduce-scatter, then those that go on with
/// its result whole, as a hierarchical all-reduce's parts; each synchronous
/// or started and waited) and the scalings that make its mean. Every op but
/// the last has its only use in the chain.
struct ReductionChain {
  /// The gradient arguments it reduces (role grad), in order.
  SmallVector<unsigned> args;
  /// Its ops in block order.
  SmallVector<Operation *> ops;
  /// What it leaves.
  Value reduced;
  /// Where it leaves a reduce-scatter's shard: the whole length.
  int64_t shardOf = 0;
};

/// Whether `op` may stand on a gradient's path as an element-wise link: it
/// maps each element of its first operand to one element of its only
/// result (of the same shape), and its other operands are scalars, so that
/// it applies alike to any part of the gradient. These are arith.extf,
/// arith.truncf and distopt.unscale; an op added to that list is taken
/// by every pass that reads the chains (ZeRO applies it to each rank's
/// part with applyElementwiseLink).
bool isElementwiseLink(Operation *op);
/// The ops isElementwiseLink takes, for diagnostics.
std::string describeElementwiseLinks();
/// `link` (isElementwiseLink) applied to `part` instead of its first
/// operand: a copy of it at `builder`'s point whose result has `part`'s
/// shape.
Value applyElementwiseLink(OpBuilder &builder, Operation *link, Value part);

/// A division or multiplication by a constant: what makes a sum a mean.
bool isConstantScaling(Operation *op);

/// Every update's chain in a function, and its reductions of gradient
/// arguments (usable as a pass's analysis: getAnalysis<StepStructure>() on
/// a function).
class StepStructure {
public:
  explicit StepStructure(Operation *function);

  ArrayRef<GradientChain> chains() const { return allChains; }
  /// The chain of `update`, or null when it is not in the function.
  const GradientChain *chainOf(Operation *update) const;
  /// The reductions of the function's entry block, in the order they
  /// start (none in a function of several blocks); found on first use,
  /// as only the split step asks.
  ArrayRef<ReductionChain> reductions() const;

private:
  Operation *function;
  SmallVector<GradientChain> allChains;
  DenseMap<Operation *, unsigned> indexOf;
  mutable std::optional<SmallVector<ReductionChain>> allReductions;
};

} // namespace mlir::distopt

#endif // DISTOPT_DIALECT_DISTOPT_ANALYSIS_STEPSTRUCTURE_H
