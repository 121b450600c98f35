//===- HybridMesh.cpp - the mesh and groups of hybrid sharding -----------===//
//
// --distopt-hybrid-mesh{shard-size=S}: declares `@hybrid` [W/S, S] and the
// groups `@hybrid_shard` (axis 1) and `@hybrid_replicate` (axis 0) that
// --distopt-shard-optimizer shards and replicates over.
//
//===----------------------------------------------------------------------===//

#include "MeshGroups.h"

#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Transforms/Passes.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_HYBRIDMESHPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

struct HybridMeshPass
    : public mlir::distopt::impl::HybridMeshPassBase<HybridMeshPass> {
  using HybridMeshPassBase::HybridMeshPassBase;
  void runOnOperation() override;
};

/// The step's world size: the module's attribute, else the size of the
/// groups spanning the world; 0 with an error when there is none or they
/// disagree. `source` is what it was read from.
int64_t worldSize(ModuleOp module, Operation *&source) {
  source = module;
  if (auto attr = module->getAttrOfType<IntegerAttr>(abi::kWorldSize))
    return attr.getInt();
  int64_t world = 0;
  for (auto group : module.getOps<ProcessGroupOp>()) {
    if (!group.isWorld())
      continue;
    if (world != 0 && world != group.getSize()) {
      group.emitError() << "--distopt-hybrid-mesh: process groups spanning "
                           "worlds of "
                        << world << " and " << group.getSize() << " ranks";
      return 0;
    }
    world = group.getSize();
    source = group;
  }
  if (world == 0)
    module.emitError() << "--distopt-hybrid-mesh: the module has neither "
                       << abi::kWorldSize
                       << " nor a process group spanning the world";
  return world;
}

void HybridMeshPass::runOnOperation() {
  if (shardSize == 0)
    return;
  ModuleOp module = getOperation();
  Operation *source;
  int64_t world = worldSize(module, source);
  if (world == 0)
    return signalPassFailure();
  if (shardSize < 0 || world % shardSize != 0) {
    source->emitError() << "--distopt-hybrid-mesh: shard-size="
                        << static_cast<int64_t>(shardSize)
                        << " does not divide the world of " << world
                        << " ranks into shard groups";
    return signalPassFailure();
  }
  if (failed(declareMeshGroups(
          module, "distopt-hybrid-mesh", "hybrid",
          {world / shardSize, shardSize},
          {{"hybrid_shard", {1}}, {"hybrid_replicate", {0}}})))
    return signalPassFailure();
}

} // namespace
