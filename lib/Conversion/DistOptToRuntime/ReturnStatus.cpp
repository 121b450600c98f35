//===- ReturnStatus.cpp - entry points that return the step's status -*- C++
//-*-===//
//
// --distopt-return-status: a runtime call that fails (a collective timed
// out, a peer died, ranks disagree) is checked where it is made, and the
// check ends in distopt_rt_fatal, which does not return. An entry point
// that C code calls (through the C interface distopt-compile asks for)
// instead branches from there to a block that returns the status to its
// caller, which frees what the step still holds; the packed entry point
// returns it (docs/lowering.md).
//
//===----------------------------------------------------------------------===//

#include "distopt/Conversion/DistOptToRuntime/RuntimeCalls.h"
#include "distopt/Conversion/Passes.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/UB/IR/UBOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/RegionUtils.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_RETURNSTATUSPASS
#include "distopt/Conversion/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

/// Asks --convert-func-to-llvm for a C wrapper: what C code calls.
constexpr llvm::StringLiteral kCInterfaceAttr = "llvm.emit_c_interface";

/// The calls of distopt_rt_fatal in `func`.
SmallVector<func::CallOp> fatalCalls(func::FuncOp func) {
  SmallVector<func::CallOp> calls;
  func.walk([&](func::CallOp call) {
    if (call.getCallee() == RuntimeCalls::kFatal)
      calls.push_back(call);
  });
  return calls;
}

/// Gives `func` an i32 result after its own, 0 where it returns, and
/// replaces each call of distopt_rt_fatal with a branch to a block that
/// returns the call's status (and poison for the other results, which the
/// caller does not read then).
LogicalResult returnStatus(RewriterBase &rewriter, func::FuncOp func,
                           ArrayRef<func::CallOp> fatal) {
  Region &body = func.getBody();
  Type i32 = rewriter.getI32Type();
  for (func::CallOp call : fatal) {
    if (call.getNumOperands() != 1 || call.getOperand(0).getType() != i32 ||
        call.getNumResults() != 0)
      return call.emitError() << "expected " << RuntimeCalls::kFatal
                              << " to take the i32 status and return nothing";
    if (call->getParentRegion() != &body)
      return call.emitError()
             << "a runtime call inside a nested region (a parallel loop) "
                "cannot return the step's status";
  }
  Location loc = func.getLoc();
  SmallVector<Type> results(func.getResultTypes());
  results.push_back(i32);
  func.setType(rewriter.getFunctionType(func.getArgumentTypes(), results));

  for (Block &block : body)
    if (auto ret = dyn_cast<func::ReturnOp>(block.getTerminator())) {
      rewriter.setInsertionPoint(ret);
      Value ok = arith::ConstantOp::create(rewriter, ret.getLoc(),
                                           rewriter.getI32IntegerAttr(0));
      ret.getOperandsMutable().append(ok);
    }

  Block *failed = rewriter.createBlock(&body, body.end(), {i32}, {loc});
  SmallVector<Value> values;
  for (Type type : func.getResultTypes().drop_back())
    values.push_back(ub::PoisonOp::create(rewriter, loc, type));
  values.push_back(failed->getArgument(0));
  func::ReturnOp::create(rewriter, loc, values);

  for (func::CallOp call : fatal) {
    // What follows the call was never reached: it ends in the failed block.
    rewriter.splitBlock(call->getBlock(), std::next(call->getIterator()));
    rewriter.setInsertionPoint(call);
    cf::BranchOp::create(rewriter, call.getLoc(), failed, call.getOperands());
    rewriter.eraseOp(call);
  }
  (void)eraseUnreachableBlocks(rewriter, body);
  func->setAttr(abi::kReturnsStatus, rewriter.getUnitAttr());
  return success();
}

struct ReturnStatusPass
    : public distopt::impl::ReturnStatusPassBase<ReturnStatusPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    IRRewriter rewriter(&getContext());
    for (auto func : module.getOps<func::FuncOp>()) {
      // Only C callers take the status: compiled callers (a test's @main
      // under mlir-runner, and @main itself) keep the fatal path.
      if (func.isExternal() || !func->hasAttr(kCInterfaceAttr) ||
          !SymbolTable::symbolKnownUseEmpty(func, module))
        continue;
      SmallVector<func::CallOp> fatal = fatalCalls(func);
      if (fatal.empty())
        continue;
      if (failed(returnStatus(rewriter, func, fatal)))
        return signalPassFailure();
    }
    // Declared by the checks; gone where every caller returns its status.
    auto decl = module.lookupSymbol<func::FuncOp>(RuntimeCalls::kFatal);
    if (decl && decl.isExternal() &&
        SymbolTable::symbolKnownUseEmpty(decl, module))
      decl.erase();
  }
};

} // namespace
