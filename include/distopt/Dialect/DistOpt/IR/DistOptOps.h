//===- DistOptOps.h - distopt operations ------------------------*- C++ -*-===//
//
// The operations of the distopt dialect.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_DIALECT_DISTOPT_IR_DISTOPTOPS_H
#define DISTOPT_DIALECT_DISTOPT_IR_DISTOPTOPS_H

#include "distopt/Dialect/DistOpt/IR/DistOptDialect.h"
#include "distopt/Dialect/DistOpt/IR/DistOptInterfaces.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::distopt {
class OwnedByOp;
} // namespace mlir::distopt

#define GET_OP_CLASSES
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h.inc"

namespace mlir::distopt {

/// Returns the process group that `symbol` names, as seen from `from`, or null.
ProcessGroupOp lookupProcessGroup(Operation *from, FlatSymbolRefAttr symbol);

/// Element offsets of `types`, flattened, when packed one after another with
/// each start rounded up to `alignmentBytes`; `packedSize` receives the total.
SmallVector<int64_t> computeBucketOffsets(TypeRange types,
                                          int64_t alignmentBytes,
                                          int64_t *packedSize);

/// Whether `op` communicates: it has an effect on the Communicator resource.
bool communicates(Operation *op);

/// The overflow check whose agreement across ranks the lowering of a
/// sharded `clip` (one with tensor_bounds) carries in its own reduction of
/// the norm's partial sums: a distopt.all_finite on the same group, in the
/// same block before it, read only after it. Null if there is none.
AllFiniteOp getFusedFiniteCheck(ClipGradNormOp clip);

/// Whether multiplying by `scale` in `type` neither rounds it to zero nor
/// overflows (the condition on a premul_sum factor).
bool isRepresentableScale(const llvm::APFloat &scale, FloatType type);

} // namespace mlir::distopt

#endif // DISTOPT_DIALECT_DISTOPT_IR_DISTOPTOPS_H
