//===- AsyncInPlace.cpp - async collectives in their input's buffer -*- C++
//-*-===//
//
// --distopt-async-in-place: a bufferized *_start copies its input into a
// buffer its request owns, because one-shot bufferization cannot see the
// request using the buffer until the wait. Where nothing else uses the input
// buffer after that copy, the request can use the buffer itself.
//
//===----------------------------------------------------------------------===//

#include "distopt/Conversion/DistOptToRuntime/BufferUses.h"
#include "distopt/Conversion/DistOptToRuntime/BufferizableOpInterfaceImpl.h"
#include "distopt/Conversion/Passes.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/SymbolTable.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_ASYNCINPLACEPASS
#include "distopt/Conversion/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

struct AsyncInPlacePass
    : public distopt::impl::AsyncInPlacePassBase<AsyncInPlacePass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    module.walk([&](func::FuncOp func) {
      // A caller's buffers are the caller's: bufferization decided what a
      // called function may write, and this pass must not add to it.
      bool called = !SymbolTable::symbolKnownUseEmpty(func, module);
      SmallVector<memref::CopyOp> copies;
      func.walk([&](memref::CopyOp copy) {
        if (copy->removeAttr(abi::kRequestInput))
          copies.push_back(copy);
      });
      for (memref::CopyOp copy : copies) {
        Value source = copy.getSource(), target = copy.getTarget();
        auto alloc = target.getDefiningOp<memref::AllocOp>();
        if (!alloc || source.getType() != target.getType())
          continue;
        Value root = rootBuffer(source);
        if (auto arg = dyn_cast<BlockArgument>(root)) {
          // In a loop, the next iteration would read what the request wrote.
          if (called || arg.getOwner() != &func.front() ||
              copy->getBlock() != &func.front() ||
              !abi::mayUpdateInPlace(abi::getArgRole(func, arg.getArgNumber())))
            continue;
        } else if (!root.getDefiningOp<memref::AllocOp>() ||
                   root.getDefiningOp()->getBlock() != copy->getBlock()) {
          continue;
        }
        if (!unusedAfter(root, copy))
          continue;
        target.replaceAllUsesWith(source);
        copy.erase();
        if (alloc->use_empty())
          alloc.erase();
      }
    });
  }
};

} // namespace
