//===- LowerLocalOps.cpp - the ops that do not communicate ------*- C++ -*-===//
//
// --distopt-lower-local-ops: buckets become slices of one tensor (padding
// filled with zeros, data copied once), shard_slice a slice at this rank's
// offset, owned_by an scf.if on the rank, rank a runtime call. Collectives
// stay for bufferization (BufferizableOpInterfaceImpl.cpp); ops the CPU
// lowering does not handle yet are reported, not passed through.
//
//===----------------------------------------------------------------------===//

#include "distopt/Conversion/DistOptToRuntime/BufferUses.h"
#include "distopt/Conversion/DistOptToRuntime/RuntimeCalls.h"
#include "distopt/Conversion/Passes.h"
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Transforms/Bucketing.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

#include <cmath>

namespace mlir::distopt {
#define GEN_PASS_DEF_LOWERLOCALOPSPASS
#include "distopt/Conversion/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

/// `value` as a 1-D tensor of its elements, row-major.
Value flatten(OpBuilder &b, Location loc, Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getRank() == 1)
    return value;
  if (type.getRank() == 0)
    return tensor::ExpandShapeOp::create(
        b, loc, RankedTensorType::get({1}, type.getElementType()), value,
        ArrayRef<ReassociationIndices>{});
  SmallVector<ReassociationIndices> all = {
      llvm::to_vector(llvm::seq<int64_t>(0, type.getRank()))};
  return tensor::CollapseShapeOp::create(b, loc, value, all);
}

/// The 1-D `value` in `type`'s shape.
Value unflatten(OpBuilder &b, Location loc, Value value,
                RankedTensorType type) {
  if (type.getRank() == 1)
    return value;
  if (type.getRank() == 0)
    return tensor::CollapseShapeOp::create(b, loc, type, value,
                                           ArrayRef<ReassociationIndices>{});
  SmallVector<ReassociationIndices> all = {
      llvm::to_vector(llvm::seq<int64_t>(0, type.getRank()))};
  return tensor::ExpandShapeOp::create(b, loc, type, value, all);
}

Value slice1d(OpBuilder &b, Location loc, Value source, OpFoldResult offset,
              int64_t size) {
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
Value flattenForPack(OpBuilder &b, Location loc, Value input) {
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
void eraseReplacedConversions(ValueRange inputs) {
  for (Value input : inputs)
    if (auto extend = input.getDefiningOp<arith::ExtFOp>();
        extend && extend->use_empty())
      extend.erase();
}

/// Elements [begin, end) of the bucket that packs `inputs` at `offsets`
/// into `total` elements, written into `range` (end - begin elements): the
/// parts of the tensors in that range, zeros where no tensor goes
/// (alignment gaps and the tail).
Value packRange(OpBuilder &b, Location loc, ValueRange inputs,
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

void lowerPack(BucketPackOp op) {
  OpBuilder b(op);
  auto bucketType = op.getBucket().getType();
  int64_t total = bucketType.getNumElements();
  Value bucket = tensor::EmptyOp::create(b, op.getLoc(), bucketType.getShape(),
                                         bucketType.getElementType());
  op.replaceAllUsesWith(packRange(b, op.getLoc(), op.getInputs(),
                                  op.getOffsets(), total, 0, total, bucket));
  SmallVector<Value> inputs = op.getInputs();
  op.erase();
  eraseReplacedConversions(inputs);
}

/// Returns what replaces the unpacked tensors.
SmallVector<Value> lowerUnpack(BucketUnpackOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  SmallVector<Value> results;
  for (auto [result, offset] :
       llvm::zip_equal(op.getOutputs(), op.getOffsets())) {
    auto type = cast<RankedTensorType>(result.getType());
    Value flat = slice1d(b, loc, op.getBucket(), b.getIndexAttr(offset),
                         type.getNumElements());
    results.push_back(unflatten(b, loc, flat, type));
  }
  op.replaceAllUsesWith(results);
  op.erase();
  return results;
}

Value rankOf(OpBuilder &b, Location loc, Operation *at,
             FlatSymbolRefAttr groupRef) {
  RuntimeCalls rt(b, loc, at);
  return rt.rank(rt.world(lookupProcessGroup(at, groupRef).getSize()));
}

void lowerShardSlice(ShardSliceOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  int64_t chunk = op.getType().getDimSize(0);
  Value rank = rankOf(b, loc, op, op.getGroupAttr());
  Value offset = arith::MulIOp::create(
      b, loc, rank, arith::ConstantIndexOp::create(b, loc, chunk));
  op.replaceAllUsesWith(slice1d(b, loc, op.getInput(), offset, chunk));
  op.erase();
}

/// This rank's chunk, elements [rank * chunk, (rank + 1) * chunk), of the
/// bucket that packs `inputs` at `offsets`, with the rank known only at run
/// time: zeros, then each input's part of the chunk under an scf.if. The
/// code grows with the inputs, not with the ranks.
Value packChunkAtRuntime(OpBuilder &b, Location loc, ValueRange inputs,
                         ArrayRef<int64_t> offsets, Value rank, int64_t chunk,
                         Value shard) {
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
void lowerShardOfPack(ShardSliceOp op, BucketPackOp pack, int64_t maxCases) {
  OpBuilder b(op);
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
    op.replaceAllUsesWith(result);
    op.erase();
    if (pack->use_empty()) {
      SmallVector<Value> inputs = pack.getInputs();
      pack.erase();
      eraseReplacedConversions(inputs);
    }
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

void lowerOwnedBy(OwnedByOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value rank = rankOf(b, loc, op, op.getGroupAttr());
  Value isOwner = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::eq, rank,
      arith::ConstantIndexOp::create(b, loc, op.getOwner()));
  auto ifOp = scf::IfOp::create(b, loc, op.getResultTypes(), isOwner,
                                /*withElseRegion=*/true);
  // The body runs on the owner; the others keep the `otherwise` values.
  Block &then = ifOp.getThenRegion().front();
  then.getOperations().splice(then.end(), op.getBody().front().getOperations());
  auto yield = cast<YieldOp>(then.getTerminator());
  OpBuilder atYield(yield);
  scf::YieldOp::create(atYield, yield.getLoc(), yield.getValues());
  yield.erase();
  OpBuilder inElse = ifOp.getElseBodyBuilder();
  scf::YieldOp::create(inElse, loc, op.getOtherwise());
  op.replaceAllUsesWith(ifOp.getResults());
  op.erase();
}

/// Reduces every element of `tensor` into one scalar of `accType`:
/// acc = combine(acc, element) from `init`.
Value reduceAll(
    OpBuilder &b, Location loc, Value tensor, Value init,
    function_ref<Value(OpBuilder &, Location, Value, Value)> combine) {
  auto type = cast<RankedTensorType>(tensor.getType());
  auto accType = RankedTensorType::get({}, init.getType());
  Value acc =
      tensor::EmptyOp::create(b, loc, accType.getShape(), init.getType());
  acc = linalg::FillOp::create(b, loc, init, acc).getResult(0);
  SmallVector<AffineMap> maps = {
      b.getMultiDimIdentityMap(type.getRank()),
      AffineMap::get(type.getRank(), 0, b.getContext())};
  SmallVector<utils::IteratorType> iterators(type.getRank(),
                                             utils::IteratorType::reduction);
  auto reduction = linalg::GenericOp::create(
      b, loc, TypeRange{accType}, ValueRange{tensor}, ValueRange{acc}, maps,
      iterators, [&](OpBuilder &nb, Location nloc, ValueRange args) {
        linalg::YieldOp::create(nb, nloc, combine(nb, nloc, args[0], args[1]));
      });
  return tensor::ExtractOp::create(b, loc, reduction.getResult(0),
                                   ValueRange{});
}

/// `scalar` reduced over `group` (a one-element all_reduce).
Value allReduceScalar(OpBuilder &b, Location loc, Value scalar,
                      FlatSymbolRefAttr group, ReductionKind kind) {
  auto type = RankedTensorType::get({1}, scalar.getType());
  Value one = tensor::FromElementsOp::create(b, loc, type, scalar);
  Value reduced = AllReduceOp::create(
      b, loc, type, one, group, /*wire_type=*/nullptr,
      ReductionKindAttr::get(b.getContext(), kind), /*scale=*/nullptr);
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  return tensor::ExtractOp::create(b, loc, reduced, zero);
}

/// Every element of `tensor` times `factor` (an f32 or wider scalar),
/// computed in f32 for narrower types, as torch's kernels do.
Value scaleAll(OpBuilder &b, Location loc, Value tensor, Value factor) {
  auto type = cast<RankedTensorType>(tensor.getType());
  auto element = cast<FloatType>(type.getElementType());
  Type compute = element.getWidth() < 32 ? b.getF32Type() : Type(element);
  if (factor.getType() != compute)
    factor = cast<FloatType>(factor.getType()).getWidth() >
                     cast<FloatType>(compute).getWidth()
                 ? Value(arith::TruncFOp::create(b, loc, compute, factor))
                 : Value(arith::ExtFOp::create(b, loc, compute, factor));
  Value init = tensor::EmptyOp::create(b, loc, type.getShape(), element);
  AffineMap identity = b.getMultiDimIdentityMap(type.getRank());
  SmallVector<utils::IteratorType> iterators(type.getRank(),
                                             utils::IteratorType::parallel);
  return linalg::GenericOp::create(
             b, loc, TypeRange{type}, ValueRange{tensor}, ValueRange{init},
             SmallVector<AffineMap>{identity, identity}, iterators,
             [&](OpBuilder &nb, Location nloc, ValueRange args) {
               Value x = args[0];
               if (x.getType() != compute)
                 x = arith::ExtFOp::create(nb, nloc, compute, x);
               Value y = arith::MulFOp::create(nb, nloc, x, factor);
               if (y.getType() != element)
                 y = arith::TruncFOp::create(nb, nloc, element, y);
               linalg::YieldOp::create(nb, nloc, y);
             })
      .getResult(0);
}

Value widen(OpBuilder &b, Location loc, Value x, Type to) {
  return x.getType() == to ? x : Value(arith::ExtFOp::create(b, loc, to, x));
}

/// unscale: input * (1 / scale), the reciprocal taken once (GradScaler).
void lowerUnscale(UnscaleOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value one = arith::ConstantOp::create(
      b, loc, FloatAttr::get(op.getScale().getType(), 1.0));
  Value inverse = arith::DivFOp::create(b, loc, one, op.getScale());
  op.replaceAllUsesWith(scaleAll(b, loc, op.getInput(), inverse));
  op.erase();
}

/// all_finite: an AND over every element of every input (and, with a group,
/// over the ranks: a min of 0/1 across them).
void lowerAllFinite(AllFiniteOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value ok = arith::ConstantOp::create(b, loc, b.getBoolAttr(true));
  for (Value input : op.getInputs()) {
    Value finite = reduceAll(
        b, loc, input, ok, [](OpBuilder &nb, Location l, Value x, Value acc) {
          Value wide = widen(nb, l, x, nb.getF32Type());
          if (cast<FloatType>(x.getType()).getWidth() > 32)
            wide = x;
          Value isFinite = math::IsFiniteOp::create(nb, l, wide);
          return arith::AndIOp::create(nb, l, acc, isFinite).getResult();
        });
    ok = arith::AndIOp::create(b, loc, ok, finite);
  }
  if (FlatSymbolRefAttr group = op.getGroupAttr()) {
    Value asInt = arith::ExtUIOp::create(b, loc, b.getI32Type(), ok);
    Value agreed = allReduceScalar(b, loc, asInt, group, ReductionKind::Min);
    ok = arith::TruncIOp::create(b, loc, b.getI1Type(), agreed);
  }
  op.replaceAllUsesWith(ok);
  op.erase();
}

/// loss_scale_update, as torch's _amp_update_scale_.
void lowerLossScaleUpdate(LossScaleUpdateOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Type scaleType = op.getScale().getType();
  auto cst = [&](double v) {
    return arith::ConstantOp::create(b, loc, FloatAttr::get(scaleType, v));
  };
  auto i64 = [&](int64_t v) {
    return arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(v));
  };
  Value scale = op.getScale(), tracker = op.getGrowthTracker();
  Value successful = arith::AddIOp::create(b, loc, tracker, i64(1));
  Value grow = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                     successful, i64(op.getGrowthInterval()));
  Value grown = arith::MulFOp::create(
      b, loc, scale, cst(op.getGrowthFactor().convertToDouble()));
  Value growsFinite = arith::AndIOp::create(
      b, loc, grow, math::IsFiniteOp::create(b, loc, grown));
  Value finiteScale =
      arith::SelectOp::create(b, loc, growsFinite, grown, scale);
  Value finiteTracker =
      arith::SelectOp::create(b, loc, grow, i64(0), successful);
  Value backedOff = arith::MulFOp::create(
      b, loc, scale, cst(op.getBackoffFactor().convertToDouble()));
  Value newScale =
      arith::SelectOp::create(b, loc, op.getFinite(), finiteScale, backedOff);
  Value newTracker =
      arith::SelectOp::create(b, loc, op.getFinite(), finiteTracker, i64(0));
  op.replaceAllUsesWith(ValueRange{newScale, newTracker});
  op.erase();
}

/// clip_grad_norm, as torch.nn.utils.clip_grad_norm_: the p-norm of each
/// tensor (accumulated in f64, like torch's CPU reductions of f32, then
/// rounded to f32 as torch stacks them), the p-norm of those norms, and
/// every gradient times min(1, max_norm / (norm + 1e-6)). With a group the
/// inputs are shards: the p-th powers (or maxima) are combined across ranks
/// before the root is taken, so each element counts once.
void lowerClipGradNorm(ClipGradNormOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Type f64 = b.getF64Type(), f32 = b.getF32Type();
  double p = op.getNormType().convertToDouble();
  bool isInf = std::isinf(p);
  auto cst = [&](double v) {
    return arith::ConstantOp::create(b, loc, b.getF64FloatAttr(v));
  };
  Value zero = cst(0.0), pValue = cst(p), invP = cst(1.0 / p);
  // A per-tensor norm's contribution to the outer sum: |n|^p (or n).
  auto power = [&](OpBuilder &nb, Location l, Value x) -> Value {
    if (p == 2)
      return arith::MulFOp::create(nb, l, x, x);
    return math::PowFOp::create(nb, l, x, pValue);
  };
  Value outer = zero;
  for (Value input : op.getInputs()) {
    Value inner =
        reduceAll(b, loc, input, zero,
                  [&](OpBuilder &nb, Location l, Value x, Value acc) -> Value {
                    Value a = math::AbsFOp::create(nb, l, widen(nb, l, x, f64));
                    if (isInf)
                      return arith::MaximumFOp::create(nb, l, acc, a);
                    return arith::AddFOp::create(nb, l, acc, power(nb, l, a));
                  });
    // torch keeps each tensor's norm as an f32 tensor.
    Value norm =
        isInf ? inner : Value(math::PowFOp::create(b, loc, inner, invP));
    Value rounded = arith::TruncFOp::create(b, loc, f32, norm);
    norm = arith::ExtFOp::create(b, loc, f64, rounded);
    outer =
        isInf
            ? Value(arith::MaximumFOp::create(b, loc, outer, norm))
            : Value(arith::AddFOp::create(b, loc, outer, power(b, loc, norm)));
  }
  if (FlatSymbolRefAttr group = op.getGroupAttr())
    outer = allReduceScalar(b, loc, outer, group,
                            isInf ? ReductionKind::Max : ReductionKind::Sum);
  Value total =
      isInf ? outer : Value(math::PowFOp::create(b, loc, outer, invP));
  Value total32 = arith::TruncFOp::create(b, loc, f32, total);
  // clip_coef = max_norm / (total + 1e-6), clamped to 1, in f32.
  Value coef = arith::DivFOp::create(
      b, loc,
      arith::ConstantOp::create(
          b, loc, b.getF32FloatAttr(op.getMaxNorm().convertToDouble())),
      arith::AddFOp::create(
          b, loc, total32,
          arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1e-6))));
  Value clamped = arith::MinimumFOp::create(
      b, loc, coef, arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1.0)));
  SmallVector<Value> results;
  for (Value input : op.getInputs())
    results.push_back(scaleAll(b, loc, input, clamped));
  Value normResult = total32;
  Type normType = op.getTotalNorm().getType();
  if (normType != f32)
    normResult =
        cast<FloatType>(normType).getWidth() > 32
            ? Value(arith::ExtFOp::create(b, loc, normType, total32))
            : Value(arith::TruncFOp::create(b, loc, normType, total32));
  results.push_back(normResult);
  op.replaceAllUsesWith(results);
  op.erase();
}

/// Elementwise `combine(lhs, rhs)` of two tensors of one type, into a new
/// tensor, or written over `rhs` (destination-passing style: bufferization
/// then reuses rhs's buffer where its old value is not read afterwards, as
/// for state a step updates).
Value elementwise(
    OpBuilder &b, Location loc, Value lhs, Value rhs,
    function_ref<Value(OpBuilder &, Location, Value, Value)> combine,
    bool overRhs = false) {
  auto type = cast<RankedTensorType>(lhs.getType());
  AffineMap identity = b.getMultiDimIdentityMap(type.getRank());
  SmallVector<utils::IteratorType> iterators(type.getRank(),
                                             utils::IteratorType::parallel);
  SmallVector<Value> inputs = {lhs};
  Value init = rhs;
  if (!overRhs) {
    inputs.push_back(rhs);
    init =
        tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
  }
  // Either way the body sees lhs then rhs: inputs come before the init.
  return linalg::GenericOp::create(
             b, loc, TypeRange{type}, inputs, ValueRange{init},
             SmallVector<AffineMap>(inputs.size() + 1, identity), iterators,
             [&](OpBuilder &nb, Location nloc, ValueRange args) {
               linalg::YieldOp::create(nb, nloc,
                                       combine(nb, nloc, args[0], args[1]));
             })
      .getResult(0);
}

/// A matrix product: out = the sum over loop dimension `reduction` of
/// lhs * rhs, operands and result indexed by their maps over three loop
/// dimensions (transposes are maps). Loops nest in dimension order, d0
/// outermost: the order decides the memory walk, and the innermost loop
/// should run along contiguous rows. When it is the sum itself (a dot
/// product), `reassociate` lets LLVM vectorize it, rounding differently.
Value contract(OpBuilder &b, Location loc, Value lhs, Value rhs,
               AffineMap lhsMap, AffineMap rhsMap, AffineMap outMap,
               unsigned reduction, ArrayRef<int64_t> shape,
               bool reassociate = false) {
  auto element =
      cast<FloatType>(cast<RankedTensorType>(lhs.getType()).getElementType());
  // Half types accumulate in f32, as torch's CPU matmul does.
  Type acc = element.getWidth() < 32 ? b.getF32Type() : Type(element);
  Value init = tensor::EmptyOp::create(b, loc, shape, acc);
  Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(acc));
  init = linalg::FillOp::create(b, loc, zero, init).getResult(0);
  SmallVector<utils::IteratorType> iterators(3, utils::IteratorType::parallel);
  iterators[reduction] = utils::IteratorType::reduction;
  arith::FastMathFlags flags =
      reassociate ? arith::FastMathFlags::reassoc : arith::FastMathFlags::none;
  Value product = linalg::GenericOp::create(
                      b, loc, TypeRange{init.getType()}, ValueRange{lhs, rhs},
                      ValueRange{init},
                      SmallVector<AffineMap>{lhsMap, rhsMap, outMap}, iterators,
                      [&](OpBuilder &nb, Location nloc, ValueRange args) {
                        Value x = widen(nb, nloc, args[0], acc);
                        Value y = widen(nb, nloc, args[1], acc);
                        Value xy = arith::MulFOp::create(nb, nloc, x, y);
                        linalg::YieldOp::create(
                            nb, nloc,
                            arith::AddFOp::create(nb, nloc, args[2], xy, flags)
                                .getResult());
                      })
                      .getResult(0);
  if (acc == element)
    return product;
  return arith::TruncFOp::create(b, loc, RankedTensorType::get(shape, element),
                                 product);
}

AffineMap dims(OpBuilder &b, unsigned row, unsigned col) {
  MLIRContext *ctx = b.getContext();
  return AffineMap::get(
      3, 0, {getAffineDimExpr(row, ctx), getAffineDimExpr(col, ctx)}, ctx);
}

/// Modified Gram-Schmidt, left to right, as the PowerSGD hook's
/// _orthogonalize_gram_schmidt: column i /= (its 2-norm [+ epsilon]); every
/// later column c -= (column c . column i) * column i. The rank is small and
/// static, so the columns are unrolled; each step rewrites the whole matrix
/// (no strided column slices). Norms accumulate in f64 (torch's CPU norm of
/// f32), dot products in f32 or the element type if wider.
Value orthogonalize(OpBuilder &b, Location loc, Value matrix, double epsilon) {
  auto type = cast<RankedTensorType>(matrix.getType());
  auto element = cast<FloatType>(type.getElementType());
  Type f64 = b.getF64Type();
  int64_t rank = type.getDimSize(1);
  MLIRContext *ctx = b.getContext();
  auto parallel = utils::IteratorType::parallel;
  auto reduction = utils::IteratorType::reduction;
  AffineExpr d0 = getAffineDimExpr(0, ctx), d1 = getAffineDimExpr(1, ctx);
  auto filled = [&](ArrayRef<int64_t> shape, Type t) -> Value {
    Value empty = tensor::EmptyOp::create(b, loc, shape, t);
    Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(t));
    return linalg::FillOp::create(b, loc, zero, empty).getResult(0);
  };
  for (int64_t i = 0; i < rank; ++i) {
    AffineExpr col = getAffineConstantExpr(i, ctx);
    // The norm of column i: rows -> scalar.
    Value sumSq =
        linalg::GenericOp::create(
            b, loc, TypeRange{RankedTensorType::get({}, f64)},
            ValueRange{matrix}, ValueRange{filled({}, f64)},
            SmallVector<AffineMap>{AffineMap::get(1, 0, {d0, col}, ctx),
                                   AffineMap::get(1, 0, {}, ctx)},
            SmallVector<utils::IteratorType>{reduction},
            [&](OpBuilder &nb, Location l, ValueRange args) {
              Value w = widen(nb, l, args[0], f64);
              Value sq = arith::MulFOp::create(nb, l, w, w);
              linalg::YieldOp::create(
                  nb, l, arith::AddFOp::create(nb, l, args[1], sq).getResult());
            })
            .getResult(0);
    Value norm = math::SqrtOp::create(
        b, loc, tensor::ExtractOp::create(b, loc, sumSq, ValueRange{}));
    if (element.getWidth() < 64)
      norm = arith::TruncFOp::create(b, loc, element, norm);
    if (epsilon > 0)
      norm = arith::AddFOp::create(
          b, loc, norm,
          arith::ConstantOp::create(b, loc, FloatAttr::get(element, epsilon)));
    // dots(c) = sum over rows r of (m(r, i) / norm) * m(r, c): (c, r);
    // the products rounded to the element type, summed in f32 or wider.
    Type acc = element.getWidth() < 32 ? b.getF32Type() : Type(element);
    Value dots =
        linalg::GenericOp::create(
            b, loc, TypeRange{RankedTensorType::get({rank}, acc)},
            ValueRange{matrix, matrix}, ValueRange{filled({rank}, acc)},
            SmallVector<AffineMap>{AffineMap::get(2, 0, {d1, col}, ctx),
                                   AffineMap::get(2, 0, {d1, d0}, ctx),
                                   AffineMap::get(2, 0, {d0}, ctx)},
            SmallVector<utils::IteratorType>{parallel, reduction},
            [&](OpBuilder &nb, Location l, ValueRange args) {
              Value unit = arith::DivFOp::create(nb, l, args[0], norm);
              Value product = arith::MulFOp::create(nb, l, unit, args[1]);
              linalg::YieldOp::create(
                  nb, l,
                  arith::AddFOp::create(nb, l, args[2],
                                        widen(nb, l, product, acc))
                      .getResult());
            })
            .getResult(0);
    if (acc != element)
      dots = arith::TruncFOp::create(
          b, loc, RankedTensorType::get({rank}, element), dots);
    // Column i normalised, later columns projected out, earlier ones kept.
    AffineMap identity = b.getMultiDimIdentityMap(2);
    matrix =
        linalg::GenericOp::create(
            b, loc, TypeRange{type}, ValueRange{matrix, matrix, dots},
            ValueRange{
                tensor::EmptyOp::create(b, loc, type.getShape(), element)},
            SmallVector<AffineMap>{identity,
                                   AffineMap::get(2, 0, {d0, col}, ctx),
                                   AffineMap::get(2, 0, {d1}, ctx), identity},
            SmallVector<utils::IteratorType>{parallel, parallel},
            [&](OpBuilder &nb, Location l, ValueRange args) {
              Value c = linalg::IndexOp::create(nb, l, 1);
              Value ci = arith::ConstantIndexOp::create(nb, l, i);
              Value unit = arith::DivFOp::create(nb, l, args[1], norm);
              Value projected = arith::SubFOp::create(
                  nb, l, args[0], arith::MulFOp::create(nb, l, args[2], unit));
              Value isCol =
                  arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, c, ci);
              Value isLater = arith::CmpIOp::create(
                  nb, l, arith::CmpIPredicate::sgt, c, ci);
              Value later =
                  arith::SelectOp::create(nb, l, isLater, projected, args[0]);
              linalg::YieldOp::create(
                  nb, l,
                  arith::SelectOp::create(nb, l, isCol, unit, later)
                      .getResult());
            })
            .getResult(0);
  }
  return matrix;
}

void lowerOrthogonalize(OrthogonalizeOp op) {
  OpBuilder b(op);
  op.replaceAllUsesWith(orthogonalize(b, op.getLoc(), op.getInput(),
                                      op.getEpsilon().convertToDouble()));
  op.erase();
}

/// A matrix transposed (PowerSGD's small factors), into `init` if given.
Value transpose(OpBuilder &b, Location loc, Value matrix, Value init = {}) {
  auto type = cast<RankedTensorType>(matrix.getType());
  if (!init)
    init = tensor::EmptyOp::create(b, loc,
                                   {type.getDimSize(1), type.getDimSize(0)},
                                   type.getElementType());
  return linalg::TransposeOp::create(b, loc, matrix, init,
                                     ArrayRef<int64_t>{1, 0})
      .getResult()[0];
}

/// PowerSGD's approximation R = P Q'^T (n x r times r x m, Q'^T given) and,
/// given M, the new error E = M - R, in one pass over the n x m elements:
/// each R[i, j] sums p[i, l] * qT[l, j] over l in order from zero, as a
/// contraction would (the rank is small and static: one input per column),
/// and is rounded to the element type before E is taken. E is written over
/// M, and R over `rInit` if given, so that they can take those buffers.
SmallVector<Value> approximate(OpBuilder &b, Location loc, Value p, Value qT,
                               Value m, RankedTensorType type, Value rInit) {
  auto element = cast<FloatType>(type.getElementType());
  Type acc = element.getWidth() < 32 ? b.getF32Type() : Type(element);
  int64_t rank = cast<RankedTensorType>(p.getType()).getDimSize(1);
  MLIRContext *ctx = b.getContext();
  AffineExpr i = getAffineDimExpr(0, ctx), j = getAffineDimExpr(1, ctx);
  SmallVector<Value> inputs;
  SmallVector<AffineMap> maps;
  for (int64_t l = 0; l < rank; ++l) {
    AffineExpr column = getAffineConstantExpr(l, ctx);
    inputs.append({p, qT});
    maps.push_back(AffineMap::get(2, 0, {i, column}, ctx));
    maps.push_back(AffineMap::get(2, 0, {column, j}, ctx));
  }
  AffineMap identity = b.getMultiDimIdentityMap(2);
  SmallVector<Value> outputs = {
      rInit ? rInit
            : Value(tensor::EmptyOp::create(b, loc, type.getShape(), element))};
  if (m)
    outputs.push_back(m);
  maps.append(outputs.size(), identity);
  auto generic = linalg::GenericOp::create(
      b, loc, ValueRange(outputs).getTypes(), inputs, outputs, maps,
      SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel),
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value sum = arith::ConstantOp::create(nb, nloc, nb.getZeroAttr(acc));
        for (int64_t l = 0; l < rank; ++l) {
          Value x = widen(nb, nloc, args[2 * l], acc);
          Value y = widen(nb, nloc, args[2 * l + 1], acc);
          sum = arith::AddFOp::create(nb, nloc, sum,
                                      arith::MulFOp::create(nb, nloc, x, y));
        }
        Value r = sum;
        if (acc != element)
          r = arith::TruncFOp::create(nb, nloc, element, sum);
        SmallVector<Value> yields = {r};
        if (m) // M, read as the second output's current value
          yields.push_back(
              arith::SubFOp::create(nb, nloc, args[2 * rank + 1], r));
        linalg::YieldOp::create(nb, nloc, yields);
      });
  return SmallVector<Value>(generic.getResults());
}

/// The powersgd_all_reduce ops of a batch as their description (and the
/// hook) computes them: every member's first product, the P factors summed
/// in one all_reduce, every member's second product, the Q factors averaged
/// in one all_reduce, then every member's approximation. Packing the small
/// factors costs a copy of (n + m) r elements; a collective per tensor costs
/// the link's latency twice per tensor. The members are left without uses,
/// for the caller to erase.
void lowerPowerSGD(PowerSGDBatch &batch) {
  OpBuilder b(batch.insertBefore);
  Location loc = batch.members.size() == 1
                     ? batch.members.front().getLoc()
                     : b.getFusedLoc(llvm::map_to_vector(
                           batch.members,
                           [](PowerSGDAllReduceOp op) { return op.getLoc(); }));
  PowerSGDAllReduceOp first = batch.members.front();
  // All-reduces the factors, packed into one bucket when there are several
  // (1-D, no padding needed: the alignment is one element).
  auto allReduce = [&](ArrayRef<Value> factors,
                       ReductionKind kind) -> SmallVector<Value> {
    auto reduce = [&](Value value) -> Value {
      return AllReduceOp::create(b, loc, value.getType(), value,
                                 first.getGroupAttr(), /*wire_type=*/nullptr,
                                 ReductionKindAttr::get(b.getContext(), kind),
                                 /*scale=*/nullptr);
    };
    if (factors.size() == 1)
      return {reduce(factors.front())};
    auto element =
        cast<RankedTensorType>(factors.front().getType()).getElementType();
    int64_t alignment = llvm::divideCeil(element.getIntOrFloatBitWidth(), 8);
    int64_t total;
    computeBucketOffsets(ValueRange(factors).getTypes(), alignment, &total);
    auto pack =
        BucketPackOp::create(b, loc, RankedTensorType::get({total}, element),
                             factors, b.getI64IntegerAttr(alignment));
    auto unpack =
        BucketUnpackOp::create(b, loc, ValueRange(factors).getTypes(),
                               reduce(pack), b.getI64IntegerAttr(alignment));
    lowerPack(pack);
    return lowerUnpack(unpack);
  };

  // Loops (i, j, k) for M (n x m, row i), P (n x r), Q^T (r x m): every
  // product walks M's rows, and Q is used transposed (small: m x r) so that
  // its columns are contiguous like M's rows.
  struct Member {
    Value m, error, rInit, qInit;
  };
  SmallVector<Member> members;
  SmallVector<Value> ps;
  for (PowerSGDAllReduceOp op : batch.members) {
    double epsilon = op.getOrthogonalizationEpsilon().convertToDouble();
    // M = G + E is written over E, the new error over M and R over G, each
    // where nothing else reads the old value: state and gradients then keep
    // their buffers from step to step (in place).
    Member &member = members.emplace_back();
    member.m = op.getGrad();
    member.error = op.getError();
    member.rInit = member.m.hasOneUse() ? member.m : Value();
    member.qInit = op.getQ().hasOneUse() ? op.getQ() : Value();
    if (member.error)
      member.m = elementwise(
          b, loc, member.m, member.error,
          [](OpBuilder &nb, Location l, Value g, Value e) -> Value {
            return arith::AddFOp::create(nb, l, g, e);
          },
          /*overRhs=*/member.error.hasOneUse());
    Value qT = transpose(b, loc, orthogonalize(b, loc, op.getQ(), epsilon));
    // P = M Q, summed (its scale is removed by the orthogonalization): dot
    // products of rows, vectorized.
    ps.push_back(contract(b, loc, member.m, qT, dims(b, 0, 2), dims(b, 1, 2),
                          dims(b, 0, 1), /*reduction=*/2,
                          op.getP().getType().getShape(),
                          /*reassociate=*/true));
  }
  ps = allReduce(ps, ReductionKind::Sum);
  SmallVector<Value> qTs;
  for (auto [op, member, p] : llvm::zip_equal(batch.members, members, ps)) {
    p = orthogonalize(b, loc, p,
                      op.getOrthogonalizationEpsilon().convertToDouble());
    // Q'^T = (M^T P)^T, averaged: row i of M scaled into each row of Q'^T,
    // rows in order.
    ArrayRef<int64_t> qShape = op.getQ().getType().getShape();
    qTs.push_back(contract(b, loc, member.m, p, dims(b, 0, 2), dims(b, 0, 1),
                           dims(b, 1, 2), /*reduction=*/0,
                           {qShape[1], qShape[0]}));
  }
  qTs = allReduce(qTs, ReductionKind::Avg);
  for (auto [op, member, p, qT] :
       llvm::zip_equal(batch.members, members, ps, qTs)) {
    // R = P Q'^T and the new error M - R, one pass.
    SmallVector<Value> approximation = approximate(
        b, loc, p, qT, member.error ? member.m : Value(),
        cast<RankedTensorType>(op.getGrad().getType()), member.rInit);
    SmallVector<Value> results = {approximation[0], p,
                                  transpose(b, loc, qT, member.qInit)};
    if (member.error)
      results.push_back(approximation[1]);
    op.replaceAllUsesWith(results);
  }
}

/// topk_all_reduce: A = G + E; the k entries of largest |A| (ties: lower
/// index first) are found without sorting: the k-th largest magnitude T is
/// built bit by bit from the top (|x|'s bits order like its value; a count
/// per bit), then one pass in index order takes every |a| > T and the first
/// of those equal to T. Each rank's (value, index) pairs are all-gathered
/// and added into a dense zero tensor in rank order, so every rank sums in
/// the same order; E' = A with the sent entries zeroed.
void lowerTopK(TopKAllReduceOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  auto type = cast<RankedTensorType>(op.getGrad().getType());
  auto element = cast<FloatType>(type.getElementType());
  unsigned width = element.getWidth();
  Type bits = b.getIntegerType(width);
  Type i64 = b.getI64Type();
  int64_t n = type.getNumElements();
  int64_t k =
      std::max<int64_t>(1, static_cast<int64_t>(std::ceil(
                               op.getDensity().convertToDouble() * double(n))));
  k = std::min(k, n);
  int64_t ranks = lookupProcessGroup(op, op.getGroupAttr()).getSize();
  auto index = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(b, loc, v);
  };
  auto intConst = [&](Type t, int64_t v) -> Value {
    return arith::ConstantOp::create(b, loc, b.getIntegerAttr(t, v));
  };

  Value a = flatten(
      b, loc,
      elementwise(b, loc, op.getGrad(), op.getError(),
                  [](OpBuilder &nb, Location l, Value x, Value y) {
                    return arith::AddFOp::create(nb, l, x, y).getResult();
                  }));
  auto flatType = cast<RankedTensorType>(a.getType());
  // |a| as an unsigned integer: the bits order like the magnitudes.
  auto magType = RankedTensorType::get({n}, bits);
  AffineMap identity = b.getMultiDimIdentityMap(1);
  Value magnitude =
      linalg::GenericOp::create(
          b, loc, TypeRange{magType}, ValueRange{a},
          ValueRange{tensor::EmptyOp::create(b, loc, {n}, bits)},
          SmallVector<AffineMap>{identity, identity},
          SmallVector<utils::IteratorType>{utils::IteratorType::parallel},
          [&](OpBuilder &nb, Location l, ValueRange args) {
            Value abs = math::AbsFOp::create(nb, l, args[0]);
            linalg::YieldOp::create(
                nb, l, arith::BitcastOp::create(nb, l, bits, abs).getResult());
          })
          .getResult(0);
  // How many magnitudes satisfy `predicate` against `bound`.
  auto count = [&](OpBuilder &ob, Location l, Value bound,
                   arith::CmpIPredicate predicate) -> Value {
    return reduceAll(
        ob, l, magnitude,
        arith::ConstantOp::create(ob, l, ob.getI64IntegerAttr(0)),
        [&](OpBuilder &nb, Location il, Value m, Value acc) {
          Value hit = arith::CmpIOp::create(nb, il, predicate, m, bound);
          Value one = arith::ExtUIOp::create(nb, il, i64, hit);
          return arith::AddIOp::create(nb, il, acc, one).getResult();
        });
  };
  Value kValue = intConst(i64, k);
  // T: the largest bit pattern with at least k magnitudes >= it, from the
  // top bit below the sign down.
  auto search = scf::ForOp::create(
      b, loc, index(0), index(width - 1), index(1),
      ValueRange{intConst(bits, 0)},
      [&](OpBuilder &nb, Location l, Value iv, ValueRange iter) {
        Value shift = arith::SubIOp::create(
            nb, l,
            arith::ConstantOp::create(nb, l,
                                      nb.getIntegerAttr(bits, width - 2)),
            arith::IndexCastOp::create(nb, l, bits, iv));
        Value bit = arith::ShLIOp::create(
            nb, l, arith::ConstantOp::create(nb, l, nb.getIntegerAttr(bits, 1)),
            shift);
        Value candidate = arith::OrIOp::create(nb, l, iter[0], bit);
        Value atLeast = count(nb, l, candidate, arith::CmpIPredicate::uge);
        Value enough = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sge,
                                             atLeast, kValue);
        scf::YieldOp::create(nb, l,
                             ValueRange{arith::SelectOp::create(
                                 nb, l, enough, candidate, iter[0])});
      });
  Value threshold = search.getResult(0);
  Value equalWanted = arith::SubIOp::create(
      b, loc, kValue, count(b, loc, threshold, arith::CmpIPredicate::ugt));

  // One pass in index order: the sent values and indices, and E'.
  Value values = tensor::EmptyOp::create(b, loc, {k}, element);
  Value indices = tensor::EmptyOp::create(b, loc, {k}, i64);
  Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(element));
  auto select = scf::ForOp::create(
      b, loc, index(0), index(n), index(1),
      ValueRange{values, indices, a, intConst(i64, 0), intConst(i64, 0)},
      [&](OpBuilder &nb, Location l, Value iv, ValueRange iter) {
        Value x = tensor::ExtractOp::create(nb, l, a, iv);
        Value m = tensor::ExtractOp::create(nb, l, magnitude, iv);
        Value taken = iter[3], equalTaken = iter[4];
        Value greater = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ugt,
                                              m, threshold);
        Value equal = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, m,
                                            threshold);
        Value room = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::slt,
                                           equalTaken, equalWanted);
        Value takeEqual = arith::AndIOp::create(nb, l, equal, room);
        Value take = arith::OrIOp::create(nb, l, greater, takeEqual);
        // Writes always go to a valid slot; a skipped entry rewrites the
        // slot's current content.
        Value slot = arith::IndexCastOp::create(
            nb, l, nb.getIndexType(),
            arith::MinSIOp::create(
                nb, l, taken,
                arith::ConstantOp::create(nb, l, nb.getI64IntegerAttr(k - 1))));
        Value oldValue = tensor::ExtractOp::create(nb, l, iter[0], slot);
        Value oldIndex = tensor::ExtractOp::create(nb, l, iter[1], slot);
        Value i = arith::IndexCastOp::create(nb, l, i64, iv);
        Value newValues = tensor::InsertOp::create(
            nb, l, arith::SelectOp::create(nb, l, take, x, oldValue), iter[0],
            slot);
        Value newIndices = tensor::InsertOp::create(
            nb, l, arith::SelectOp::create(nb, l, take, i, oldIndex), iter[1],
            slot);
        Value error = tensor::InsertOp::create(
            nb, l, arith::SelectOp::create(nb, l, take, zero, x), iter[2], iv);
        Value one = arith::ConstantOp::create(nb, l, nb.getI64IntegerAttr(1));
        Value none = arith::ConstantOp::create(nb, l, nb.getI64IntegerAttr(0));
        Value newTaken = arith::AddIOp::create(
            nb, l, taken, arith::SelectOp::create(nb, l, take, one, none));
        Value newEqualTaken = arith::AddIOp::create(
            nb, l, equalTaken,
            arith::SelectOp::create(nb, l, takeEqual, one, none));
        scf::YieldOp::create(
            nb, l,
            ValueRange{newValues, newIndices, error, newTaken, newEqualTaken});
      });

  // Every rank's pairs, added into zeros in rank order.
  FlatSymbolRefAttr group = op.getGroupAttr();
  auto gather = [&](Value v, Type t) -> Value {
    return AllGatherOp::create(b, loc, RankedTensorType::get({ranks * k}, t), v,
                               group, /*wire_type=*/nullptr);
  };
  Value allValues = gather(select.getResult(0), element);
  Value allIndices = gather(select.getResult(1), i64);
  Value dense =
      linalg::FillOp::create(
          b, loc, zero, Value(tensor::EmptyOp::create(b, loc, {n}, element)))
          .getResult(0);
  ReductionKind kind = op.getReduction();
  Value scale;
  if (kind == ReductionKind::PremulSum)
    scale = arith::ConstantOp::create(
        b, loc, FloatAttr::get(element, op.getScale()->convertToDouble()));
  auto scatter = scf::ForOp::create(
      b, loc, index(0), index(ranks * k), index(1), ValueRange{dense},
      [&](OpBuilder &nb, Location l, Value iv, ValueRange iter) {
        Value v = tensor::ExtractOp::create(nb, l, allValues, iv);
        if (scale)
          v = arith::MulFOp::create(nb, l, v, scale);
        Value at = arith::IndexCastOp::create(
            nb, l, nb.getIndexType(),
            tensor::ExtractOp::create(nb, l, allIndices, iv));
        Value sum = arith::AddFOp::create(
            nb, l, tensor::ExtractOp::create(nb, l, iter[0], at), v);
        scf::YieldOp::create(
            nb, l,
            ValueRange{tensor::InsertOp::create(nb, l, sum, iter[0], at)});
      });
  Value result = scatter.getResult(0);
  if (kind == ReductionKind::Avg) {
    Value size = arith::ConstantOp::create(
        b, loc, FloatAttr::get(element, double(ranks)));
    result = elementwise(
        b, loc, result, tensor::SplatOp::create(b, loc, flatType, size),
        [](OpBuilder &nb, Location l, Value x, Value y) {
          return arith::DivFOp::create(nb, l, x, y).getResult();
        });
  }
  op.replaceAllUsesWith(
      ValueRange{unflatten(b, loc, result, type),
                 unflatten(b, loc, select.getResult(2), type)});
  op.erase();
}

struct LowerLocalOpsPass
    : public distopt::impl::LowerLocalOpsPassBase<LowerLocalOpsPass> {
  using LowerLocalOpsPassBase::LowerLocalOpsPassBase;
  void runOnOperation() override {
    bool ok = true;
    SmallVector<Operation *> ops;
    llvm::SetVector<Block *> powerSGDBlocks;
    // The runtime's communicator is the world: a group of another size
    // would fail at run time with a misleading world-size mismatch.
    int64_t world = 0;
    if (auto attr = getOperation()->getAttrOfType<IntegerAttr>(abi::kWorldSize))
      world = attr.getInt();
    else
      getOperation().walk([&](ProcessGroupOp group) {
        world = std::max<int64_t>(world, group.getSize());
      });
    getOperation().walk<WalkOrder::PreOrder>([&](Operation *op) {
      if (auto groupRef = op->getAttrOfType<FlatSymbolRefAttr>("group")) {
        ProcessGroupOp group = lookupProcessGroup(op, groupRef);
        if (group && group.getSize() != world) {
          op->emitError() << "process group " << groupRef << " has "
                          << group.getSize() << " ranks but the world has "
                          << world
                          << ": the CPU lowering runs every collective on "
                             "the world (sub-groups are not supported yet)";
          ok = false;
        }
      }
      if (isa<SGDUpdateOp, AdamUpdateOp, AdamWUpdateOp, RMSpropUpdateOp,
              AdagradUpdateOp>(op)) {
        op->emitError() << "'" << op->getName()
                        << "' must be lowered by --distopt-lower-optimizers "
                           "first";
        ok = false;
      }
      if (isa<RankOp, GroupSizeOp, ShardSliceOp, OwnedByOp, BucketPackOp,
              BucketUnpackOp, UnscaleOp, AllFiniteOp, LossScaleUpdateOp,
              ClipGradNormOp, OrthogonalizeOp, TopKAllReduceOp>(op))
        ops.push_back(op);
      if (isa<PowerSGDAllReduceOp>(op))
        powerSGDBlocks.insert(op->getBlock());
    });
    if (!ok)
      return signalPassFailure();
    // The step ABI hands parameter, state and gradient buffers to the step
    // to update in place (docs/step-abi.md): without this, bufferization
    // treats them as read-only and copies them every step.
    getOperation().walk([](func::FuncOp func) {
      for (unsigned i = 0; i < func.getNumArguments(); ++i) {
        if (isa<TensorType>(func.getArgumentTypes()[i]) &&
            abi::mayUpdateInPlace(abi::getArgRole(func, i)))
          func.setArgAttr(i, "bufferization.writable",
                          BoolAttr::get(func.getContext(), true));
      }
    });
    // Groups become private so that symbol-dce drops them once the
    // collectives referring to them have become runtime calls.
    getOperation().walk([](ProcessGroupOp group) {
      SymbolTable::setSymbolVisibility(group, SymbolTable::Visibility::Private);
    });
    // PowerSGD in batches, each block's at once (its factors all-reduced
    // together); before the packs its results may go into.
    for (Block *block : powerSGDBlocks) {
      SmallVector<PowerSGDBatch> batches = batchPowerSGD(*block);
      for (PowerSGDBatch &batch : batches)
        lowerPowerSGD(batch);
      // Erased only now: a batch may be placed before another's member.
      for (PowerSGDBatch &batch : batches)
        for (PowerSGDAllReduceOp op : batch.members)
          op.erase();
    }
    // A shard of a pack is built directly (before the pack is lowered).
    llvm::SmallPtrSet<Operation *, 16> lowered;
    for (Operation *op : ops) {
      auto slice = dyn_cast<ShardSliceOp>(op);
      auto pack = slice ? slice.getInput().getDefiningOp<BucketPackOp>()
                        : BucketPackOp();
      if (!pack || lowered.contains(pack))
        continue;
      lowered.insert(slice);
      bool onlyUse = pack->hasOneUse();
      lowerShardOfPack(slice, pack, maxShardCases);
      if (onlyUse)
        lowered.insert(pack);
    }
    // Pre-order: an owned_by is lowered (its body moved) before its body's
    // ops, which are then lowered where they moved to.
    for (Operation *op : ops) {
      if (lowered.contains(op))
        continue;
      if (auto pack = dyn_cast<BucketPackOp>(op))
        lowerPack(pack);
      else if (auto unpack = dyn_cast<BucketUnpackOp>(op))
        lowerUnpack(unpack);
      else if (auto slice = dyn_cast<ShardSliceOp>(op))
        lowerShardSlice(slice);
      else if (auto owned = dyn_cast<OwnedByOp>(op))
        lowerOwnedBy(owned);
      else if (auto unscale = dyn_cast<UnscaleOp>(op))
        lowerUnscale(unscale);
      else if (auto finite = dyn_cast<AllFiniteOp>(op))
        lowerAllFinite(finite);
      else if (auto update = dyn_cast<LossScaleUpdateOp>(op))
        lowerLossScaleUpdate(update);
      else if (auto clip = dyn_cast<ClipGradNormOp>(op))
        lowerClipGradNorm(clip);
      else if (auto orthogonal = dyn_cast<OrthogonalizeOp>(op))
        lowerOrthogonalize(orthogonal);
      else if (auto topK = dyn_cast<TopKAllReduceOp>(op))
        lowerTopK(topK);
      else if (auto size = dyn_cast<GroupSizeOp>(op)) {
        OpBuilder b(size);
        size.replaceAllUsesWith(
            arith::ConstantIndexOp::create(
                b, size.getLoc(),
                lookupProcessGroup(size, size.getGroupAttr()).getSize())
                .getResult());
        size.erase();
      } else {
        auto rank = cast<RankOp>(op);
        OpBuilder b(rank);
        rank.replaceAllUsesWith(
            rankOf(b, rank.getLoc(), rank, rank.getGroupAttr()));
        rank.erase();
      }
    }
  }
};

} // namespace
