//===- MeshGroups.h - groups over a 2-D mesh, declared by passes -*- C++
//-*-===//
//
// Private to lib/Transforms: what the passes that split a world reduction
// over two axes of a mesh share (--distopt-hierarchical-all-reduce,
// --distopt-hybrid-mesh with --distopt-shard-optimizer).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_LIB_TRANSFORMS_MESHGROUPS_H
#define DISTOPT_LIB_TRANSFORMS_MESHGROUPS_H

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"

#include "mlir/IR/BuiltinOps.h"

namespace mlir::distopt {

/// The world `module`'s step runs on: its distopt.world_size, else the size
/// of its process groups spanning the world, with `source` what it was read
/// from. 0 when it has neither (an error naming `pass` when `required`),
/// failure when those groups disagree (an error).
FailureOr<int64_t> worldSizeOf(ModuleOp module, StringRef pass, bool required,
                               Operation *&source);

/// Whether `size` ranks per part cut the world of `world` ranks into whole
/// parts (`parts`: "shard groups", "nodes"), else an error at `source`
/// naming `pass` and its option: the one rule of every option that cuts
/// the world (hybrid-shard-size, hierarchical-node-size).
LogicalResult checkDividesWorld(Operation *source, StringRef pass,
                                StringRef option, int64_t size, int64_t world,
                                StringRef parts);

/// A process group to declare over some axes of a mesh.
struct GroupOverAxes {
  StringRef name;
  SmallVector<int64_t> axes;
};

/// Declares `distopt.mesh @meshName shape [...]` and a process group per
/// entry of `groups`, at the start of `module`, in that order. A symbol
/// that already exists under one of these names is reused when it is the
/// same declaration; anything else of the name is an error that names
/// `pass`. Returns the groups' references.
FailureOr<SmallVector<FlatSymbolRefAttr>>
declareMeshGroups(ModuleOp module, StringRef pass, StringRef meshName,
                  ArrayRef<int64_t> shape, ArrayRef<GroupOverAxes> groups);

/// A world reduction of one kind done in two stages (inside a group, then
/// across): avg sums in both and divides the result by the world size once,
/// as the runtime's avg does; premul_sum applies its scale in the first.
struct TwoStageReduction {
  ReductionKind first, second;
  bool divide;
};
TwoStageReduction splitReduction(ReductionKind kind);

/// Hybrid sharding's layout, which the step's interface implies (world rank
/// r holds chunk r mod S of a flat shard): `shard` must be runs of S
/// consecutive world ranks in order, and `replicate` must join exactly the
/// ranks holding the same chunk. An error at the offending group otherwise.
LogicalResult verifyHybridLayout(ProcessGroupOp shard, ProcessGroupOp replicate,
                                 int64_t world);

} // namespace mlir::distopt

#endif // DISTOPT_LIB_TRANSFORMS_MESHGROUPS_H
