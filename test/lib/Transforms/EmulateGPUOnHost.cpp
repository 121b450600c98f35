//===- EmulateGPUOnHost.cpp - run GPU-structured IR on the CPU --*- C++ -*-===//
//
// --distopt-emulate-gpu-on-host, a testing aid: after --distopt-offload-to-gpu
// and convert-parallel-loops-to-gpu, each gpu.launch becomes an scf.parallel
// over its blocks and threads, and device memory operations host ones, so
// that the CPU lowering can run a step split the GPU way. What it checks by
// execution is the split: which work runs where, tile bounds, the scalars
// brought back from kernels, constants copied to the device. Code
// generation for the GPU itself needs one.
//
//===----------------------------------------------------------------------===//

#include "TestPasses.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::distopt::test {
#define GEN_PASS_DEF_EMULATEGPUONHOSTPASS
#include "TestPasses.h.inc"
} // namespace mlir::distopt::test

using namespace mlir;

namespace {

struct EmulateGPUOnHostPass
    : public distopt::test::impl::EmulateGPUOnHostPassBase<
          EmulateGPUOnHostPass> {
  void runOnOperation() override;
};

LogicalResult emulateLaunch(IRRewriter &rewriter, gpu::LaunchOp launch) {
  if (launch.getAsyncToken() || !launch.getAsyncDependencies().empty() ||
      launch.hasClusterSize() || !launch.getWorkgroupAttributions().empty() ||
      !launch.getPrivateAttributions().empty() ||
      !launch.getBody().hasOneBlock())
    return launch.emitOpError("is not a plain one-block launch, which is all "
                              "--distopt-offload-to-gpu creates");
  Location loc = launch.getLoc();
  rewriter.setInsertionPoint(launch);
  Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
  Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
  gpu::KernelDim3 grid = launch.getGridSizeOperandValues();
  gpu::KernelDim3 block = launch.getBlockSizeOperandValues();
  SmallVector<Value> upper = {grid.x,  grid.y,  grid.z,
                              block.x, block.y, block.z};
  auto loop = scf::ParallelOp::create(
      rewriter, loc, SmallVector<Value>(6, zero), upper,
      SmallVector<Value>(6, one), [](OpBuilder &b, Location l, ValueRange) {
        scf::ReduceOp::create(b, l);
      });
  IRMapping mapping;
  ValueRange ivs = loop.getInductionVars();
  gpu::KernelDim3 ids[] = {launch.getBlockIds(), launch.getThreadIds()};
  gpu::KernelDim3 sizes[] = {launch.getGridSize(), launch.getBlockSize()};
  for (int i = 0; i < 2; ++i) {
    mapping.map(ids[i].x, ivs[3 * i]);
    mapping.map(ids[i].y, ivs[3 * i + 1]);
    mapping.map(ids[i].z, ivs[3 * i + 2]);
    mapping.map(sizes[i].x, upper[3 * i]);
    mapping.map(sizes[i].y, upper[3 * i + 1]);
    mapping.map(sizes[i].z, upper[3 * i + 2]);
  }
  Block &body = launch.getBody().front();
  for (Operation &op : body)
    if (isa<gpu::GPUDialect>(op.getDialect()) && !isa<gpu::TerminatorOp>(op))
      return op.emitOpError("inside a launch is not emulated");
  SmallVector<Value> replacements;
  for (BlockArgument arg : body.getArguments()) {
    Value value = mapping.lookupOrNull(arg);
    if (!value)
      return launch.emitOpError("has a block argument that is not an id or "
                                "a size");
    replacements.push_back(value);
  }
  rewriter.eraseOp(body.getTerminator());
  rewriter.inlineBlockBefore(&body, loop.getBody()->getTerminator(),
                             replacements);
  rewriter.eraseOp(launch);
  return success();
}

void EmulateGPUOnHostPass::runOnOperation() {
  IRRewriter rewriter(&getContext());
  SmallVector<Operation *> ops;
  getOperation()->walk([&](Operation *op) {
    if (isa<gpu::LaunchOp, gpu::AllocOp, gpu::DeallocOp, gpu::MemcpyOp>(op))
      ops.push_back(op);
  });
  for (Operation *op : ops) {
    if (auto launch = dyn_cast<gpu::LaunchOp>(op)) {
      if (failed(emulateLaunch(rewriter, launch)))
        return signalPassFailure();
      continue;
    }
    if (op->getNumResults() > 1 ||
        (op->getNumResults() == 1 &&
         !isa<MemRefType>(op->getResultTypes()[0]))) {
      op->emitOpError("is asynchronous; emulate before gpu-async-region");
      return signalPassFailure();
    }
    rewriter.setInsertionPoint(op);
    if (auto alloc = dyn_cast<gpu::AllocOp>(op))
      rewriter.replaceOpWithNewOp<memref::AllocOp>(
          op, cast<MemRefType>(alloc.getMemref().getType()),
          alloc.getDynamicSizes(), alloc.getSymbolOperands());
    else if (auto dealloc = dyn_cast<gpu::DeallocOp>(op))
      rewriter.replaceOpWithNewOp<memref::DeallocOp>(op, dealloc.getMemref());
    else if (auto copy = dyn_cast<gpu::MemcpyOp>(op))
      rewriter.replaceOpWithNewOp<memref::CopyOp>(op, copy.getSrc(),
                                                  copy.getDst());
  }
}

} // namespace
