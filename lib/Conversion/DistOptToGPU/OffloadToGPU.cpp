//===- OffloadToGPU.cpp - a bufferized step's memory work on the GPU ------===//
//
// --distopt-offload-to-gpu (Passes.td). Buffers are device memory, so the host
// may compute addresses, run control flow and call the runtime, but every
// read or write of an element happens in a kernel: element-wise loops become
// many-thread launches, the rest (whole-tensor reductions, scalar loads and
// stores) one-thread launches.
//
//===----------------------------------------------------------------------===//

#include "distopt/Codegen/SplitReductions.h"
#include "distopt/Conversion/DistOptToRuntime/BufferUses.h"
#include "distopt/Conversion/Passes.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/ParallelLoopMapper.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_OFFLOADTOGPUPASS
#define GEN_PASS_DEF_VERIFYOFFLOADPASS
#include "distopt/Conversion/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

/// Whether `op` or an op nested in it reads or writes a buffer's elements.
bool touchesElements(Operation *op) {
  return op
      ->walk([](Operation *nested) {
        auto effects = dyn_cast<MemoryEffectOpInterface>(nested);
        if (!effects)
          return WalkResult::advance();
        SmallVector<MemoryEffects::EffectInstance> list;
        effects.getEffects(list);
        for (MemoryEffects::EffectInstance &effect : list)
          if (isa<MemoryEffects::Read, MemoryEffects::Write>(
                  effect.getEffect()) &&
              effect.getValue() &&
              isa<BaseMemRefType>(effect.getValue().getType()))
            return WalkResult::interrupt();
        return WalkResult::advance();
      })
      .wasInterrupted();
}

/// Whether `op` or an op nested in it must run on the host: runtime calls,
/// the LLVM-dialect slots they write, allocation, and parallel loops (which
/// become launches of their own).
bool needsHost(Operation *op) {
  return op
      ->walk([](Operation *nested) {
        if (isa<func::CallOp, scf::ParallelOp, gpu::LaunchOp, memref::AllocOp,
                memref::DeallocOp, gpu::AllocOp, gpu::DeallocOp, gpu::MemcpyOp>(
                nested) ||
            isa<LLVM::LLVMDialect>(nested->getDialect()))
          return WalkResult::interrupt();
        return WalkResult::advance();
      })
      .wasInterrupted();
}

bool isScalar(Type type) { return type.isIntOrIndexOrFloat(); }

enum class Placement {
  Kernel, // a one-thread kernel: it reads or writes elements
  Either, // scalar arithmetic, joins a kernel it sits inside
  Host,   // control flow, calls, addresses and constants
};

Placement place(Operation *op) {
  if (op->hasTrait<OpTrait::IsTerminator>() || needsHost(op))
    return Placement::Host;
  if (touchesElements(op))
    return Placement::Kernel;
  if (isMemoryEffectFree(op) && !op->hasTrait<OpTrait::ConstantLike>() &&
      llvm::all_of(op->getResultTypes(), isScalar) &&
      llvm::all_of(op->getOperandTypes(), isScalar))
    return Placement::Either;
  return Placement::Host;
}

struct OffloadToGPUPass
    : public distopt::impl::OffloadToGPUPassBase<OffloadToGPUPass> {
  using OffloadToGPUPassBase::OffloadToGPUPassBase;

  void runOnOperation() override;

private:
  LogicalResult toParallelLoops(func::FuncOp func);
  LogicalResult toDeviceMemory(func::FuncOp func);
  LogicalResult placeBlock(Block &block);
  FailureOr<scf::ParallelOp> mapParallelLoop(scf::ParallelOp loop);
  void fuseLaunches(ArrayRef<scf::ParallelOp> run);
  LogicalResult launchOneThread(ArrayRef<Operation *> group);

  /// Where the host-side copies of the scalars kernels compute live.
  Block *entry = nullptr;
};

LogicalResult OffloadToGPUPass::toParallelLoops(func::FuncOp func) {
  IRRewriter rewriter(func.getContext());
  SmallVector<memref::CopyOp> copies;
  func.walk([&](memref::CopyOp op) { copies.push_back(op); });
  for (memref::CopyOp copy : copies) {
    rewriter.setInsertionPoint(copy);
    rewriter.replaceOpWithNewOp<linalg::CopyOp>(copy, copy.getSource(),
                                                copy.getTarget());
  }
  SmallVector<linalg::LinalgOp> linalgOps;
  func.walk([&](linalg::LinalgOp op) { linalgOps.push_back(op); });
  for (linalg::LinalgOp op : linalgOps) {
    if (!op.hasPureBufferSemantics())
      return op->emitOpError("is not bufferized; run the GPU lowering on a "
                             "bufferized step");
    // A whole-tensor reduction would be one thread's loop: partial results
    // of 128 blocks of 256 threads, combined in order by one thread.
    if (auto generic = dyn_cast<linalg::GenericOp>(op.getOperation()))
      if (succeeded(splitWholeReduction(rewriter, generic,
                                        {ReductionSplit::Strided, 128 * 256})))
        continue;
    rewriter.setInsertionPoint(op);
    if (failed(linalg::linalgOpToParallelLoops(rewriter, op)))
      return op->emitOpError("could not be turned into loops for the GPU");
    rewriter.eraseOp(op);
  }
  return success();
}

/// Buffers move to device memory: allocations, stack buffers and constants.
LogicalResult OffloadToGPUPass::toDeviceMemory(func::FuncOp func) {
  IRRewriter rewriter(func.getContext());
  SmallVector<Operation *> ops;
  func.walk([&](Operation *op) {
    if (isa<memref::AllocOp, memref::AllocaOp, memref::DeallocOp,
            memref::GetGlobalOp>(op))
      ops.push_back(op);
  });
  for (Operation *op : ops) {
    if (op->getParentOfType<scf::ParallelOp>())
      return op->emitOpError("inside a parallel loop cannot run on the GPU: "
                             "device code does not allocate");
    rewriter.setInsertionPoint(op);
    Location loc = op->getLoc();
    if (auto dealloc = dyn_cast<memref::DeallocOp>(op)) {
      rewriter.replaceOpWithNewOp<gpu::DeallocOp>(op, TypeRange{}, ValueRange{},
                                                  dealloc.getMemref());
      continue;
    }
    auto type = cast<MemRefType>(op->getResult(0).getType());
    if (type.getMemorySpace())
      return op->emitOpError("has a memory space; the GPU lowering expects "
                             "buffers in the default one");
    if (!type.getLayout().isIdentity())
      return op->emitOpError("has a layout; the GPU lowering allocates "
                             "buffers with the identity layout only");
    SmallVector<Value> sizes;
    if (auto alloc = dyn_cast<memref::AllocOp>(op))
      sizes.assign(alloc.getDynamicSizes().begin(),
                   alloc.getDynamicSizes().end());
    else if (auto alloca = dyn_cast<memref::AllocaOp>(op))
      sizes.assign(alloca.getDynamicSizes().begin(),
                   alloca.getDynamicSizes().end());
    auto device = gpu::AllocOp::create(
        rewriter, loc, type, /*asyncToken=*/Type(), ValueRange{}, sizes,
        ValueRange{}, /*hostShared=*/false);
    Value buffer = device.getMemref();
    if (isa<memref::AllocOp>(op)) {
      // Freed where bufferization freed it, or by the caller if returned.
      rewriter.replaceOp(op, buffer);
      continue;
    }
    // Stack buffers and constants live until the end of their block.
    if (isa<memref::GetGlobalOp>(op)) {
      op->getResult(0).replaceAllUsesWith(buffer);
      rewriter.moveOpBefore(op, device);
      rewriter.setInsertionPointAfter(device);
      gpu::MemcpyOp::create(rewriter, loc, TypeRange{}, ValueRange{}, buffer,
                            op->getResult(0));
    } else {
      rewriter.replaceOp(op, buffer);
    }
    // A returned constant's copy belongs to the caller, like any result.
    Operation *terminator = device->getBlock()->getTerminator();
    if (llvm::is_contained(terminator->getOperands(), buffer))
      continue;
    rewriter.setInsertionPoint(terminator);
    gpu::DeallocOp::create(rewriter, loc, TypeRange{}, ValueRange{}, buffer);
  }
  return success();
}

/// Element-wise loops become launches: the nest collapsed to one dimension,
/// tiled by the block size, tiles on blocks and elements on threads.
FailureOr<scf::ParallelOp>
OffloadToGPUPass::mapParallelLoop(scf::ParallelOp loop) {
  MLIRContext *ctx = loop.getContext();
  if (loop.getNumLoops() > 1) {
    IRRewriter rewriter(ctx);
    Operation *next = loop->getNextNode();
    std::vector<unsigned> all(loop.getNumLoops());
    std::iota(all.begin(), all.end(), 0);
    rewriter.setInsertionPoint(loop);
    collapseParallelLoops(rewriter, loop, {all});
    loop = dyn_cast_or_null<scf::ParallelOp>(next->getPrevNode());
    if (!loop) {
      next->emitError("internal error: collapsing a parallel loop did not "
                      "leave it before this op");
      return failure();
    }
  }
  auto [blocks, threads] = scf::tileParallelLoop(loop, {blockSize},
                                                 /*noMinMaxBounds=*/true);
  auto identity = AffineMap::getMultiDimIdentityMap(1, ctx);
  auto mapping = [&](gpu::Processor processor) {
    return gpu::ParallelLoopDimMappingAttr::get(ctx, processor, identity,
                                                identity);
  };
  if (failed(gpu::setMappingAttr(blocks, mapping(gpu::Processor::BlockX))) ||
      failed(gpu::setMappingAttr(threads, mapping(gpu::Processor::ThreadX)))) {
    blocks->emitError("internal error: could not map to the GPU");
    return failure();
  }
  // Loops nested deeper run sequentially in each thread: as scf.for nests
  // (convert-parallel-loops-to-gpu gives up, silently, on a parallel loop
  // inside another op's region, such as a contraction's j loop inside its
  // k loop), or mapped as sequential where they reduce.
  SmallVector<scf::ParallelOp> inner;
  threads.getBody()->walk([&](scf::ParallelOp op) { inner.push_back(op); });
  IRRewriter rewriter(ctx);
  for (scf::ParallelOp op : inner) { // innermost first
    if (op.getNumResults() == 0) {
      rewriter.setInsertionPoint(op);
      if (succeeded(scf::parallelForToNestedFors(rewriter, op)))
        continue;
    }
    SmallVector<gpu::ParallelLoopDimMappingAttr> seq(
        op.getNumLoops(), mapping(gpu::Processor::Sequential));
    if (failed(gpu::setMappingAttr(op, seq)))
      return op->emitError("internal error: could not map to the GPU");
  }
  return blocks;
}

/// The value of an index computed from constants (tiling leaves products
/// such as 1 * 256 unfolded).
std::optional<int64_t> staticIndex(Value value) {
  if (std::optional<int64_t> constant = getConstantIntValue(value))
    return constant;
  Operation *def = value.getDefiningOp();
  if (!def || !isa<arith::MulIOp, arith::AddIOp>(def))
    return std::nullopt;
  std::optional<int64_t> lhs = staticIndex(def->getOperand(0));
  std::optional<int64_t> rhs = staticIndex(def->getOperand(1));
  if (!lhs || !rhs)
    return std::nullopt;
  return isa<arith::MulIOp>(def) ? *lhs * *rhs : *lhs + *rhs;
}

/// The buffers `op` reads and writes (their roots).
void accessedBuffers(Operation *op, llvm::SmallPtrSetImpl<Value> &reads,
                     llvm::SmallPtrSetImpl<Value> &writes) {
  op->walk([&](MemoryEffectOpInterface nested) {
    SmallVector<MemoryEffects::EffectInstance> effects;
    nested.getEffects(effects);
    for (MemoryEffects::EffectInstance &effect : effects) {
      Value value = effect.getValue();
      if (!value || !isa<BaseMemRefType>(value.getType()))
        continue;
      if (isa<MemoryEffects::Read>(effect.getEffect()))
        reads.insert(rootBuffer(value));
      else if (isa<MemoryEffects::Write>(effect.getEffect()))
        writes.insert(rootBuffer(value));
    }
  });
}

/// Element-wise launches that follow each other and touch no buffer another
/// one writes become one launch (a multi-tensor kernel): its blocks are the
/// launches' blocks one after the other, and each block runs the body of the
/// launch it belongs to. Distinct root buffers (arguments, allocations) are
/// taken not to overlap, as the step ABI requires of arguments.
void OffloadToGPUPass::fuseLaunches(ArrayRef<scf::ParallelOp> run) {
  SmallVector<SmallVector<scf::ParallelOp>> groups(1);
  llvm::SmallPtrSet<Value, 16> groupReads, groupWrites;
  // Kernel parameters: what the fused body uses from outside (a memref is
  // a descriptor). PTX before 8.1 allows 4352 bytes; stay below.
  constexpr int64_t kParameterBudget = 4096;
  llvm::SetVector<Value> groupParameters;
  auto parameterBytes = [](const llvm::SetVector<Value> &values) {
    int64_t bytes = 0;
    for (Value value : values)
      if (auto memref = dyn_cast<MemRefType>(value.getType()))
        bytes += 8 * (3 + 2 * memref.getRank());
      else
        bytes += 8;
    return bytes;
  };
  for (scf::ParallelOp loop : run) {
    llvm::SmallPtrSet<Value, 16> reads, writes;
    accessedBuffers(loop, reads, writes);
    llvm::SetVector<Value> parameters = groupParameters;
    getUsedValuesDefinedAbove(loop.getRegion(), parameters);
    auto intersects = [](const llvm::SmallPtrSetImpl<Value> &a,
                         const llvm::SmallPtrSetImpl<Value> &b) {
      return llvm::any_of(a, [&](Value v) { return b.contains(v); });
    };
    // Fusable: static bounds, and the blocks loop holds just the threads
    // loop (as tiling makes it).
    Block *body = loop.getBody();
    bool fusable = staticIndex(loop.getLowerBound()[0]) &&
                   staticIndex(loop.getUpperBound()[0]) &&
                   staticIndex(loop.getStep()[0]) &&
                   body->getOperations().size() == 2 &&
                   isa<scf::ParallelOp>(body->front());
    if (!fusable || intersects(writes, groupReads) ||
        intersects(writes, groupWrites) || intersects(reads, groupWrites) ||
        parameterBytes(parameters) > kParameterBudget) {
      groups.emplace_back();
      groupReads.clear();
      groupWrites.clear();
      parameters.clear();
      getUsedValuesDefinedAbove(loop.getRegion(), parameters);
    }
    if (!fusable) {
      groupParameters.clear(); // the new group is still empty
      continue;
    }
    groupParameters = std::move(parameters);
    groups.back().push_back(loop);
    groupReads.insert(reads.begin(), reads.end());
    groupWrites.insert(writes.begin(), writes.end());
  }
  MLIRContext *ctx = &getContext();
  auto identity = AffineMap::getMultiDimIdentityMap(1, ctx);
  auto mapping = [&](gpu::Processor processor) {
    return gpu::ParallelLoopDimMappingAttr::get(ctx, processor, identity,
                                                identity);
  };
  for (SmallVector<scf::ParallelOp> &group : groups) {
    if (group.size() < 2)
      continue;
    // Blocks [starts[i], starts[i + 1]) run launch i.
    SmallVector<int64_t> starts = {0}, lower, steps;
    for (scf::ParallelOp loop : group) {
      int64_t lb = *staticIndex(loop.getLowerBound()[0]);
      int64_t ub = *staticIndex(loop.getUpperBound()[0]);
      int64_t step = *staticIndex(loop.getStep()[0]);
      lower.push_back(lb);
      steps.push_back(step);
      starts.push_back(starts.back() + (ub - lb + step - 1) / step);
    }
    Location loc = group.back().getLoc();
    OpBuilder b(group.back());
    auto index = [&](OpBuilder &at, int64_t v) -> Value {
      return arith::ConstantIndexOp::create(at, loc, v);
    };
    Value zero = index(b, 0), one = index(b, 1);
    auto blocks = scf::ParallelOp::create(
        b, loc, ValueRange{zero}, ValueRange{index(b, starts.back())},
        ValueRange{one}, [&](OpBuilder &bb, Location, ValueRange blockIvs) {
          Value block = blockIvs[0];
          auto threads = scf::ParallelOp::create(
              bb, loc, ValueRange{zero}, ValueRange{index(bb, blockSize)},
              ValueRange{one}, [&](OpBuilder &tb, Location, ValueRange ivs) {
                // Which launch this block belongs to.
                Value which = zero;
                for (size_t i = 1; i < group.size(); ++i) {
                  Value past =
                      arith::CmpIOp::create(tb, loc, arith::CmpIPredicate::uge,
                                            block, index(tb, starts[i]));
                  which = arith::AddIOp::create(
                      tb, loc, which,
                      arith::IndexCastUIOp::create(
                          tb, loc, tb.getIndexType(),
                          arith::ExtUIOp::create(tb, loc, tb.getI64Type(),
                                                 past)));
                }
                auto cases = llvm::to_vector(
                    llvm::seq<int64_t>(0, static_cast<int64_t>(group.size())));
                auto dispatch = scf::IndexSwitchOp::create(
                    tb, loc, TypeRange{}, which, cases, cases.size());
                for (auto [i, launch] : llvm::enumerate(group)) {
                  scf::ParallelOp loop = launch;
                  OpBuilder cb = OpBuilder::atBlockEnd(
                      &dispatch.getCaseRegions()[i].emplaceBlock());
                  // The launch's own tile offset for this block.
                  Value local = arith::SubIOp::create(cb, loc, block,
                                                      index(cb, starts[i]));
                  Value offset = arith::AddIOp::create(
                      cb, loc, index(cb, lower[i]),
                      arith::MulIOp::create(cb, loc, local,
                                            index(cb, steps[i])));
                  auto inner = cast<scf::ParallelOp>(loop.getBody()->front());
                  IRMapping map;
                  map.map(loop.getInductionVars()[0], offset);
                  map.map(inner.getInductionVars()[0], ivs[0]);
                  for (Operation &op : inner.getBody()->without_terminator())
                    cb.clone(op, map);
                  scf::YieldOp::create(cb, loc);
                }
                OpBuilder inDefault = OpBuilder::atBlockEnd(
                    &dispatch.getDefaultRegion().emplaceBlock());
                scf::YieldOp::create(inDefault, loc);
                scf::ReduceOp::create(tb, loc);
              });
          (void)gpu::setMappingAttr(threads, mapping(gpu::Processor::ThreadX));
          scf::ReduceOp::create(bb, loc);
        });
    (void)gpu::setMappingAttr(blocks, mapping(gpu::Processor::BlockX));
    for (scf::ParallelOp loop : group)
      loop.erase();
  }
}

/// Runs `group` (consecutive ops of one block) in a one-thread kernel. The
/// scalars it computes for ops after it reach the host through a device
/// buffer each.
LogicalResult OffloadToGPUPass::launchOneThread(ArrayRef<Operation *> group) {
  Operation *first = group.front();
  Location loc = first->getLoc();
  OpBuilder b(first);
  llvm::SmallPtrSet<Operation *, 16> members(group.begin(), group.end());
  SmallVector<Value> escaping;
  for (Operation *op : group)
    for (Value result : op->getResults())
      if (llvm::any_of(result.getUsers(), [&](Operation *user) {
            return !members.contains(
                first->getBlock()->findAncestorOpInBlock(*user));
          })) {
        if (!isScalar(result.getType()))
          return op->emitOpError("computes a ")
                 << result.getType()
                 << " that host code uses, which the GPU lowering cannot "
                    "bring back from a kernel";
        escaping.push_back(result);
      }

  SmallVector<Value> deviceCopies;
  for (Value value : escaping) {
    auto type = MemRefType::get({1}, value.getType());
    deviceCopies.push_back(gpu::AllocOp::create(b, loc, type, Type(),
                                                ValueRange{}, ValueRange{},
                                                ValueRange{}, false)
                               .getMemref());
  }
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  auto launch = gpu::LaunchOp::create(b, loc, one, one, one, one, one, one);
  Block &body = launch.getBody().front();
  b.setInsertionPointToStart(&body);
  gpu::TerminatorOp::create(b, loc);
  for (Operation *op : group)
    op->moveBefore(body.getTerminator());
  b.setInsertionPoint(body.getTerminator());
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  for (auto [value, copy] : llvm::zip(escaping, deviceCopies))
    memref::StoreOp::create(b, loc, value, copy, zero);

  b.setInsertionPointAfter(launch);
  Value hostZero = arith::ConstantIndexOp::create(b, loc, 0);
  for (auto [value, copy] : llvm::zip(escaping, deviceCopies)) {
    auto type = cast<MemRefType>(copy.getType());
    Value staging;
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(entry);
      staging = memref::AllocaOp::create(b, loc, type);
    }
    gpu::MemcpyOp::create(b, loc, TypeRange{}, ValueRange{}, staging, copy);
    Value onHost = memref::LoadOp::create(b, loc, staging, hostZero);
    gpu::DeallocOp::create(b, loc, TypeRange{}, ValueRange{}, copy);
    value.replaceUsesWithIf(onHost, [&](OpOperand &use) {
      return !launch->isProperAncestor(use.getOwner());
    });
  }
  return success();
}

/// Places the ops of a host block: parallel loops become element-wise
/// launches, runs of element-touching ops one-thread launches, and blocks
/// nested in host ops are placed the same way.
LogicalResult OffloadToGPUPass::placeBlock(Block &block) {
  SmallVector<Operation *> ops =
      llvm::map_to_vector(block, [](Operation &op) { return &op; });
  SmallVector<Operation *> group;
  bool groupTouchesElements = false;
  auto flush = [&]() -> LogicalResult {
    while (!group.empty() && place(group.back()) == Placement::Either)
      group.pop_back();
    LogicalResult result = success();
    if (groupTouchesElements && !group.empty())
      result = launchOneThread(group);
    group.clear();
    groupTouchesElements = false;
    return result;
  };
  // Element-wise launches in a row, with only pure scalar or view ops and
  // allocations between them, are candidates for one multi-tensor launch.
  SmallVector<scf::ParallelOp> run;
  auto endRun = [&] {
    fuseLaunches(run);
    run.clear();
  };
  for (Operation *op : ops) {
    if (auto loop = dyn_cast<scf::ParallelOp>(op);
        loop && loop.getInitVals().empty()) {
      if (failed(flush()))
        return failure();
      FailureOr<scf::ParallelOp> mapped = mapParallelLoop(loop);
      if (failed(mapped))
        return failure();
      run.push_back(*mapped);
      continue;
    }
    // Allocations may sit between them: the fused launch comes after.
    if (!run.empty() && ((!isMemoryEffectFree(op) && !isa<gpu::AllocOp>(op)) ||
                         op->hasTrait<OpTrait::IsTerminator>()))
      endRun();
    Placement placement = isa<scf::ParallelOp>(op)
                              ? Placement::Kernel // a loop with reductions
                              : place(op);
    if (placement == Placement::Kernel) {
      group.push_back(op);
      groupTouchesElements = true;
      continue;
    }
    if (placement == Placement::Either && !group.empty()) {
      group.push_back(op);
      continue;
    }
    if (failed(flush()))
      return failure();
    for (Region &region : op->getRegions())
      for (Block &nested : region)
        if (failed(placeBlock(nested)))
          return failure();
  }
  endRun();
  return flush();
}

void OffloadToGPUPass::runOnOperation() {
  func::FuncOp func = getOperation();
  if (func.isExternal())
    return;
  if (blockSize <= 0 || blockSize > 1024) {
    func.emitError("block-size must be in 1..1024, got ") << blockSize;
    return signalPassFailure();
  }
  entry = &func.getBody().front();
  // Device memory is a property of buffers: tensors are not placed yet.
  auto isTensor = [](Type type) { return isa<TensorType>(type); };
  WalkResult tensors = func.walk([&](Operation *op) {
    if (llvm::none_of(op->getResultTypes(), isTensor) &&
        llvm::none_of(op->getOperandTypes(), isTensor))
      return WalkResult::advance();
    op->emitOpError("works on tensors: --distopt-offload-to-gpu runs on a "
                    "bufferized step (distopt-lower-to-gpu bufferizes first)");
    return WalkResult::interrupt();
  });
  if (tensors.wasInterrupted())
    return signalPassFailure();
  if (failed(toParallelLoops(func)) || failed(toDeviceMemory(func)))
    return signalPassFailure();
  for (Block &block : func.getBody())
    if (failed(placeBlock(block)))
      return signalPassFailure();
}

} // namespace

namespace {
struct VerifyOffloadPass
    : mlir::distopt::impl::VerifyOffloadPassBase<VerifyOffloadPass> {
  void runOnOperation() override {
    WalkResult result = getOperation().walk([](scf::ParallelOp loop) {
      if (loop->getParentOfType<gpu::LaunchOp>())
        return WalkResult::advance();
      loop.emitError("internal error: a parallel loop was not mapped to the "
                     "GPU; on the host it would touch device memory");
      return WalkResult::interrupt();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
