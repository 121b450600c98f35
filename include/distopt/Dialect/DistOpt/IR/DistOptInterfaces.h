//===- DistOptInterfaces.h - distopt op interfaces --------------*- C++ -*-===//
//
// CollectiveOpInterface, which every collective op implements, and
// OptimizerOpInterface, which every optimizer update implements.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_DIALECT_DISTOPT_IR_DISTOPTINTERFACES_H
#define DISTOPT_DIALECT_DISTOPT_IR_DISTOPTINTERFACES_H

#include "distopt/Dialect/DistOpt/IR/DistOptDialect.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/APFloat.h"

#include <optional>

namespace mlir::distopt::detail {
/// The checks common to every collective that need no symbol table: the
/// reduction and its scale, the wire type, and the yielded type's shape.
LogicalResult verifyCollectiveOp(Operation *op);
/// The checks that need the group: it exists, the root lies in it, and
/// dimension 0 of a gather or scatter matches its size.
LogicalResult verifyCollectiveSymbolUses(Operation *op,
                                         SymbolTableCollection &symbolTable);
/// The checks every optimizer update shares: types, the state count, the
/// learning rate and step where they are constants, and the runtime
/// hyperparameters' names.
LogicalResult verifyOptimizerOp(Operation *op);
} // namespace mlir::distopt::detail

namespace mlir::distopt {
/// The bytes each rank sends to move `payloadBytes` with `kind` over a group
/// of `groupSize` ranks, in the ring algorithms NCCL and MPI use for large
/// messages: all_reduce sends 2(n-1)/n of the payload, the others (n-1)/n.
double ringBytesSent(CollectiveKind kind, int64_t payloadBytes,
                     int64_t groupSize);

/// A broadcast or a reduce as distopt's runtime runs it
/// (runtime/src/Collectives.cpp): a chain along the ranks, pipelined in
/// slices (a binomial tree for broadcasts under 1 MiB). `steps`: its
/// messages in a row; `busiestBytes`: what its busiest rank sends in that
/// time, the pipeline's fill counted in (about the payload: a chain sends
/// the whole of it over each of its n - 1 links, where the ring's
/// (n-1)/n is the average over ranks). `slicedBytes`: the payload in the
/// wider of its data and wire types, which the runtime cuts a reduce's
/// slices by (a broadcast's: the payload).
struct RootedCollectiveCost {
  int64_t steps = 0;
  double busiestBytes = 0;
};
RootedCollectiveCost getRootedCollectiveCost(CollectiveKind kind,
                                             int64_t payloadBytes,
                                             int64_t slicedBytes,
                                             int64_t groupSize);

/// A key of the param spec's `optimizer` object (or a group's) that an
/// update reads, into the attribute of its name (a pair into the two
/// attributes `first` and `second`), of the type its kind says.
struct OptimizerSpecKey {
  enum Kind {
    /// A finite number: an F64Attr.
    Number,
    /// true or false: a UnitAttr, present when true.
    Flag,
    /// [first, second]: two F64Attrs of those names (Adam's betas).
    Pair,
    /// true or false: a BoolAttr (for a flag true by default).
    Bool,
    /// An integer: an I64Attr.
    Integer,
    /// [first, second, third]: a DenseF64ArrayAttr of three numbers.
    Numbers,
    /// A string: a StrAttr (the op's verifier checks its value).
    String,
    /// A dtype name (f32, bf16, f16): a TypeAttr.
    DType,
  };
  llvm::StringLiteral key;
  Kind kind;
  llvm::StringLiteral first = "", second = "", third = "";
};
} // namespace mlir::distopt

#include "distopt/Dialect/DistOpt/IR/DistOptInterfaces.h.inc"

namespace mlir::distopt {

/// The runtime entry point that executes `op`: `distopt_rt_<kind>` or
/// `distopt_rt_<kind>_start`.
std::string getRuntimeFunctionName(CollectiveOpInterface op);

} // namespace mlir::distopt

#endif // DISTOPT_DIALECT_DISTOPT_IR_DISTOPTINTERFACES_H
