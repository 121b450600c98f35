//===- Report.cpp - what a step communicates and stores ---------*- C++ -*-===//
//
// --distopt-report: a table per step function: its buckets, the bytes each
// rank sends per collective kind (ring algorithms), what each owner updates
// (ZeRO's owner plan), the model-state bytes each rank holds, and the
// compression ratio (the analysis: StepReport.h). The IR is not changed.
//
//===----------------------------------------------------------------------===//

#include "distopt/Transforms/Passes.h"
#include "distopt/Transforms/StepReport.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/ToolOutputFile.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_REPORTPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

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
        print(func, analyzeStep(module, func), file->os());
    });
    file->keep();
  }

  void print(func::FuncOp func, const StepReport &report,
             llvm::raw_ostream &os);
};

} // namespace

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
