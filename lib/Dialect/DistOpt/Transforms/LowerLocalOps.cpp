//===- LowerLocalOps.cpp - the ops that do not communicate ------*- C++ -*-===//
//
// --distopt-lower-local-ops: buckets become slices of one tensor (padding
// filled with zeros, data copied once), shard_slice a slice at this rank's
// offset, owned_by an scf.if on the rank, rank a runtime call. Collectives
// stay for bufferization (BufferizableOpInterfaceImpl.cpp); ops the CPU
// lowering does not handle yet are reported, not passed through.
//
//===----------------------------------------------------------------------===//

#include "RuntimeCalls.h"
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Dialect/DistOpt/Transforms/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"

#include <cmath>

namespace mlir::distopt {
#define GEN_PASS_DEF_LOWERLOCALOPSPASS
#define GEN_PASS_DEF_MARKINPLACERESULTSPASS
#include "distopt/Dialect/DistOpt/Transforms/Passes.h.inc"
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

void lowerPack(BucketPackOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  auto bucketType = op.getBucket().getType();
  Type element = bucketType.getElementType();
  int64_t packed;
  SmallVector<int64_t> offsets = op.getOffsets(&packed);
  Value bucket =
      tensor::EmptyOp::create(b, loc, bucketType.getShape(), element);
  // Zeros only where no tensor goes (alignment gaps and the tail).
  auto zeros = [&](int64_t begin, int64_t end) {
    if (end <= begin)
      return;
    auto gapType = RankedTensorType::get({end - begin}, element);
    Value zero =
        arith::ConstantOp::create(b, loc,
                                  cast<TypedAttr>(DenseElementsAttr::get(
                                      gapType, b.getZeroAttr(element))));
    bucket = tensor::InsertSliceOp::create(
        b, loc, zero, bucket, ArrayRef<OpFoldResult>{b.getIndexAttr(begin)},
        ArrayRef<OpFoldResult>{b.getIndexAttr(end - begin)},
        ArrayRef<OpFoldResult>{b.getIndexAttr(1)});
  };
  int64_t end = 0;
  for (auto [input, offset] : llvm::zip_equal(op.getInputs(), offsets)) {
    zeros(end, offset);
    int64_t size = cast<RankedTensorType>(input.getType()).getNumElements();
    bucket = tensor::InsertSliceOp::create(
        b, loc, flatten(b, loc, input), bucket,
        ArrayRef<OpFoldResult>{b.getIndexAttr(offset)},
        ArrayRef<OpFoldResult>{b.getIndexAttr(size)},
        ArrayRef<OpFoldResult>{b.getIndexAttr(1)});
    end = offset + size;
  }
  zeros(end, bucketType.getNumElements());
  op.replaceAllUsesWith(bucket);
  op.erase();
}

void lowerUnpack(BucketUnpackOp op) {
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

struct LowerLocalOpsPass
    : public distopt::impl::LowerLocalOpsPassBase<LowerLocalOpsPass> {
  void runOnOperation() override {
    bool ok = true;
    SmallVector<Operation *> ops;
    getOperation().walk<WalkOrder::PreOrder>([&](Operation *op) {
      if (isa<PowerSGDAllReduceOp, OrthogonalizeOp, TopKAllReduceOp>(op)) {
        op->emitError() << "'" << op->getName()
                        << "' is not lowered to CPU code yet";
        ok = false;
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
              ClipGradNormOp>(op))
        ops.push_back(op);
    });
    if (!ok)
      return signalPassFailure();
    // The step ABI hands parameter, state and gradient buffers to the step
    // to update in place (docs/step-abi.md): without this, bufferization
    // treats them as read-only and copies them every step.
    getOperation().walk([](func::FuncOp func) {
      for (unsigned i = 0; i < func.getNumArguments(); ++i) {
        StringRef role = abi::getArgRole(func, i);
        if (isa<TensorType>(func.getArgumentTypes()[i]) &&
            (role == abi::kParam || role == abi::kMainParam ||
             role == abi::kState || role == abi::kGrad))
          func.setArgAttr(i, "bufferization.writable",
                          BoolAttr::get(func.getContext(), true));
      }
    });
    // Groups become private so that symbol-dce drops them once the
    // collectives referring to them have become runtime calls.
    getOperation().walk([](ProcessGroupOp group) {
      SymbolTable::setSymbolVisibility(group, SymbolTable::Visibility::Private);
    });
    // Pre-order: an owned_by is lowered (its body moved) before its body's
    // ops, which are then lowered where they moved to.
    for (Operation *op : ops) {
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

namespace {
struct MarkInPlaceResultsPass
    : public distopt::impl::MarkInPlaceResultsPassBase<MarkInPlaceResultsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    module.walk([&](func::FuncOp func) {
      // A function that is called keeps its results: its callers use them.
      if (func.isExternal() || !SymbolTable::symbolKnownUseEmpty(func, module))
        return;
      if (!func.getBody().hasOneBlock())
        return;
      auto ret =
          dyn_cast<func::ReturnOp>(func.getBody().front().getTerminator());
      if (!ret)
        return;
      SmallVector<int64_t> inPlace;
      llvm::BitVector dropped(ret.getNumOperands());
      for (OpOperand &operand : ret->getOpOperands()) {
        Value value = operand.get();
        while (auto cast = value.getDefiningOp<memref::CastOp>())
          value = cast.getSource();
        auto arg = dyn_cast<BlockArgument>(value);
        bool isArg = arg && isa<BaseMemRefType>(arg.getType());
        inPlace.push_back(isArg ? static_cast<int64_t>(arg.getArgNumber())
                                : int64_t{-1});
        if (isArg)
          dropped.set(operand.getOperandNumber());
      }
      func->setAttr("distopt.in_place_results",
                    DenseI64ArrayAttr::get(func.getContext(), inPlace));
      ret->eraseOperands(dropped);
      if (failed(func.eraseResults(dropped)))
        signalPassFailure();
    });
  }
};
} // namespace
