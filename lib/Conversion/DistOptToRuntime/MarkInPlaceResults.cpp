//===- MarkInPlaceResults.cpp - results left in their arguments -*- C++ -*-===//
//
// --distopt-mark-in-place-results: after bufferization, a result of the
// step that updates the argument it came in (the same role and name,
// docs/step-abi.md) is written into that argument's buffer and dropped from
// the results; distopt.in_place_results says which argument holds each.
//
//===----------------------------------------------------------------------===//

#include "distopt/Conversion/DistOptToRuntime/BufferUses.h"
#include "distopt/Conversion/DistOptToRuntime/RuntimeCalls.h"
#include "distopt/Conversion/Passes.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/BitVector.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_MARKINPLACERESULTSPASS
#include "distopt/Conversion/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

/// Per result, the argument it updates (abi::updatesArgument), if it has a
/// role: the one whose buffer the driver reads it from when it stays there.
/// One lookup per result (steps have tens of thousands of both).
static SmallVector<BlockArgument> updatedArguments(func::FuncOp func) {
  DenseMap<std::pair<StringRef, Attribute>, BlockArgument> byRoleAndName;
  for (BlockArgument arg : func.getArguments())
    byRoleAndName.try_emplace({abi::getArgRole(func, arg.getArgNumber()),
                               func.getArgAttr(arg.getArgNumber(), abi::kName)},
                              arg);
  SmallVector<BlockArgument> updated(func.getNumResults());
  for (unsigned j = 0, e = func.getNumResults(); j < e; ++j)
    if (StringRef role = abi::getResultRole(func, j); !role.empty())
      updated[j] =
          byRoleAndName.lookup({role, func.getResultAttr(j, abi::kName)});
  return updated;
}

/// A result copied from a view into a new buffer (a parameter unpacked from
/// the all-gathered flat buffer, ZeRO) is copied into the buffer of the
/// argument it updates instead, when nothing uses that argument after the
/// copy: the result then stays in place, and no buffer is added.
static void copyIntoArgument(OpOperand &operand, BlockArgument arg) {
  auto alloc = operand.get().getDefiningOp<memref::AllocOp>();
  if (!alloc || !arg ||
      std::distance(alloc->use_begin(), alloc->use_end()) != 2)
    return;
  memref::CopyOp copy;
  for (Operation *user : alloc->getUsers())
    if (auto c = dyn_cast<memref::CopyOp>(user); c && c.getTarget() == alloc)
      copy = c;
  if (!copy || copy->getBlock() != alloc->getBlock() ||
      arg.getType() != alloc.getType() || rootBuffer(copy.getSource()) == arg ||
      !unusedAfter(arg, copy))
    return;
  copy.getTargetMutable().assign(arg);
  operand.set(arg);
  alloc.erase();
}

/// A result that is a view, in its argument's own type, of a buffer the step
/// allocates (the parameter at offset 0 of ZeRO's all-gathered flat buffer:
/// bufferization needs no copy for it) is copied into that argument just
/// before the return. Returned, the view would keep the whole buffer alive
/// into the next step, which then allocates another (twice the memory, and
/// page faults in the second step of every run).
static void copyViewIntoArgument(OpOperand &operand, BlockArgument arg) {
  Value view = operand.get();
  Value root = rootBuffer(view);
  if (!arg || root == view || !root.getDefiningOp<memref::AllocOp>() ||
      arg.getType() != view.getType())
    return;
  // Any other result in the argument's buffer would see the copy.
  auto ret = cast<func::ReturnOp>(operand.getOwner());
  if (llvm::any_of(ret.getOperands(),
                   [&](Value other) { return rootBuffer(other) == arg; }))
    return;
  OpBuilder b(ret);
  memref::CopyOp::create(b, ret.getLoc(), view, arg);
  operand.set(arg);
}

/// A result all-gathered into a buffer of its own (ZeRO-1/2's updated flat
/// parameters, --distopt-param-as-bucket-view) is gathered into the buffer
/// of the argument it updates instead, when nothing uses that argument after
/// the gather. This rank's chunk usually lies in its slot there already (the
/// update wrote the shard, a view of the argument, in place): the runtime
/// leaves it, and checks that the send buffer overlaps nothing else.
static void gatherIntoArgument(OpOperand &operand, BlockArgument arg) {
  auto alloc = operand.get().getDefiningOp<memref::AllocOp>();
  if (!alloc || !arg || arg.getType() != alloc.getType())
    return;
  // The gather writing the buffer, found through its receive pointer (an
  // asynchronous one writes it until its wait: the argument must be dead
  // from the start).
  func::CallOp gather;
  for (Operation *user : alloc->getUsers())
    if (auto pointer = dyn_cast<memref::ExtractAlignedPointerAsIndexOp>(user)) {
      auto [call, index] = RuntimeCalls::pointerUser(pointer);
      if (call && index == 2 &&
          (call.getCallee() == "distopt_rt_all_gather" ||
           call.getCallee() == "distopt_rt_all_gather_start"))
        gather = call;
    }
  if (!gather || gather->getBlock() != alloc->getBlock())
    return;
  // Before the gather the buffer is only addressed, for the gather itself;
  // the argument is dead after it.
  for (Operation *user : alloc->getUsers()) {
    bool addressing = isa<memref::ExtractAlignedPointerAsIndexOp,
                          memref::ExtractStridedMetadataOp>(user);
    Operation *inBlock = alloc->getBlock()->findAncestorOpInBlock(*user);
    if (!addressing && (!inBlock || !gather->isBeforeInBlock(inBlock)))
      return;
  }
  if (!unusedAfter(arg, gather))
    return;
  alloc.getResult().replaceAllUsesWith(arg);
  alloc.erase();
}

namespace {
/// The value a result really is: through casts, through reshapes that end
/// in the type they started from (a gradient collapsed to a matrix for
/// PowerSGD, updated, expanded back: the same memory, the same layout), and
/// through an scf.if whose branches both yield it (a step skipped on
/// overflow updates in place under scf.if and yields the argument either
/// way; bufferization leaves the if's result for the canonicalizer to fold).
/// `seen` remembers each if's answer: ZeRO's owners chain one if per
/// tensor, each branch yielding the previous if's result, and following
/// both branches anew at each link took 2^n walks (minutes at ResNet-50's
/// 54 matrices).
class ViewedArguments {
public:
  Value operator()(Value value) {
    while (auto cast = value.getDefiningOp<memref::CastOp>())
      value = cast.getSource();
    Value root = value;
    while (Operation *def = root.getDefiningOp()) {
      if (auto cast = dyn_cast<memref::CastOp>(def)) {
        root = cast.getSource();
      } else if (auto collapse = dyn_cast<memref::CollapseShapeOp>(def)) {
        root = collapse.getSrc();
      } else if (auto expand = dyn_cast<memref::ExpandShapeOp>(def)) {
        root = expand.getSrc();
      } else if (auto branch = dyn_cast<scf::IfOp>(def);
                 branch && !branch.getElseRegion().empty()) {
        Value taken = throughBranches(branch, llvm::cast<OpResult>(root));
        if (!taken)
          break;
        root = taken;
      } else {
        break;
      }
    }
    return root.getType() == value.getType() ? root : value;
  }

private:
  /// What both branches yield as `result`, seen through; null if they
  /// differ.
  Value throughBranches(scf::IfOp branch, OpResult result) {
    auto [it, fresh] = seen.try_emplace(result, Value());
    if (!fresh)
      return it->second;
    unsigned index = result.getResultNumber();
    Value taken = (*this)(branch.thenYield().getOperand(index));
    Value other = (*this)(branch.elseYield().getOperand(index));
    Value answer = taken == other ? taken : Value();
    seen[result] = answer;
    return answer;
  }

  llvm::DenseMap<Value, Value> seen;
};

struct MarkInPlaceResultsPass
    : public distopt::impl::MarkInPlaceResultsPassBase<MarkInPlaceResultsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    module.walk([&](func::FuncOp func) {
      // A function that is called keeps its results: its callers use them.
      if (func.isExternal() || !SymbolTable::symbolKnownUseEmpty(func, module))
        return;
      if (!func.getBody().hasOneBlock())
        return;
      auto ret =
          dyn_cast<func::ReturnOp>(func.getBody().front().getTerminator());
      if (!ret)
        return;
      SmallVector<BlockArgument> updated = updatedArguments(func);
      for (OpOperand &operand : ret->getOpOperands()) {
        BlockArgument arg = updated[operand.getOperandNumber()];
        gatherIntoArgument(operand, arg);
        copyIntoArgument(operand, arg);
        copyViewIntoArgument(operand, arg);
      }
      SmallVector<int64_t> inPlace;
      llvm::BitVector dropped(ret.getNumOperands());
      ViewedArguments viewedArgument;
      for (OpOperand &operand : ret->getOpOperands()) {
        auto arg = dyn_cast<BlockArgument>(viewedArgument(operand.get()));
        unsigned result = operand.getOperandNumber();
        // Only a result that updates the argument it returns in (the same
        // role and name, docs/step-abi.md) stays there: another argument's
        // buffer (a gradient returned as the parameter, say) is refilled
        // before the next step, so such a result is returned as a copy.
        bool isArg = arg && isa<BaseMemRefType>(arg.getType()) &&
                     abi::updatesArgument(func, result, arg.getArgNumber());
        inPlace.push_back(isArg ? static_cast<int64_t>(arg.getArgNumber())
                                : int64_t{-1});
        if (isArg)
          dropped.set(result);
      }
      func->setAttr(abi::kInPlaceResults,
                    DenseI64ArrayAttr::get(func.getContext(), inPlace));
      ret->eraseOperands(dropped);
      if (failed(func.eraseResults(dropped)))
        signalPassFailure();
    });
  }
};
} // namespace
