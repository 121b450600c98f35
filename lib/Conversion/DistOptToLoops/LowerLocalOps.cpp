//===- LowerLocalOps.cpp - the ops that do not communicate ------*- C++ -*-===//
//
// --distopt-lower-local-ops: the ops that do not communicate become linalg,
// tensor and scf, by family (LowerBuckets.cpp, LowerMixedPrecision.cpp,
// LowerCompression.cpp), each a pattern set; rank becomes a runtime call,
// group_size a constant. Collectives stay for bufferization
// (DistOptToRuntime/BufferizableOpInterfaceImpl.cpp); a distopt op the
// lowering leaves is an error at that op, not passed through.
//
//===----------------------------------------------------------------------===//

#include "LocalOps.h"

#include "distopt/Conversion/DistOptToLoops/DistOptToLoops.h"
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
#include "mlir/Transforms/DialectConversion.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
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
    llvm::SetVector<Block *> powerSGDBlocks;
    // Every group is split from the world the step is compiled for: one
    // spanning another world would fail at run time with a misleading
    // world-size mismatch.
    int64_t world = 0;
    if (auto attr = getOperation()->getAttrOfType<IntegerAttr>(abi::kWorldSize))
      world = attr.getInt();
    else
      getOperation().walk([&](ProcessGroupOp group) {
        world = std::max<int64_t>(world, group.getWorldSize());
      });
    getOperation().walk<WalkOrder::PreOrder>([&](Operation *op) {
      if (auto groupRef = op->getAttrOfType<FlatSymbolRefAttr>("group")) {
        ProcessGroupOp group = lookupProcessGroup(op, groupRef);
        if (group && group.getWorldSize() != world) {
          op->emitError() << "process group " << groupRef
                          << " spans a world of " << group.getWorldSize()
                          << " ranks but the step is "
                          << "compiled for " << world
                          << ": declare a smaller group over a distopt.mesh "
                             "or with its ranks";
          ok = false;
        }
      }
      if (isa<OptimizerOpInterface>(op)) {
        op->emitError() << "'" << op->getName()
                        << "' must be lowered by --distopt-lower-optimizers "
                           "first";
        ok = false;
      }
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
    // Groups and meshes become private so that symbol-dce drops them once
    // the collectives referring to them have become runtime calls.
    getOperation().walk([](Operation *op) {
      if (isa<ProcessGroupOp, MeshOp>(op))
        SymbolTable::setSymbolVisibility(op, SymbolTable::Visibility::Private);
    });
    // Clipping first, while the unscaling it reads is still an op it can
    // look through (LowerMixedPrecision.cpp).
    SmallVector<ClipGradNormOp> clips;
    getOperation().walk([&](ClipGradNormOp op) { clips.push_back(op); });
    for (ClipGradNormOp op : clips) {
      IRRewriter rewriter(op);
      lowerClipGradNorm(rewriter, op);
    }
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
    // Everything else, by pattern, the families in any order. The driver
    // only lowers: no folding or constant CSE (it still erases existing ops
    // that are trivially dead).
    RewritePatternSet patterns(&getContext());
    populateLowerBucketsPatterns(patterns, maxShardCases);
    populateLowerMixedPrecisionPatterns(patterns);
    populateLowerCompressionPatterns(patterns);
    GreedyRewriteConfig config;
    config.setStrictness(GreedyRewriteStrictness::ExistingOps)
        .enableFolding(false)
        .enableConstantCSE(false)
        .setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns),
                                     config))) {
      getOperation().emitError("--distopt-lower-local-ops did not converge");
      return signalPassFailure();
    }
    ConversionTarget target(getContext());
    addLowerLocalOpsLegality(target);
    getOperation().walk([&](Operation *op) {
      if (!target.isIllegal(op))
        return;
      op->emitError() << "'" << op->getName()
                      << "' was left unlowered by --distopt-lower-local-ops";
      ok = false;
    });
    if (!ok)
      signalPassFailure();
  }
};

} // namespace

void mlir::distopt::addLowerLocalOpsLegality(ConversionTarget &target) {
  target.addDynamicallyLegalDialect<DistOptDialect>([](Operation *op) {
    return isa<CollectiveOpInterface, WaitOp, ProcessGroupOp, MeshOp>(op);
  });
}
