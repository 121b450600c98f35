//===- RuntimeCalls.h - calls of the runtime's C ABI ------------*- C++ -*-===//
//
// How compiled code calls runtime/include/distopt_rt.h: declarations made on
// demand, the communicators of process groups, pointers into buffers, and a
// check of every returned status: a failure calls distopt_rt_fatal, which
// --distopt-return-status turns into returning the status from the step's
// entry point (the runtime's message names the rank and the operation).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_CONVERSION_DISTOPTTORUNTIME_RUNTIMECALLS_H
#define DISTOPT_CONVERSION_DISTOPTTORUNTIME_RUNTIMECALLS_H

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"

namespace mlir::distopt {

class RuntimeCalls {
public:
  /// What a failed check calls (it does not return).
  static constexpr llvm::StringLiteral kFatal = "distopt_rt_fatal";

  RuntimeCalls(OpBuilder &builder, Location loc, Operation *at);

  /// The communicator (`distopt_rt_comm *`) of `group`: the run's world
  /// (checked to have the group's size) for a whole-world group, else the
  /// group's part split from it (distopt_rt_group, with the group's layout
  /// and name as constants in host memory).
  Value comm(ProcessGroupOp group);
  /// This process's rank in `comm`, as an index.
  Value rank(Value comm);
  /// A pointer to the first element of `buffer`, which must be contiguous.
  Value pointer(Value buffer);
  /// The call that takes the pointer pointer() built from `address` (its
  /// first op), and the operand it is; null when it is not one.
  static std::pair<func::CallOp, unsigned>
  pointerUser(memref::ExtractAlignedPointerAsIndexOp address);
  /// A stack slot for a `distopt_rt_request *`, and loading it.
  Value requestSlot();
  Value load(Value slot);
  /// Calls `name` (which returns a status) with `args` and checks it.
  void call(StringRef name, ValueRange args);

  Value i32(int64_t v);
  Value i64(int64_t v);
  Value f64(double v);

  /// The runtime's code for an element type (distopt_rt_dtype), or -1.
  static int64_t dtypeCode(Type type);
  /// The runtime's code for a reduction (distopt_rt_reduction).
  static int64_t reductionCode(ReductionKind kind);
  /// Whether `type` is a buffer the runtime can address with one pointer.
  static bool isContiguous(MemRefType type);

private:
  func::FuncOp declare(StringRef name, FunctionType type);
  /// The address of a private constant global of the module, made once
  /// per name.
  Value constant(StringRef name, Type type, Attribute value);
  /// A stack slot in the function's entry block.
  Value slot(Type element);
  void check(Value status);

  OpBuilder &b;
  Location loc;
  Operation *at;
};

} // namespace mlir::distopt

#endif // DISTOPT_CONVERSION_DISTOPTTORUNTIME_RUNTIMECALLS_H
