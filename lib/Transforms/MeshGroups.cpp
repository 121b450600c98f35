//===- MeshGroups.cpp - groups over a 2-D mesh, declared by passes -------===//

#include "MeshGroups.h"

#include "distopt/Dialect/DistOpt/IR/StepABI.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace mlir::distopt;

/// `@name`, declared by `make` unless the module has a symbol of that name
/// that `matches` accepts; another symbol of the name is an error.
template <typename OpTy>
static FailureOr<OpTy> declare(ModuleOp module, StringRef pass, StringRef name,
                               llvm::function_ref<bool(OpTy)> matches,
                               llvm::function_ref<OpTy()> make) {
  Operation *found = module.lookupSymbol(name);
  if (!found)
    return make();
  auto existing = dyn_cast<OpTy>(found);
  if (existing && matches(existing))
    return existing;
  found->emitError() << "--" << pass << " declares @" << name
                     << ", but the module has another symbol of that name";
  return failure();
}

FailureOr<int64_t> mlir::distopt::worldSizeOf(ModuleOp module, StringRef pass,
                                              bool required,
                                              Operation *&source) {
  source = module;
  if (auto attr = module->getAttrOfType<IntegerAttr>(abi::kWorldSize))
    return attr.getInt();
  int64_t world = 0;
  for (auto group : module.getOps<ProcessGroupOp>()) {
    if (!group.isWorld())
      continue;
    if (world != 0 && world != group.getSize()) {
      group.emitError() << "--" << pass
                        << ": process groups spanning worlds of " << world
                        << " and " << group.getSize() << " ranks";
      return failure();
    }
    world = group.getSize();
    source = group;
  }
  if (world == 0 && required) {
    module.emitError() << "--" << pass << ": the module has neither "
                       << abi::kWorldSize
                       << " nor a process group spanning the world";
    return failure();
  }
  return world;
}

LogicalResult mlir::distopt::checkDividesWorld(Operation *source,
                                               StringRef pass, StringRef option,
                                               int64_t size, int64_t world,
                                               StringRef parts) {
  if (size > 0 && world % size == 0)
    return success();
  return source->emitError() << "--" << pass << ": " << option << "=" << size
                             << " does not divide the world of " << world
                             << " ranks into " << parts;
}

FailureOr<SmallVector<FlatSymbolRefAttr>>
mlir::distopt::declareMeshGroups(ModuleOp module, StringRef pass,
                                 StringRef meshName, ArrayRef<int64_t> shape,
                                 ArrayRef<GroupOverAxes> groups) {
  OpBuilder builder(module.getContext());
  builder.setInsertionPointToStart(module.getBody());
  Location loc = module.getLoc();
  FailureOr<MeshOp> mesh = declare<MeshOp>(
      module, pass, meshName, [&](MeshOp op) { return op.getShape() == shape; },
      [&] { return MeshOp::create(builder, loc, meshName, shape); });
  if (failed(mesh))
    return failure();
  auto meshRef = FlatSymbolRefAttr::get(*mesh);
  SmallVector<FlatSymbolRefAttr> refs;
  for (const GroupOverAxes &g : groups) {
    int64_t size = 1;
    for (int64_t axis : g.axes)
      size *= shape[axis];
    FailureOr<ProcessGroupOp> group = declare<ProcessGroupOp>(
        module, pass, g.name,
        [&](ProcessGroupOp op) {
          return op.getMeshAttr() == meshRef && op.getAxes() &&
                 *op.getAxes() == ArrayRef<int64_t>(g.axes);
        },
        [&] {
          return ProcessGroupOp::create(
              builder, loc, builder.getStringAttr(g.name),
              builder.getI64IntegerAttr(size), meshRef,
              builder.getDenseI64ArrayAttr(g.axes), DenseIntElementsAttr());
        });
    if (failed(group))
      return failure();
    refs.push_back(FlatSymbolRefAttr::get(*group));
  }
  return refs;
}

TwoStageReduction mlir::distopt::splitReduction(ReductionKind kind) {
  bool average = kind == ReductionKind::Avg;
  ReductionKind first = average ? ReductionKind::Sum : kind;
  ReductionKind second =
      average || kind == ReductionKind::PremulSum ? ReductionKind::Sum : kind;
  return {first, second, average};
}

LogicalResult mlir::distopt::verifyHybridLayout(ProcessGroupOp shard,
                                                ProcessGroupOp replicate,
                                                int64_t world) {
  int64_t size = shard.getSize();
  ProcessGroupOp::Membership shards = shard.getMembership();
  ProcessGroupOp::Membership replicas = replicate.getMembership();
  // The replica part of the ranks holding each chunk.
  SmallVector<int64_t> replicaOf(size, -1);
  llvm::SmallDenseSet<int64_t> replicaParts;
  for (int64_t r = 0; r < world; ++r) {
    if (shards.color[r] != r / size || shards.key[r] != r % size)
      return shard.emitError()
             << "--distopt-shard-optimizer: hybrid shards are laid out by "
                "world rank (rank r holds chunk r mod "
             << size << "), so @" << shard.getSymName()
             << " must be runs of consecutive ranks in order (the last axis "
                "of a mesh), but world rank "
             << r << " is rank " << shards.key[r] << " of its part "
             << shards.color[r];
    int64_t &part = replicaOf[r % size];
    if (part == -1 && !replicaParts.insert(replicas.color[r]).second)
      return replicate.emitError()
             << "--distopt-shard-optimizer: @" << replicate.getSymName()
             << " joins ranks holding different chunks of @"
             << shard.getSymName() << " (world rank " << r << ")";
    if (part == -1)
      part = replicas.color[r];
    if (part != replicas.color[r])
      return replicate.emitError()
             << "--distopt-shard-optimizer: @" << replicate.getSymName()
             << " must join the ranks holding the same chunk of @"
             << shard.getSymName() << ", but world ranks " << r % size
             << " and " << r << " are in different parts";
  }
  return success();
}
