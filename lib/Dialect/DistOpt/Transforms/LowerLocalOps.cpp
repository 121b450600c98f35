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
#include "distopt/Dialect/DistOpt/Transforms/Passes.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_LOWERLOCALOPSPASS
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

struct LowerLocalOpsPass
    : public distopt::impl::LowerLocalOpsPassBase<LowerLocalOpsPass> {
  void runOnOperation() override {
    bool ok = true;
    SmallVector<Operation *> ops;
    getOperation().walk<WalkOrder::PreOrder>([&](Operation *op) {
      if (isa<PowerSGDAllReduceOp, OrthogonalizeOp, TopKAllReduceOp,
              AllFiniteOp, UnscaleOp, LossScaleUpdateOp, ClipGradNormOp>(op)) {
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
              BucketUnpackOp>(op))
        ops.push_back(op);
    });
    if (!ok)
      return signalPassFailure();
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
