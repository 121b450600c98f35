//===- LowerLocalOps.cpp - the ops that do not communicate ------*- C++ -*-===//
//
// --distopt-lower-local-ops: the ops that do not communicate become linalg,
// tensor and scf, by family (LowerBuckets.cpp, LowerMixedPrecision.cpp,
// LowerCompression.cpp); rank becomes a runtime call, group_size a
// constant. Collectives stay for bufferization
// (DistOptToRuntime/BufferizableOpInterfaceImpl.cpp); ops the CPU lowering
// does not handle yet are reported, not passed through.
//
//===----------------------------------------------------------------------===//

#include "LocalOps.h"

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
