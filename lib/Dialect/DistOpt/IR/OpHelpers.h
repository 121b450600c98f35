//===- OpHelpers.h - helpers of the distopt op verifiers --------*- C++ -*-===//
//
// What the verifiers and folders of DistOptOps.cpp, CollectiveOps.cpp and
// OptimizerOps.cpp share. Private to the dialect library.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_LIB_DIALECT_DISTOPT_IR_OPHELPERS_H
#define DISTOPT_LIB_DIALECT_DISTOPT_IR_OPHELPERS_H

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"

#include <string>

namespace mlir::distopt::detail {

/// Looks up the process group `symbol` for a verifier; emits an error on `op`
/// and returns null when it does not name one.
ProcessGroupOp verifyGroupSymbol(Operation *op, FlatSymbolRefAttr symbol,
                                 SymbolTableCollection &symbolTable);

/// Whether `symbol` names a group of one rank, for folders.
bool isSingletonGroup(Operation *op, FlatSymbolRefAttr symbol);

/// Checks dimension 0 of a result against its input's for `group`: divided
/// by the group size when the op `scatters`, multiplied (gathered) otherwise.
LogicalResult verifyDim0AgainstGroup(Operation *op, ProcessGroupOp group,
                                     int64_t inDim, int64_t outDim,
                                     bool scatters);

/// Prints a double the way users wrote it, for diagnostics.
std::string formatDouble(double value);

} // namespace mlir::distopt::detail

#endif // DISTOPT_LIB_DIALECT_DISTOPT_IR_OPHELPERS_H
