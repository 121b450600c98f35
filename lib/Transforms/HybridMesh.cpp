//===- HybridMesh.cpp - the mesh and groups of hybrid sharding -----------===//
//
// --distopt-hybrid-mesh{shard-size=S}: declares `@hybrid` [W/S, S] and the
// groups `@hybrid_shard` (axis 1) and `@hybrid_replicate` (axis 0) that
// --distopt-shard-optimizer shards and replicates over.
//
//===----------------------------------------------------------------------===//

#include "MeshGroups.h"

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

void HybridMeshPass::runOnOperation() {
  if (shardSize == 0)
    return;
  ModuleOp module = getOperation();
  Operation *source;
  FailureOr<int64_t> world =
      worldSizeOf(module, "distopt-hybrid-mesh", /*required=*/true, source);
  if (failed(world) ||
      failed(checkDividesWorld(source, "distopt-hybrid-mesh", "shard-size",
                               shardSize, *world, "shard groups")))
    return signalPassFailure();
  if (failed(declareMeshGroups(
          module, "distopt-hybrid-mesh", "hybrid",
          {*world / shardSize, shardSize},
          {{"hybrid_shard", {1}}, {"hybrid_replicate", {0}}})))
    return signalPassFailure();
}

} // namespace
