//===- LocalOps.h - the lowering of local ops, by family --------*- C++ -*-===//
//
// Private to DistOptToLoops: what LowerLocalOps.cpp calls for each op, and
// the helpers the families share. Each lowerX replaces `op` through
// `rewriter` (on tensors), for the patterns of LowerLocalOps.cpp, and
// restores the rewriter's insertion point (an InsertionGuard): it must not
// be left at the op just replaced.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_LIB_CONVERSION_DISTOPTTOLOOPS_LOCALOPS_H
#define DISTOPT_LIB_CONVERSION_DISTOPTTOLOOPS_LOCALOPS_H

#include "distopt/Codegen/Shapes.h"
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Transforms/Bucketing.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::distopt {

// Shared helpers (and flatten, unflatten: distopt/Codegen/Shapes.h).
/// This process's rank in `group`, as an index (a runtime call at `at`).
Value rankOf(OpBuilder &b, Location loc, Operation *at,
             FlatSymbolRefAttr group);
/// Reduces every element of `tensor` into one scalar: acc = combine(acc,
/// element) from `init`.
Value reduceAll(
    OpBuilder &b, Location loc, Value tensor, Value init,
    function_ref<Value(OpBuilder &, Location, Value, Value)> combine);
/// `x` extended to the wider float type `to` (itself if already `to`).
Value widen(OpBuilder &b, Location loc, Value x, Type to);

/// A matrix product (LowerCompression.cpp): out = the sum over loop
/// dimension `reduction` of lhs * rhs, operands and result indexed by their
/// maps over three loop dimensions (transposes are maps), `shape` the
/// result's. Loops nest in dimension order, d0 outermost: the order decides
/// the memory walk, and the innermost loop should run along contiguous
/// rows. When it is the sum itself (a dot product), `reassociate` lets LLVM
/// vectorize it, rounding differently. Half types accumulate in f32,
/// rounded to their type unless `rounded` is false.
Value contract(OpBuilder &b, Location loc, Value lhs, Value rhs,
               AffineMap lhsMap, AffineMap rhsMap, AffineMap outMap,
               unsigned reduction, ArrayRef<int64_t> shape,
               bool reassociate = false, bool rounded = true);
/// The map of a matrix indexed by loop dimensions `row` and `col` (of 3).
AffineMap dims(OpBuilder &b, unsigned row, unsigned col);

// Buckets and shards (LowerBuckets.cpp).
void lowerPack(RewriterBase &rewriter, BucketPackOp op);
/// Returns what replaces the unpacked tensors.
SmallVector<Value> lowerUnpack(RewriterBase &rewriter, BucketUnpackOp op);
void lowerShardSlice(RewriterBase &rewriter, ShardSliceOp op);
/// A shard of a pack, built directly; beyond `maxCases` ranks its bounds
/// are computed at run time. The pack goes too once it has no other use.
void lowerShardOfPack(RewriterBase &rewriter, ShardSliceOp op,
                      BucketPackOp pack, int64_t maxCases);
void lowerOwnedBy(RewriterBase &rewriter, OwnedByOp op);

// Mixed precision, finite checks, clipping (LowerMixedPrecision.cpp).
void lowerUnscale(RewriterBase &rewriter, UnscaleOp op);
void lowerAllFinite(RewriterBase &rewriter, AllFiniteOp op);
void lowerLossScaleUpdate(RewriterBase &rewriter, LossScaleUpdateOp op);
void lowerClipGradNorm(RewriterBase &rewriter, ClipGradNormOp op);

// Compression (LowerCompression.cpp).
void lowerOrthogonalize(RewriterBase &rewriter, OrthogonalizeOp op);
/// The tensors reduced by `kind` over `group` in one all_reduce (packed into
/// one bucket when there are several): the factors of a batch of low-rank
/// updates, where a collective each would cost the link's latency each.
SmallVector<Value> allReduceTogether(OpBuilder &b, Location loc,
                                     ArrayRef<Value> factors,
                                     FlatSymbolRefAttr group,
                                     ReductionKind kind);
/// A batch of PowerSGD all-reduces (block-level: their factors are reduced
/// together); the caller erases its members.
void lowerPowerSGD(PowerSGDBatch &batch);
void lowerTopK(RewriterBase &rewriter, TopKAllReduceOp op);

/// A pattern that lowers every OpTy with `Lower(rewriter, op)`.
template <typename OpTy, auto Lower>
struct LowerWith : public OpRewritePattern<OpTy> {
  using OpRewritePattern<OpTy>::OpRewritePattern;
  LogicalResult matchAndRewrite(OpTy op,
                                PatternRewriter &rewriter) const override {
    (void)Lower(rewriter, op);
    return success();
  }
};

} // namespace mlir::distopt

#endif // DISTOPT_LIB_CONVERSION_DISTOPTTOLOOPS_LOCALOPS_H
