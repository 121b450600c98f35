//===- ShardOptimizer.h - ZeRO sharding's strategies ------------*- C++ -*-===//
//
// Private to --distopt-shard-optimizer: the analysed updates and the state
// of one run, shared by the pass (ShardOptimizer.cpp), its two strategies,
// flat (ShardFlat.cpp) and greedy (ShardGreedy.cpp), and the order that
// runs them and what spans their parts (ShardComposed.cpp); which updates
// shard together and the plans of updates that read whole matrices, with
// their cost model (MatrixPlan.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_LIB_TRANSFORMS_SHARDOPTIMIZER_H
#define DISTOPT_LIB_TRANSFORMS_SHARDOPTIMIZER_H

#include "distopt/Dialect/DistOpt/Analysis/StepStructure.h"
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/ExactDivision.h"
#include "distopt/Transforms/PassOptions.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <string>

namespace mlir::distopt::zero {

/// One optimizer update and the values around it that sharding rewires.
struct Update {
  Operation *op;
  BlockArgument param;      // role param or main_param
  bool paramIsMain = false; // the update works on an fp32 main copy
  AllReduceOp reduction;    // reduces the gradient
  /// Optional, right after the reduction: a division by a constant (the
  /// mean over accumulated micro-batches), the op yielding its quotient, all
  /// its ops (that one first: a division in a wider type has three,
  /// ExactDivision.h) and its divisor.
  Operation *divide = nullptr;
  SmallVector<Operation *, 3> divisionOps;
  double divisor = 1.0;
  /// After the division, nearest the reduction first: the element-wise
  /// ops the gradient passes through (isElementwiseLink: a conversion to
  /// the update's precision, as arith.extf to an fp32 main parameter or
  /// arith.truncf from a reduction widened by --distopt-widen-reductions;
  /// the unscale by a loss scale), each applied to a rank's part alike.
  SmallVector<Operation *, 2> elementwise;
  /// Optional, last before the update: the gradient clipped by the global
  /// norm of all gradients (input `clipIndex` of `clip`).
  ClipGradNormOp clip;
  unsigned clipIndex = 0;
  /// Optional: the overflow check that reads the reduced gradient, and the
  /// condition under which the update is kept (arith.select %keep, new,
  /// old on each new value; `selects` are those selects).
  AllFiniteOp finiteCheck;
  Value keep;
  SmallVector<arith::SelectOp> selects;
  SmallVector<BlockArgument> state;
  SmallVector<arith::TruncFOp> downcasts; // new main param -> model param
  BlockArgument modelParam; // with main params: the model copy (stage 3)
  StringRef name;

  /// Whether its gradient passes through more than conversions.
  bool chained() const {
    return divide || clip || keep ||
           llvm::any_of(elementwise, [](Operation *op) {
             return !isa<arith::ExtFOp, arith::TruncFOp>(op);
           });
  }

  RankedTensorType paramType() const {
    return cast<RankedTensorType>(param.getType());
  }
  int64_t numel() const { return paramType().getNumElements(); }
};

RankedTensorType flatType(int64_t size, Type element);
/// The attribute describing where each tensor of a group lives: the
/// parameters, or with `state`, that state tensor of each update (of a shape
/// of its own where the update keeps one: Dion's right factor).
ArrayAttr layoutAttr(Builder &builder, ArrayRef<Update *> group,
                     ArrayRef<int64_t> offsets, ArrayRef<int64_t> owners = {},
                     std::optional<unsigned> state = std::nullopt);
/// The torch state key of a state argument ("exp_avg" of "w.exp_avg").
std::string stateKey(func::FuncOp func, const Update &u, unsigned k);

/// ZeroRedundancyOptimizer's sorted-greedy assignment (ShardGreedy.cpp):
/// the heaviest weight first (ties: in order), each to the least loaded
/// rank (ties: the lower), starting from and adding to `load`;
/// `assigned(i, rank)` is called for each in that order.
void assignSortedGreedy(ArrayRef<double> weights, MutableArrayRef<double> load,
                        function_ref<void(unsigned, int64_t)> assigned);

/// Whether every state tensor of the update has the parameter's shape, so
/// that its chunks lie as the parameter's (not Dion's right factor): what
/// the gather plan needs (MatrixPlan.cpp).
bool statesShapedAsParam(Operation *op);
/// Whether two updates shard together: the same optimizer and
/// hyperparameters, learning rate and step, element types and reduction,
/// and the same ops on their gradients' way (MatrixPlan.cpp).
bool shardTogether(Update &a, Update &b);
/// Whether the update can run on blocks of its matrix's rows (Dion's
/// `row_group`): the low-rank plan (MatrixPlan.cpp).
bool rowShardable(Operation *op);
/// Whether its matrix has elements to cut into blocks of rows (MatrixPlan.cpp).
bool hasRows(Operation *op);

/// matrix-plan=auto's cost model for a group of updates that read whole
/// matrices, at stages 1 and 2 (MatrixPlan.cpp). The step time of the
/// group's part is modelled as the owners' (a broadcast of each matrix, at
/// stage 2 also a reduce to its owner, and the busiest owner's arithmetic
/// after the sorted-greedy assignment by FLOPs, or by elements under
/// owner-balance=elements; without the load earlier groups gave each
/// rank) plus the gathered
/// matrices' (one all-gather per gathered buffer and, at stage 2, one
/// reduce-scatter, each moving (N-1)/N of their bytes, and every rank's
/// arithmetic of them all), a collective of S bytes taking latency +
/// S / bandwidth. The gathered matrices are the k cheapest by FLOPs, k the
/// one predicted fastest (no gathered matrix on a tie).
///
/// With `rowShards` (Dion) the matrices off owners run in blocks of rows
/// instead, each on its own: at stage 2 its gradient's reduce-scatter,
/// its new parameter's (or model copy's) all-gather (both of the padded
/// rows, N x ceil(m/N)), the all-gather of
/// P's rows (N x ceil(m/N) by r) and the all-reduce of R (n x r, twice
/// the (N-1)/N of its bytes), and this rank's share of the products (8 m
/// n r + 10 m n over N) with the whole orthonormalization (4 m r^2). They
/// are the k most costly by FLOPs (splitting helps them most).
struct MatrixCostModel {
  double flopsPerS, latencyS, bytesPerS;
  int64_t ranks, stage;
  bool balanceFlops;
  bool rowShards = false;

  /// Predicted seconds with `gathered` (one flag per update) off owners:
  /// gathered, or with `rowShards` in blocks of rows.
  double predict(ArrayRef<Update *> group, ArrayRef<bool> gathered) const;
  /// Which updates to take off owners.
  SmallVector<bool> choose(ArrayRef<Update *> group) const;
  /// One matrix in blocks of rows (`rowShards`).
  double rowShardSeconds(const Update &u) const;
  /// The prediction as the report reads it (abi::kMatrixPlans' entries).
  DictionaryAttr describe(MLIRContext *context, ArrayRef<Update *> group,
                          ArrayRef<bool> gathered) const;
};

/// Rewrites groups of like updates of one function into sharded ones,
/// collecting the arguments it adds, the results they return and the ops
/// it replaces; the pass then rebuilds the signature.
class Sharder {
public:
  Sharder(int64_t stage, int64_t alignment, FlatSymbolRefAttr shardGroup,
          FlatSymbolRefAttr replicateGroup, bool balanceFlops)
      : shardGroup(shardGroup), replicateGroup(replicateGroup), stage(stage),
        alignment(alignment), balanceFlops(balanceFlops) {}

  /// Hybrid sharding: the group whose ranks share the chunks out and the
  /// group across which each chunk is replicated; both null otherwise.
  FlatSymbolRefAttr shardGroup, replicateGroup;
  /// The group `u`'s chunks are cut over (and gathered, and agreed on).
  FlatSymbolRefAttr chunkGroup(Update &u) const {
    return shardGroup ? shardGroup : u.reduction.getGroupAttr();
  }

  /// flat (DeepSpeed, Megatron): one flat buffer padded to N chunks, rank r
  /// owns chunk r (ShardFlat.cpp). In two halves, so that what spans all
  /// groups (the overflow check, clipping by the global norm) is computed
  /// from every group's gradient chunk before any group updates:
  /// reduceFlat leaves this rank's chunk of the reduced gradient in
  /// `FlatGroup::grad`, updateFlat updates the chunk from `grad`.
  struct FlatGroup {
    int64_t padded = 0, shard = 0;
    SmallVector<int64_t> offsets;
    Value grad;
    /// This rank's chunk of the packed parameters, when packed ahead of
    /// the update (packParamsFlat); else updateFlat packs them.
    Value param;
  };
  /// How a group is sharded: laid out flat and updated chunk by chunk;
  /// whole on owners (the greedy strategy's groups, and the owner plan of
  /// updates that read whole matrices); laid out flat and updated whole
  /// on every rank from gathered chunks (the gather plan); or one matrix
  /// laid out flat in chunks of whole rows, each rank updating its rows
  /// (Dion's low-rank plan: the op's `row_group`).
  enum class Plan { Flat, Owners, Gathered, RowShards };
  /// Shards every group of like updates by its plan. Each group's part of
  /// the reduced gradients first, then what spans the groups over those
  /// parts, then the updates (ShardComposed.cpp).
  void shard(func::FuncOp func, ArrayRef<SmallVector<Update *>> groups,
             ArrayRef<Plan> plans);
  FlatGroup reduceFlat(func::FuncOp func, ArrayRef<Update *> group, Plan plan);
  /// Updates the group's chunks by its plan: each chunk alone (Flat),
  /// every tensor whole from the gathered chunks, keeping this rank's
  /// chunk (Gathered), or the matrix's block of rows (RowShards).
  void updateFlat(func::FuncOp func, ArrayRef<Update *> group, unsigned index,
                  const FlatGroup &flat, Plan plan);
  /// This rank's chunk of the group's parameters packed into a flat buffer
  /// (stages 1 and 2 without main parameters), or null.
  Value packParamsFlat(func::FuncOp func, ArrayRef<Update *> group,
                       const FlatGroup &flat);
  /// greedy (ZeroRedundancyOptimizer, OSS): whole parameters to the least
  /// loaded rank, updated under owned_by and broadcast (ShardGreedy.cpp).
  /// Rank r's buffers hold the tensors it owns at `offsets`, padded to
  /// `capacity`; at stage 2 each gradient is reduced to its owner
  /// (`reduced`), and where something spans the gradients (the overflow
  /// check, clipping) the owner copies it into its slot of `grad`, this
  /// rank's buffer of reduced gradients.
  struct GreedyGroup {
    SmallVector<int64_t> owners, offsets, loads;
    int64_t capacity = 0;
    SmallVector<Value> reduced;
    Value grad;
  };
  /// Assigns the group's tensors to owners. `composeAtStage1`: also at
  /// stage 1, gather what each rank owns of the reduced gradients into
  /// `grad` where something spans them (a check or a clip that flat groups
  /// beside it compose over parts).
  GreedyGroup assignGreedy(func::FuncOp func, ArrayRef<Update *> group,
                           bool composeAtStage1);
  /// Per process group, the elements each rank owns in the groups
  /// assigned so far, and the update FLOPs in those that read whole
  /// matrices: a group starts from them (as OSS balances
  /// across torch's param groups), so that groups of one tensor each (a
  /// Muon matrix with a rate of its own) do not all go to rank 0.
  llvm::DenseMap<Attribute, SmallVector<double>> ownedElements, ownedFlops;
  void updateGreedy(func::FuncOp func, ArrayRef<Update *> group, unsigned index,
                    const GreedyGroup &greedy);
  /// What spans the groups (the overflow check, clipping by the global
  /// norm), rebuilt over the part of each group's reduced gradient that
  /// this rank holds, `grads[g]` (1-d): the check and the norm agreed over
  /// `groupRef`, each part then divided, converted, unscaled and clipped
  /// as the updates' gradients were; `grads` returns what the updates
  /// read. `bounds[g]` places group g's tensors, as `[begin, end)` pairs,
  /// in a flat buffer whose chunk r is rank r's part (ShardComposed.cpp).
  void composeChunks(func::FuncOp func, ArrayRef<SmallVector<Update *>> groups,
                     MutableArrayRef<Value> grads,
                     ArrayRef<SmallVector<int64_t>> bounds,
                     FlatSymbolRefAttr groupRef);
  /// Queues the updates and what composeChunks replaced for erasure.
  void eraseComposed(ArrayRef<SmallVector<Update *>> groups);
  /// Adds a function argument and a matching result slot for `value`.
  BlockArgument addArgument(func::FuncOp func, Type type, StringRef role,
                            StringRef name, ArrayRef<NamedAttribute> extra);

  /// Results to append to the return: (value, role, name, extra attributes).
  struct NewResult {
    Value value;
    DictionaryAttr attrs;
  };
  SmallVector<NewResult> newResults;
  /// Replaced ops, each listed after its users.
  SmallVector<Operation *> toErase;

private:
  int64_t stage, alignment;
  /// Whether updates that read whole matrices are balanced by their FLOPs
  /// (else by elements, as the others).
  bool balanceFlops;
};

/// The pass options that choose each group's plan.
struct PlanOptions {
  ZeroStrategy strategy;
  MatrixPlan matrixPlan;
  int64_t stage;
  bool hybrid;
  double updateGflops, latencyUs, bandwidthGbPerS;
  bool balanceFlops;
};

/// Each group of like updates with its plan (MatrixPlan.cpp): the flat
/// strategy lays out element-wise groups flat, the greedy one gives their
/// tensors to owners; groups that read whole matrices take the matrix
/// plan, the cost model's split in two groups (the owners' first), its
/// predictions recorded on `func` (abi::kMatrixPlans).
void planGroups(func::FuncOp func, ArrayRef<SmallVector<Update *>> groups,
                const PlanOptions &options,
                SmallVectorImpl<SmallVector<Update *>> &planned,
                SmallVectorImpl<Sharder::Plan> &plans);

} // namespace mlir::distopt::zero

#endif // DISTOPT_LIB_TRANSFORMS_SHARDOPTIMIZER_H
