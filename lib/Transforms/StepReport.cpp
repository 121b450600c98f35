//===- StepReport.cpp - what a transformed step sends and holds -*- C++ -*-===//
//
// The analysis of --distopt-report and the planner's cost model
// (StepReport.h). Collectives are counted with ring algorithms' bytes.
//
//===----------------------------------------------------------------------===//

#include "distopt/Transforms/StepReport.h"
#include "distopt/Dialect/DistOpt/IR/ExactDivision.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Transforms/Bucketing.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

#include <numeric>

using namespace mlir;
using namespace mlir::distopt;

namespace {

/// Bytes of a value of `type`: a tensor, or a scalar (lr, step, a norm).
int64_t bytesOf(Type type) {
  if (auto shaped = dyn_cast<ShapedType>(type))
    return getShapedBytes(shaped);
  return getElementBytes(type);
}

/// The reducing collective that yields `value`, seen through an average's
/// division and an asynchronous collective's wait; null if none. A
/// reduction of such a value is a later stage of the same reduction
/// (hybrid sharding, the hierarchical all-reduce).
CollectiveOpInterface reductionYielding(Value value) {
  Operation *def = value.getDefiningOp();
  if (std::optional<ConstantDivision> division = matchConstantDivision(value))
    def = division->dividend.getDefiningOp();
  else if (auto div = dyn_cast_or_null<arith::DivFOp>(def))
    def = div.getLhs().getDefiningOp();
  if (auto wait = dyn_cast_or_null<WaitOp>(def))
    def = wait.getToken().getDefiningOp();
  auto collective = dyn_cast_or_null<CollectiveOpInterface>(def);
  return collective && collective.reduces() ? collective : nullptr;
}

/// The group an op that communicates runs over.
FlatSymbolRefAttr getGroupOf(Operation *op) {
  return llvm::TypeSwitch<Operation *, FlatSymbolRefAttr>(op)
      .Case<CollectiveOpInterface, PowerSGDAllReduceOp, TopKAllReduceOp,
            AllFiniteOp, ClipGradNormOp>(
          [](auto op) { return op.getGroupAttr(); })
      .Case([](DionUpdateOp op) { return op.getCommunicatorGroup(); })
      .Default([](Operation *) { return nullptr; });
}

/// The elements of the tensor a `distopt.layout` entry describes.
int64_t numElements(DictionaryAttr entry) {
  auto shape = entry.getAs<DenseI64ArrayAttr>("shape");
  if (!shape)
    return 0;
  return std::accumulate(shape.asArrayRef().begin(), shape.asArrayRef().end(),
                         int64_t(1), std::multiplies<int64_t>());
}

/// The elements of the parameters `func` takes, before any sharding.
int64_t countParameters(func::FuncOp func) {
  int64_t count = 0;
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
    if (abi::getArgRole(func, i) != abi::kParam)
      continue;
    auto layout = func.getArgAttrOfType<ArrayAttr>(i, abi::kLayout);
    if (!layout) {
      if (auto type = dyn_cast<RankedTensorType>(func.getArgument(i).getType());
          type && type.hasStaticShape())
        count += type.getNumElements();
      continue;
    }
    for (auto entry : layout.getAsRange<DictionaryAttr>())
      count += numElements(entry);
  }
  return count;
}

} // namespace

/// "@dp (8 ranks)", "@intra_node (2 ranks, axes [1] of @nodes [2, 2])".
std::string mlir::distopt::describeGroup(ProcessGroupOp group) {
  if (!group)
    return "(undeclared group)";
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "@" << group.getSymName() << " (" << group.getSize() << " ranks";
  if (std::optional<ArrayRef<int64_t>> axes = group.getAxes()) {
    os << ", axes [";
    llvm::interleaveComma(*axes, os);
    os << "] of " << group.getMeshAttr();
    if (auto mesh = SymbolTable::lookupNearestSymbolFrom<MeshOp>(
            group, group.getMeshAttr())) {
      os << " [";
      llvm::interleaveComma(mesh.getShape(), os);
      os << "]";
    }
  } else if (group.getRanks()) {
    os << ", listed parts";
  }
  os << ")";
  return text;
}

/// The signature's share of the report: the world, the parameter count,
/// the bytes of parameters and state, and the buckets a caller fills.
static void readSignature(ModuleOp module, func::FuncOp func,
                          StepReport &report) {
  if (auto world = module->getAttrOfType<IntegerAttr>(abi::kWorldSize))
    report.worldSize = world.getInt();
  if (auto count = module->getAttrOfType<IntegerAttr>(abi::kNumParameters))
    report.parameters = count.getInt();
  // A hand-written step has no importer attributes: the largest group is the
  // world, and the parameter arguments (whole, or as listed in a shard's
  // layout) are the model.
  if (report.worldSize == 0)
    for (auto group : module.getOps<ProcessGroupOp>())
      report.worldSize = std::max(report.worldSize, group.getWorldSize());
  if (report.parameters == 0)
    report.parameters = countParameters(func);

  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
    StringRef role = abi::getArgRole(func, i);
    Type type = func.getArgument(i).getType();
    int64_t bytes = bytesOf(type);
    if (role == abi::kParam)
      report.paramBytes += bytes;
    else if (role == abi::kMainParam || role == abi::kState)
      report.stateBytes += bytes;
    // A gradient bucket the caller fills (--distopt-grad-as-bucket-view):
    // what was packed. (Flat parameters and ZeRO shards are model state,
    // not buckets.)
    auto layout = func.getArgAttrOfType<ArrayAttr>(i, abi::kLayout);
    if (role == abi::kGrad && layout) {
      int64_t total = cast<RankedTensorType>(type).getNumElements();
      int64_t elements = 0;
      for (auto entry : layout.getAsRange<DictionaryAttr>())
        elements += numElements(entry);
      report.buckets.push_back({layout.size(), total, bytes, total - elements});
    }
  }
}

/// A bucket is what a reduction takes (ZeRO packs parameters too, to shard
/// and gather them: not buckets).
static void addBucket(BucketPackOp pack, StepReport &report) {
  bool reduced = llvm::any_of(pack->getUsers(), [](Operation *user) {
    auto collective = dyn_cast<CollectiveOpInterface>(user);
    return (collective && collective.reduces()) ||
           isa<PowerSGDAllReduceOp, TopKAllReduceOp>(user);
  });
  if (!reduced)
    return;
  int64_t packed, elements = 0;
  pack.getOffsets(&packed);
  for (Type type : pack.getInputs().getTypes())
    elements += cast<RankedTensorType>(type).getNumElements();
  int64_t total = pack.getBucket().getType().getNumElements();
  report.buckets.push_back({pack.getInputs().size(), total,
                            bytesOf(pack.getBucket().getType()),
                            total - elements});
}

/// A collective over a group of `n` ranks, by kind and by group.
static void addCollective(CollectiveOpInterface collective,
                          ProcessGroupOp group, int64_t n, StepReport &report) {
  CollectiveKind kind = collective.getCollectiveKind();
  int64_t payload = collective.getPayloadBytes();
  CollectiveRow &row = report.collectives[stringifyCollectiveKind(kind)];
  ++row.count;
  row.payload += payload;
  row.sent += collective.getBytesSentPerRank(n);
  CollectiveRow &groupRow = report.byGroup[describeGroup(group)];
  ++groupRow.count;
  groupRow.payload += payload;
  groupRow.sent += collective.getBytesSentPerRank(n);
  // Gradient bytes once per reduction, at its first stage; a reduced
  // chunk gathered back whole (hierarchical) is held whole.
  bool laterStage = bool(reductionYielding(collective.getInput()));
  if (collective.reduces() && !laterStage) {
    report.gradBytes += bytesOf(collective.getYieldedType());
    report.uncompressed += bytesOf(collective.getFullType());
    report.compressed += payload;
  }
  if (kind == CollectiveKind::AllGather && laterStage)
    report.gradBytes +=
        bytesOf(collective.getFullType()) -
        bytesOf(cast<RankedTensorType>(collective.getInput().getType()));
  CommEvent event{group, 1, collective.getBytesSentPerRank(n),
                  collective.reduces() ||
                      (kind == CollectiveKind::AllGather && laterStage)};
  if (kind == CollectiveKind::Broadcast || kind == CollectiveKind::Reduce) {
    int64_t sliced = std::max(payload, bytesOf(collective.getFullType()));
    RootedCollectiveCost rooted =
        getRootedCollectiveCost(kind, payload, sliced, n);
    event.steps = rooted.steps;
    event.busiestSent = rooted.busiestBytes;
  }
  report.events.push_back(event);
}

/// What the lowering of an overflow check or a norm reduces across `n`
/// ranks: the finite check's i32 vote; the norm's f64 partial sum, or one
/// per tensor of a sharded norm (tensor_bounds: a begin and an end each),
/// and then the f64 flag of the overflow check it carries (counted there,
/// not as a vote).
static void addVote(Operation *op, ProcessGroupOp group, int64_t n,
                    CollectiveRow &row, StepReport &report) {
  int64_t bytes = 4;
  if (auto clip = dyn_cast<ClipGradNormOp>(op)) {
    bytes = 8;
    if (ArrayAttr bounds = clip.getTensorBoundsAttr()) {
      bytes = getFusedFiniteCheck(clip) ? 8 : 0;
      for (Attribute pairs : bounds)
        bytes += 8 * (cast<DenseI64ArrayAttr>(pairs).size() / 2);
    }
  }
  ++row.count;
  row.payload += bytes;
  row.sent += ringBytesSent(CollectiveKind::AllReduce, bytes, n);
  report.events.push_back(
      {group, 1, ringBytesSent(CollectiveKind::AllReduce, bytes, n), false});
}

/// The compressed reductions: PowerSGD all-reduces its factors P and Q (its
/// collectives are counted by batch, in analyze); top-K all-gathers k values
/// and k 32-bit indices from every rank.
static void addCompressed(Operation *op, ProcessGroupOp group, int64_t n,
                          CollectiveRow &row, StepReport &report) {
  int64_t full, payload;
  CollectiveKind moves;
  if (auto powersgd = dyn_cast<PowerSGDAllReduceOp>(op)) {
    full = bytesOf(powersgd.getGrad().getType());
    payload =
        bytesOf(powersgd.getP().getType()) + bytesOf(powersgd.getQ().getType());
    moves = CollectiveKind::AllReduce;
    // P = M Q, Q = M^T P and M ~ P Q^T (2 m n r FLOPs each), P's
    // orthogonalization (2 m r^2); the error feedback and the
    // decompression read and write about six m x n f32 tensors.
    auto p = cast<RankedTensorType>(powersgd.getP().getType());
    auto q = cast<RankedTensorType>(powersgd.getQ().getType());
    double m = p.getDimSize(0), r = p.getDimSize(1), cols = q.getDimSize(0);
    report.powerSGDFlops += 6 * m * cols * r + 2 * m * r * r;
    report.powerSGDBytes += 6 * 4 * m * cols;
  } else {
    auto topk = cast<TopKAllReduceOp>(op);
    full = bytesOf(topk.getGrad().getType());
    int64_t numel = topk.getGrad().getType().getNumElements();
    int64_t k =
        std::max<int64_t>(1, static_cast<int64_t>(std::ceil(
                                 topk.getDensity().convertToDouble() * numel)));
    payload = k * (full / numel + 4) * n;
    moves = CollectiveKind::AllGather;
    ++row.count;
  }
  row.payload += payload;
  row.sent += ringBytesSent(moves, payload, n);
  // (PowerSGD's two collectives per batch are events of their own.)
  report.events.push_back({group, isa<TopKAllReduceOp>(op) ? 1 : 0,
                           ringBytesSent(moves, payload, n), true});
  report.gradBytes += full;
  report.uncompressed += full;
  report.compressed += payload;
}

/// Dion's low-rank sync: two all-reduces, of P (m x r) and of R (n x r) in
/// the type its products accumulate in, in place of the gradient's (the
/// collectives are counted by batch, in analyze).
static void addDionSync(DionUpdateOp dion, ProcessGroupOp group, int64_t n,
                        StepReport &report) {
  auto param = cast<RankedTensorType>(dion.getParam().getType());
  auto factor = cast<RankedTensorType>(dion.getState()[1].getType());
  int64_t rank = factor.getDimSize(0), cols = factor.getDimSize(1);
  int64_t rows = cols == 0 ? 0 : param.getNumElements() / cols;
  int64_t width = dion.getFactorElementType().getWidth() / 8;
  int64_t payload = (rows + cols) * rank * width;
  int64_t full = bytesOf(cast<RankedTensorType>(dion.getGrad().getType()));
  double sent =
      ringBytesSent(CollectiveKind::AllReduce, rows * rank * width, n) +
      ringBytesSent(CollectiveKind::AllReduce, cols * rank * width, n);
  for (CollectiveRow *row : {&report.collectives["dion_update (factors)"],
                             &report.byGroup[describeGroup(group)]}) {
    row->payload += payload;
    row->sent += sent;
  }
  report.events.push_back({group, 0, sent, true}); // (counted by batch)
  report.gradBytes += full;
  report.uncompressed += full;
  report.compressed += payload;
}

/// Dion in blocks of rows (ZeRO's low-rank plan): an all_gather of P's
/// rows (K x the block's rows, by r) and an all_reduce of R (n x r), in the
/// type its products accumulate in; the gradient came by its own
/// reduce-scatter (counted there).
static void addDionRows(DionUpdateOp dion, ProcessGroupOp group, int64_t n,
                        StepReport &report) {
  auto block = cast<RankedTensorType>(dion.getParam().getType());
  auto factor = cast<RankedTensorType>(dion.getState()[1].getType());
  int64_t rank = factor.getDimSize(0), cols = factor.getDimSize(1);
  int64_t width = dion.getFactorElementType().getWidth() / 8;
  int64_t gathered = n * block.getDimSize(0) * rank * width;
  int64_t reduced = cols * rank * width;
  double sent = ringBytesSent(CollectiveKind::AllGather, gathered, n) +
                ringBytesSent(CollectiveKind::AllReduce, reduced, n);
  for (CollectiveRow *row : {&report.collectives["dion_update (rows)"],
                             &report.byGroup[describeGroup(group)]}) {
    row->count += 2;
    row->payload += gathered + reduced;
    row->sent += sent;
  }
  report.events.push_back({group, 2, sent, false});
  ++report.dionRowTensors;
}

StepReport mlir::distopt::analyzeStep(ModuleOp module, func::FuncOp func) {
  StepReport report;
  readSignature(module, func, report);
  // Overflow checks that a sharded norm's reduction carries.
  llvm::SmallPtrSet<Operation *, 4> fusedChecks;
  func.walk([&](ClipGradNormOp clip) {
    if (AllFiniteOp check = getFusedFiniteCheck(clip))
      fusedChecks.insert(check);
  });
  func.walk([&](Operation *op) {
    if (auto pack = dyn_cast<BucketPackOp>(op)) {
      report.packedBytes += bytesOf(pack.getBucket().getType());
      return addBucket(pack, report);
    }
    if (auto unpack = dyn_cast<BucketUnpackOp>(op))
      report.packedBytes += bytesOf(unpack.getBucket().getType());
    if (!communicates(op) || isa<WaitOp>(op))
      return;
    ProcessGroupOp group = lookupProcessGroup(op, getGroupOf(op));
    int64_t n = group ? group.getSize() : 0;
    if (auto collective = dyn_cast<CollectiveOpInterface>(op))
      return addCollective(collective, group, n, report);
    if (auto dion = dyn_cast<DionUpdateOp>(op))
      return dion.getRowGroupAttr() ? addDionRows(dion, group, n, report)
                                    : addDionSync(dion, group, n, report);
    if (!isa<AllFiniteOp, ClipGradNormOp, PowerSGDAllReduceOp, TopKAllReduceOp>(
            op) ||
        fusedChecks.contains(op))
      return;
    CollectiveRow &row = report.collectives[op->getName().stripDialect()];
    if (isa<AllFiniteOp, ClipGradNormOp>(op))
      addVote(op, group, n, row, report);
    else
      addCompressed(op, group, n, row, report);
  });
  report.matrixPlans = func->getAttrOfType<ArrayAttr>(abi::kMatrixPlans);
  // What an update reads and writes: its tensor operands and results.
  auto bytesTouched = [](Operation *op) {
    double bytes = 0;
    for (Type type :
         llvm::concat<Type>(op->getOperandTypes(), op->getResultTypes()))
      if (isa<RankedTensorType>(type))
        bytes += bytesOf(type);
    return bytes;
  };
  func.walk([&](OptimizerOpInterface update) {
    if (update.isElementwise() && !update->getParentOfType<OwnedByOp>()) {
      ++report.elementwise.tensors;
      report.elementwise.elements +=
          cast<RankedTensorType>(update.getParam().getType()).getNumElements();
      report.elementwise.bytes += bytesTouched(update);
    }
  });
  func.walk([&](OptimizerOpInterface update) {
    auto dion = dyn_cast<DionUpdateOp>(update.getOperation());
    if (update.isElementwise() || update->getParentOfType<OwnedByOp>() ||
        (dion && dion.getRowGroupAttr()))
      return;
    ++report.everyRank.tensors;
    report.everyRank.elements +=
        cast<RankedTensorType>(update.getParam().getType()).getNumElements();
    report.everyRank.flops += static_cast<double>(update.getUpdateFlops());
  });
  func.walk([&](OwnedByOp owned) {
    owned.getBody().walk([&](OptimizerOpInterface update) {
      StepReport::OwnerLoad &load = report.owners[owned.getOwner()];
      ++load.tensors;
      load.elements +=
          cast<RankedTensorType>(update.getParam().getType()).getNumElements();
      if (!update.isElementwise()) // (theirs are their elements)
        load.flops += static_cast<double>(update.getUpdateFlops());
      else
        load.bytes += bytesTouched(update);
    });
  });
  llvm::SetVector<Block *> powerSGDBlocks;
  func.walk([&](PowerSGDAllReduceOp op) {
    ++report.powerSGDTensors;
    powerSGDBlocks.insert(op->getBlock());
  });
  for (Block *block : powerSGDBlocks)
    for (PowerSGDBatch &batch : batchPowerSGD(*block)) {
      ++report.powerSGDBatches;
      PowerSGDAllReduceOp first = batch.members.front();
      report.events.push_back(
          {lookupProcessGroup(first, first.getGroupAttr()), 2, 0, true});
    }
  if (report.powerSGDBatches > 0)
    report.collectives["powersgd_all_reduce"].count +=
        2 * report.powerSGDBatches;
  // Dion's synced updates: two all-reduces per batch, or per update
  // without a batch number.
  llvm::SetVector<Block *> dionBlocks;
  auto countBatch = [&](DionUpdateOp first) {
    ++report.dionSyncBatches;
    ProcessGroupOp group = lookupProcessGroup(first, first.getGroupAttr());
    report.collectives["dion_update (factors)"].count += 2;
    report.byGroup[describeGroup(group)].count += 2;
    report.events.push_back({group, 2, 0, true});
  };
  func.walk([&](DionUpdateOp op) {
    if (!op.getGroupAttr())
      return;
    ++report.dionSyncTensors;
    if (op.getBatch())
      dionBlocks.insert(op->getBlock());
    else
      countBatch(op);
  });
  for (Block *block : dionBlocks)
    for (OpBatch &batch : batchDionSync(*block))
      countBatch(cast<DionUpdateOp>(batch.members.front()));
  return report;
}
