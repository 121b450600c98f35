//===- LowerBuckets.cpp - buckets, shards and ownership -*- C++ -*-===//
//
// --distopt-lower-local-ops, buckets and shards: a pack becomes slices of
// one tensor (padding filled with zeros, data copied once), an unpack
// slices of it, shard_slice a slice at this rank's offset (a shard of a
// pack built directly, cut at run time beyond max-shard-cases ranks),
// owned_by a loop that runs on its owner only (an scf.if after
// bufferization).
//
//===----------------------------------------------------------------------===//

#include "LocalOps.h"

#include "distopt/Conversion/DistOptToLoops/DistOptToLoops.h"

#include "distopt/Conversion/DistOptToRuntime/RuntimeCalls.h"
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Transforms/Bucketing.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"

#include <cmath>

using namespace mlir;

namespace mlir::distopt {

static Value slice1d(OpBuilder &b, Location loc, Value source,
                     OpFoldResult offset, int64_t size) {
  auto type = cast<RankedTensorType>(source.getType());
  SmallVector<OpFoldResult> offsets = {offset}, sizes = {b.getIndexAttr(size)},
                            strides = {b.getIndexAttr(1)};
  for (int64_t d = 1; d < type.getRank(); ++d) {
    offsets.push_back(b.getIndexAttr(0));
    sizes.push_back(b.getIndexAttr(type.getDimSize(d)));
    strides.push_back(b.getIndexAttr(1));
  }
  return tensor::ExtractSliceOp::create(b, loc, source, offsets, sizes,
                                        strides);
}

/// A pack input, flattened. An arith.extf that produces it for the pack
/// alone (gradients reduced wider, --distopt-widen-reductions) extends the
/// flattened source instead: with no reshape between the conversion and the
/// bucket's slot, empty-tensor elimination lets it write there directly
/// rather than into a temporary that is copied.
static Value flattenForPack(OpBuilder &b, Location loc, Value input) {
  auto extend = input.getDefiningOp<arith::ExtFOp>();
  if (!extend || !extend->hasOneUse() ||
      !isa<RankedTensorType>(extend.getType()))
    return flatten(b, loc, input);
  Value source = flatten(b, loc, extend.getIn());
  auto sourceType = cast<RankedTensorType>(source.getType());
  return arith::ExtFOp::create(
      b, loc, sourceType.clone(getElementTypeOrSelf(extend.getType())), source);
}

/// Erases the conversions flattenForPack replaced, once `pack` is gone.
static void eraseReplacedConversions(RewriterBase &rewriter,
                                     ValueRange inputs) {
  for (Value input : inputs)
    if (auto extend = input.getDefiningOp<arith::ExtFOp>();
        extend && extend->use_empty())
      rewriter.eraseOp(extend);
}

/// Erases an unused `pack`, and the conversions only it used.
static void erasePack(RewriterBase &rewriter, BucketPackOp pack) {
  SmallVector<Value> inputs = pack.getInputs();
  rewriter.eraseOp(pack);
  eraseReplacedConversions(rewriter, inputs);
}

/// Elements [begin, end) of the bucket that packs `inputs` at `offsets`
/// into `total` elements, written into `range` (end - begin elements): the
/// parts of the tensors in that range, zeros where no tensor goes
/// (alignment gaps and the tail).
static Value packRange(OpBuilder &b, Location loc, ValueRange inputs,
                       ArrayRef<int64_t> offsets, int64_t total, int64_t begin,
                       int64_t end, Value range) {
  Type element = cast<RankedTensorType>(range.getType()).getElementType();
  auto insert = [&](Value piece, int64_t at, int64_t size) {
    range = tensor::InsertSliceOp::create(
        b, loc, piece, range,
        ArrayRef<OpFoldResult>{b.getIndexAttr(at - begin)},
        ArrayRef<OpFoldResult>{b.getIndexAttr(size)},
        ArrayRef<OpFoldResult>{b.getIndexAttr(1)});
  };
  auto zeros = [&](int64_t from, int64_t to) {
    from = std::max(from, begin);
    to = std::min(to, end);
    if (to <= from)
      return;
    // A fill, not a dense constant: the tail of a flat buffer padded for
    // many ranks can be large, and a constant would become a global.
    Value gap = tensor::EmptyOp::create(b, loc, {to - from}, element);
    Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(element));
    insert(linalg::FillOp::create(b, loc, zero, gap).getResult(0), from,
           to - from);
  };
  int64_t previousEnd = 0;
  for (auto [input, offset] : llvm::zip_equal(inputs, offsets)) {
    zeros(previousEnd, offset);
    int64_t size = cast<RankedTensorType>(input.getType()).getNumElements();
    int64_t lo = std::max(offset, begin), hi = std::min(offset + size, end);
    if (lo < hi) {
      Value flat = flattenForPack(b, loc, input);
      if (hi - lo < size)
        flat = slice1d(b, loc, flat, b.getIndexAttr(lo - offset), hi - lo);
      insert(flat, lo, hi - lo);
    }
    previousEnd = offset + size;
  }
  zeros(previousEnd, total);
  return range;
}

void lowerPack(RewriterBase &rewriter, BucketPackOp op) {
  OpBuilder &b = rewriter;
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(op);
  auto bucketType = op.getBucket().getType();
  int64_t total = bucketType.getNumElements();
  Value bucket = tensor::EmptyOp::create(b, op.getLoc(), bucketType.getShape(),
                                         bucketType.getElementType());
  rewriter.replaceAllUsesWith(
      op.getBucket(), packRange(b, op.getLoc(), op.getInputs(), op.getOffsets(),
                                total, 0, total, bucket));
  erasePack(rewriter, op);
}

SmallVector<Value> lowerUnpack(RewriterBase &rewriter, BucketUnpackOp op) {
  OpBuilder &b = rewriter;
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(op);
  Location loc = op.getLoc();
  SmallVector<Value> results;
  for (auto [result, offset] :
       llvm::zip_equal(op.getOutputs(), op.getOffsets())) {
    auto type = cast<RankedTensorType>(result.getType());
    Value flat = slice1d(b, loc, op.getBucket(), b.getIndexAttr(offset),
                         type.getNumElements());
    results.push_back(unflatten(b, loc, flat, type));
  }
  rewriter.replaceOp(op, results);
  return results;
}

Value rankOf(OpBuilder &b, Location loc, Operation *at,
             FlatSymbolRefAttr groupRef) {
  RuntimeCalls rt(b, loc, at);
  return rt.rank(rt.comm(lookupProcessGroup(at, groupRef)));
}

void lowerShardSlice(RewriterBase &rewriter, ShardSliceOp op) {
  OpBuilder &b = rewriter;
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(op);
  Location loc = op.getLoc();
  int64_t chunk = op.getType().getDimSize(0);
  Value rank = rankOf(b, loc, op, op.getGroupAttr());
  Value offset = arith::MulIOp::create(
      b, loc, rank, arith::ConstantIndexOp::create(b, loc, chunk));
  rewriter.replaceOp(op, slice1d(b, loc, op.getInput(), offset, chunk));
}

/// This rank's chunk, elements [rank * chunk, (rank + 1) * chunk), of the
/// bucket that packs `inputs` at `offsets`, with the rank known only at run
/// time: zeros, then each input's part of the chunk under an scf.if. The
/// code grows with the inputs, not with the ranks.
static Value packChunkAtRuntime(OpBuilder &b, Location loc, ValueRange inputs,
                                ArrayRef<int64_t> offsets, Value rank,
                                int64_t chunk, Value shard) {
  auto type = cast<RankedTensorType>(shard.getType());
  auto index = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(b, loc, v);
  };
  Value zero =
      arith::ConstantOp::create(b, loc, b.getZeroAttr(type.getElementType()));
  Value range = linalg::FillOp::create(b, loc, zero, shard).getResult(0);
  Value begin = arith::MulIOp::create(b, loc, rank, index(chunk));
  Value end = arith::AddIOp::create(b, loc, begin, index(chunk));
  for (auto [input, offset] : llvm::zip_equal(inputs, offsets)) {
    int64_t size = cast<RankedTensorType>(input.getType()).getNumElements();
    Value start = index(offset);
    Value lo = arith::MaxSIOp::create(b, loc, start, begin);
    Value hi = arith::MinSIOp::create(b, loc, index(offset + size), end);
    Value overlaps =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, lo, hi);
    auto ifOp = scf::IfOp::create(b, loc, TypeRange{type}, overlaps,
                                  /*withElseRegion=*/true);
    OpBuilder inThen = ifOp.getThenBodyBuilder();
    Value flat = flattenForPack(inThen, loc, input);
    Value count = arith::SubIOp::create(inThen, loc, hi, lo);
    OpFoldResult one = inThen.getIndexAttr(1);
    Value piece = tensor::ExtractSliceOp::create(
        inThen, loc, flat,
        ArrayRef<OpFoldResult>{
            arith::SubIOp::create(inThen, loc, lo, start).getResult()},
        ArrayRef<OpFoldResult>{count}, ArrayRef<OpFoldResult>{one});
    Value inserted = tensor::InsertSliceOp::create(
        inThen, loc, piece, range,
        ArrayRef<OpFoldResult>{
            arith::SubIOp::create(inThen, loc, lo, begin).getResult()},
        ArrayRef<OpFoldResult>{count}, ArrayRef<OpFoldResult>{one});
    scf::YieldOp::create(inThen, loc, inserted);
    OpBuilder inElse = ifOp.getElseBodyBuilder();
    scf::YieldOp::create(inElse, loc, range);
    range = ifOp.getResult(0);
  }
  return range;
}

/// shard_slice(bucket_pack(xs)) (a ZeRO step's own parameter shard): only
/// this rank's chunk is packed, instead of packing everything (N times the
/// copying) and slicing: one case per rank with static slices, or, for
/// more than `maxCases` ranks, slices computed at run time.
void lowerShardOfPack(RewriterBase &rewriter, ShardSliceOp op,
                      BucketPackOp pack, int64_t maxCases) {
  OpBuilder &b = rewriter;
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(op);
  Location loc = op.getLoc();
  int64_t chunk = op.getType().getDimSize(0);
  int64_t ranks = lookupProcessGroup(op, op.getGroupAttr()).getSize();
  int64_t total = pack.getBucket().getType().getNumElements();
  Type element = op.getType().getElementType();
  SmallVector<int64_t> offsets = pack.getOffsets();
  Value rank = rankOf(b, loc, op, op.getGroupAttr());
  // Every case fills one buffer, so that the result has no layout of its
  // own (which would cost a copy before the next collective).
  Value shard = tensor::EmptyOp::create(b, loc, {chunk}, element);
  auto finish = [&](Value result) {
    rewriter.replaceOp(op, result);
    if (pack->use_empty())
      erasePack(rewriter, pack);
  };
  if (ranks > maxCases)
    return finish(packChunkAtRuntime(b, loc, pack.getInputs(), offsets, rank,
                                     chunk, shard));
  auto cases = llvm::to_vector(llvm::seq<int64_t>(0, ranks));
  auto perRank = scf::IndexSwitchOp::create(b, loc, TypeRange{op.getType()},
                                            rank, cases, ranks);
  for (int64_t r = 0; r < ranks; ++r) {
    OpBuilder inCase =
        OpBuilder::atBlockEnd(&perRank.getCaseRegions()[r].emplaceBlock());
    scf::YieldOp::create(inCase, loc,
                         packRange(inCase, loc, pack.getInputs(), offsets,
                                   total, r * chunk, (r + 1) * chunk, shard));
  }
  // Not reached: the rank is below the group's size.
  OpBuilder inDefault =
      OpBuilder::atBlockEnd(&perRank.getDefaultRegion().emplaceBlock());
  scf::YieldOp::create(inDefault, loc, shard);
  finish(perRank.getResult(0));
}

/// `owned_by` as a loop that runs once on the owner and not at all on the
/// other ranks, its `otherwise` values carried in iter_args. Not an
/// scf.if: greedy ZeRO threads one state tensor through an owned_by per
/// tensor, and through a chain of scf.ifs, whose else branches pass the
/// state on, one-shot bufferization's analysis finds every earlier branch
/// as a possible last write and grows with the cube of their number
/// (ResNet-18's 62 tensors: 16.5 s of empty-tensor elimination and
/// bufferization, 0.15 s as loops, which write what they carry; ResNet-50's
/// 161: over 10 minutes to compile). --distopt-owner-loops-to-branches
/// makes each loop an scf.if after bufferization.
void lowerOwnedBy(RewriterBase &rewriter, OwnedByOp op) {
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPoint(op);
  Location loc = op.getLoc();
  Value rank = rankOf(rewriter, loc, op, op.getGroupAttr());
  Value isOwner = arith::CmpIOp::create(
      rewriter, loc, arith::CmpIPredicate::eq, rank,
      arith::ConstantIndexOp::create(rewriter, loc, op.getOwner()));
  Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
  Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
  Value trips = arith::SelectOp::create(rewriter, loc, isOwner, one, zero);
  auto loop =
      scf::ForOp::create(rewriter, loc, zero, trips, one, op.getOtherwise());
  loop->setAttr(abi::kOwnerLoop, rewriter.getUnitAttr());
  Block *body = loop.getBody();
  if (!body->empty())
    rewriter.eraseOp(body->getTerminator());
  rewriter.inlineBlockBefore(&op.getBody().front(), body, body->end());
  // The body reads the carried values, not the ones from above.
  for (auto [value, carried] :
       llvm::zip_equal(op.getOtherwise(), loop.getRegionIterArgs()))
    rewriter.replaceUsesWithIf(value, carried, [&](OpOperand &use) {
      return loop->isProperAncestor(use.getOwner());
    });
  auto yield = cast<YieldOp>(body->getTerminator());
  SmallVector<Value> yielded(yield.getValues());
  rewriter.setInsertionPoint(yield);
  rewriter.replaceOpWithNewOp<scf::YieldOp>(yield, yielded);
  rewriter.replaceOp(op, loop.getResults());
}

static void lowerRank(RewriterBase &rewriter, RankOp op) {
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPoint(op);
  rewriter.replaceOp(op, rankOf(rewriter, op.getLoc(), op, op.getGroupAttr()));
}

/// distopt_rt_check_rate(rate, group): a status the runtime turns into the
/// step's failure.
static void lowerCheckRate(RewriterBase &rewriter, CheckRateOp op) {
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPoint(op);
  RuntimeCalls rt(rewriter, op.getLoc(), op);
  rt.call("distopt_rt_check_rate", {op.getRate(), rt.i64(op.getParamGroup())});
  rewriter.eraseOp(op);
}

static void lowerGroupSize(RewriterBase &rewriter, GroupSizeOp op) {
  int64_t size = lookupProcessGroup(op, op.getGroupAttr()).getSize();
  rewriter.replaceOpWithNewOp<arith::ConstantIndexOp>(op, size);
}

namespace {

/// A pack waits for the shard_slices of it, which pack only their chunk.
struct LowerPack : public OpRewritePattern<BucketPackOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(BucketPackOp op,
                                PatternRewriter &rewriter) const override {
    if (llvm::any_of(op->getUsers(), llvm::IsaPred<ShardSliceOp>))
      return rewriter.notifyMatchFailure(op, "its shards are lowered first");
    lowerPack(rewriter, op);
    return success();
  }
};

struct LowerShardSlice : public OpRewritePattern<ShardSliceOp> {
  LowerShardSlice(MLIRContext *context, int64_t maxCases)
      : OpRewritePattern(context), maxCases(maxCases) {}
  LogicalResult matchAndRewrite(ShardSliceOp op,
                                PatternRewriter &rewriter) const override {
    if (auto pack = op.getInput().getDefiningOp<BucketPackOp>())
      lowerShardOfPack(rewriter, op, pack, maxCases);
    else
      lowerShardSlice(rewriter, op);
    return success();
  }
  int64_t maxCases;
};

} // namespace

void populateLowerBucketsPatterns(RewritePatternSet &patterns,
                                  int64_t maxShardCases) {
  patterns.add<LowerPack, LowerWith<BucketUnpackOp, lowerUnpack>,
               LowerWith<OwnedByOp, lowerOwnedBy>, LowerWith<RankOp, lowerRank>,
               LowerWith<GroupSizeOp, lowerGroupSize>,
               LowerWith<CheckRateOp, lowerCheckRate>>(patterns.getContext());
  patterns.add<LowerShardSlice>(patterns.getContext(), maxShardCases);
}

} // namespace mlir::distopt
