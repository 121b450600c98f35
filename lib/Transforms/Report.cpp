//===- Report.cpp - what a step communicates and stores ---------*- C++ -*-===//
//
// --distopt-report: a table per step function: its buckets, the bytes each
// rank sends per collective kind (ring algorithms), what each owner updates
// (ZeRO's owner plan), the model-state bytes each rank holds, and the
// compression ratio. The IR is not changed.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/ExactDivision.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Transforms/Bucketing.h"
#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/ToolOutputFile.h"

#include <map>
#include <numeric>

namespace mlir::distopt {
#define GEN_PASS_DEF_REPORTPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

/// Bytes of a value of `type`: a tensor, or a scalar (lr, step, a norm).
int64_t bytesOf(Type type) {
  if (auto shaped = dyn_cast<ShapedType>(type))
    return getShapedBytes(shaped);
  return getElementBytes(type);
}

struct CollectiveRow {
  int64_t count = 0;
  int64_t payload = 0; // bytes of the data each rank contributes or receives
  double sent = 0;     // bytes each rank sends (ring model)
};

struct StepReport {
  int64_t worldSize = 0;
  int64_t parameters = 0;
  struct Bucket {
    size_t tensors;
    int64_t elements, bytes, padding;
  };
  SmallVector<Bucket> buckets;
  llvm::MapVector<StringRef, CollectiveRow> collectives;
  int64_t paramBytes = 0, gradBytes = 0, stateBytes = 0;
  int64_t uncompressed = 0, compressed = 0;
  /// Tensors PowerSGD compresses, and the batches their factors are
  /// all-reduced in (two all_reduces each: P, then Q).
  int64_t powerSGDTensors = 0, powerSGDBatches = 0;
  /// Dion updates that all-reduce their factors instead of their gradient
  /// (the low-rank sync), and the batches they do it in (one per update
  /// without a batch number).
  int64_t dionSyncTensors = 0, dionSyncBatches = 0;
  /// Dion updates in blocks of rows (ZeRO's low-rank plan).
  int64_t dionRowTensors = 0;
  /// The collectives' traffic by process group (a group over a mesh's axes
  /// says which: inside a node or across nodes).
  std::map<std::string, CollectiveRow> byGroup;
  /// Updates that run on one owner (ZeRO's greedy layout, and updates that
  /// read whole matrices under either): what each rank updates.
  struct OwnerLoad {
    int64_t tensors = 0, elements = 0;
    double flops = 0; // (sums may pass int64_t's range)
  };
  std::map<int64_t, OwnerLoad> owners;
  /// Updates that read whole matrices and run on every rank (no ZeRO, or
  /// ZeRO's gather plan).
  OwnerLoad everyRank;
  /// matrix-plan=auto's predictions (abi::kMatrixPlans), when made.
  ArrayAttr matrixPlans;
};

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

struct ReportPass : public distopt::impl::ReportPassBase<ReportPass> {
  using ReportPassBase::ReportPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::string error;
    std::unique_ptr<llvm::ToolOutputFile> file = openOutputFile(output, &error);
    if (!file) {
      module.emitError() << "--distopt-report: " << error;
      return signalPassFailure();
    }
    module.walk([&](func::FuncOp func) {
      if (!func.isExternal())
        print(func, analyze(module, func), file->os());
    });
    file->keep();
  }

  StepReport analyze(ModuleOp module, func::FuncOp func);
  void print(func::FuncOp func, const StepReport &report,
             llvm::raw_ostream &os);
};

} // namespace

/// "@dp (8 ranks)", "@intra_node (2 ranks, axes [1] of @nodes [2, 2])".
static std::string describeGroup(ProcessGroupOp group) {
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
}

/// What the lowering of an overflow check or a norm reduces across `n`
/// ranks: the finite check's i32 vote; the norm's f64 partial sum, or one
/// per tensor of a sharded norm (tensor_bounds: a begin and an end each),
/// and then the f64 flag of the overflow check it carries (counted there,
/// not as a vote).
static void addVote(Operation *op, int64_t n, CollectiveRow &row) {
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
}

/// The compressed reductions: PowerSGD all-reduces its factors P and Q (its
/// collectives are counted by batch, in analyze); top-K all-gathers k values
/// and k 32-bit indices from every rank.
static void addCompressed(Operation *op, int64_t n, CollectiveRow &row,
                          StepReport &report) {
  int64_t full, payload;
  CollectiveKind moves;
  if (auto powersgd = dyn_cast<PowerSGDAllReduceOp>(op)) {
    full = bytesOf(powersgd.getGrad().getType());
    payload =
        bytesOf(powersgd.getP().getType()) + bytesOf(powersgd.getQ().getType());
    moves = CollectiveKind::AllReduce;
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
  ++report.dionRowTensors;
}

StepReport ReportPass::analyze(ModuleOp module, func::FuncOp func) {
  StepReport report;
  readSignature(module, func, report);
  // Overflow checks that a sharded norm's reduction carries.
  llvm::SmallPtrSet<Operation *, 4> fusedChecks;
  func.walk([&](ClipGradNormOp clip) {
    if (AllFiniteOp check = getFusedFiniteCheck(clip))
      fusedChecks.insert(check);
  });
  func.walk([&](Operation *op) {
    if (auto pack = dyn_cast<BucketPackOp>(op))
      return addBucket(pack, report);
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
      addVote(op, n, row);
    else
      addCompressed(op, n, row, report);
  });
  report.matrixPlans = func->getAttrOfType<ArrayAttr>(abi::kMatrixPlans);
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
    });
  });
  llvm::SetVector<Block *> powerSGDBlocks;
  func.walk([&](PowerSGDAllReduceOp op) {
    ++report.powerSGDTensors;
    powerSGDBlocks.insert(op->getBlock());
  });
  for (Block *block : powerSGDBlocks)
    report.powerSGDBatches += batchPowerSGD(*block).size();
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

void ReportPass::print(func::FuncOp func, const StepReport &r,
                       llvm::raw_ostream &os) {
  double psi = static_cast<double>(r.parameters);
  os << "distopt report for @" << func.getSymName() << ": world of "
     << r.worldSize << " ranks, " << r.parameters << " parameters\n\n";

  os << "buckets: " << r.buckets.size() << "\n";
  if (!r.buckets.empty()) {
    os << llvm::format("  %4s %8s %14s %14s %10s\n", "#", "tensors", "elements",
                       "bytes", "padding");
    int64_t bytes = 0;
    for (auto [i, b] : llvm::enumerate(r.buckets)) {
      os << llvm::format("  %4zu %8zu %14lld %14lld %10lld\n", i, b.tensors,
                         (long long)b.elements, (long long)b.bytes,
                         (long long)b.padding);
      bytes += b.bytes;
    }
    os << llvm::format("  %4s %8s %14s %14lld\n", "all", "", "",
                       (long long)bytes);
  }

  os << "\ncommunication per rank and step (ring algorithms)\n";
  os << llvm::format("  %-22s %6s %16s %16s %10s\n", "collective", "count",
                     "payload bytes", "bytes sent", "sent/param");
  CollectiveRow total;
  for (auto &[kind, row] : r.collectives) {
    os << llvm::format("  %-22s %6lld %16lld %16.0f %10.4f\n",
                       kind.str().c_str(), (long long)row.count,
                       (long long)row.payload, row.sent,
                       psi > 0 ? row.sent / psi : 0.0);
    total.count += row.count;
    total.payload += row.payload;
    total.sent += row.sent;
  }
  os << llvm::format("  %-22s %6lld %16lld %16.0f %10.4f\n", "total",
                     (long long)total.count, (long long)total.payload,
                     total.sent, psi > 0 ? total.sent / psi : 0.0);
  // Only where the step uses several groups: the total says the rest.
  if (r.byGroup.size() > 1) {
    os << "  by process group:\n";
    int width = 0;
    for (auto &[group, row] : r.byGroup)
      width = std::max(width, static_cast<int>(group.size()));
    for (auto &[group, row] : r.byGroup)
      os << llvm::format("  %-*s %6lld %16lld %16.0f\n", width, group.c_str(),
                         (long long)row.count, (long long)row.payload,
                         row.sent);
  }
  if (r.powerSGDTensors > 0) {
    os << "  (powersgd_all_reduce: " << r.powerSGDTensors << " tensors, ";
    if (r.powerSGDTensors == r.powerSGDBatches)
      os << "each all-reducing its P and Q factors)\n";
    else
      os << "their P and Q factors all-reduced in " << r.powerSGDBatches
         << (r.powerSGDBatches == 1 ? " batch" : " batches")
         << " of 2 all_reduces)\n";
  }

  if (r.dionSyncTensors > 0) {
    os << "  (dion_update: " << r.dionSyncTensors << " tensors, ";
    if (r.dionSyncTensors == r.dionSyncBatches)
      os << "each all-reducing its factors P and R instead of its "
            "gradient)\n";
    else
      os << "their factors P and R all-reduced instead of their gradients, "
            "in "
         << r.dionSyncBatches
         << (r.dionSyncBatches == 1 ? " batch" : " batches")
         << " of 2 all_reduces)\n";
  }

  if (r.dionRowTensors > 0)
    os << "  (dion_update: " << r.dionRowTensors
       << " matrices in blocks of rows, each gathering P's rows and "
          "all-reducing R)\n";

  if (!r.owners.empty()) {
    // The slowest owner sets the step's time: its share of the FLOPs of
    // updates that read whole matrices against an even split (1.00 =
    // balanced); element-wise updates count in elements only.
    os << "\nupdates on their owners (ZeRO greedy; whole matrices under "
          "either strategy)\n";
    os << llvm::format("  %6s %8s %14s %14s\n", "rank", "tensors", "elements",
                       "update MFLOP");
    double most = 0, total = 0;
    for (auto &[rank, load] : r.owners) {
      os << llvm::format("  %6lld %8lld %14lld %14.3f\n", (long long)rank,
                         (long long)load.tensors, (long long)load.elements,
                         load.flops / 1e6);
      most = std::max(most, load.flops);
      total += load.flops;
    }
    if (total > 0 && r.worldSize > 0)
      os << llvm::format("  most loaded rank: %.2fx the mean of %lld ranks\n",
                         most * r.worldSize / total, (long long)r.worldSize);
  }

  if (r.everyRank.tensors > 0)
    os << llvm::format("\nwhole-matrix updates on every rank: %lld tensors, "
                       "%lld elements, %.3f update MFLOP each rank\n",
                       (long long)r.everyRank.tensors,
                       (long long)r.everyRank.elements,
                       r.everyRank.flops / 1e6);
  if (r.matrixPlans) {
    // Each group's split, and what the model predicted of the others.
    os << "\nwhole matrices off owners or on them (matrix-plan=auto's "
          "model)\n";
    for (auto plan : r.matrixPlans.getAsRange<DictionaryAttr>()) {
      // (The verifier checked every key.)
      auto number = [&](StringRef key) {
        return plan.getAs<FloatAttr>(key).getValueAsDouble();
      };
      auto kind = plan.getAs<StringAttr>("plan");
      bool rows = kind && kind.getValue() == "lowrank";
      const char *away = rows ? "in blocks of rows" : "gathered";
      auto gathered = plan.getAs<ArrayAttr>("gathered");
      int64_t total = plan.getAs<IntegerAttr>("matrices").getInt();
      int64_t shared = static_cast<int64_t>(gathered.size());
      os << llvm::format("  %lld matrices: %lld %s, %lld on owners, "
                         "predicted %.1f us (all on owners %.1f us, all "
                         "%s %.1f us)\n",
                         (long long)total, (long long)shared, away,
                         (long long)(total - shared), number("chosen_us"),
                         number("all_owners_us"), away,
                         number("all_gathered_us"));
      if (shared > 0) {
        os << "    " << away << ":";
        for (auto name : gathered.getAsRange<StringAttr>())
          os << " " << name.getValue();
        os << "\n";
      }
    }
  }

  os << "\nmodel state per rank\n";
  os << llvm::format("  %-34s %16s %10s\n", "", "bytes", "per param");
  auto line = [&](const char *what, int64_t bytes) {
    os << llvm::format("  %-34s %16lld %10.4f\n", what, (long long)bytes,
                       psi > 0 ? bytes / psi : 0.0);
  };
  line("parameters", r.paramBytes);
  line("gradients (after reduction)", r.gradBytes);
  line("optimizer state (with main params)", r.stateBytes);
  line("total", r.paramBytes + r.gradBytes + r.stateBytes);

  os << "\ncompression: "
     << llvm::format("%.2f",
                     r.compressed > 0
                         ? static_cast<double>(r.uncompressed) / r.compressed
                         : 1.0)
     << "x (gradient bytes reduced / bytes contributed to reductions)\n\n";
}
