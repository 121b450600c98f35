//===- BufferUses.h - who uses a buffer, after bufferization ----*- C++ -*-===//
//
// Shared by the passes that reuse a step's buffers after bufferization
// (--distopt-async-in-place, --distopt-mark-in-place-results).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_CONVERSION_DISTOPTTORUNTIME_BUFFERUSES_H
#define DISTOPT_CONVERSION_DISTOPTTORUNTIME_BUFFERUSES_H

#include "mlir/IR/Value.h"

namespace mlir::distopt {

/// The buffer `value` is a view of (itself if none).
Value rootBuffer(Value value);

/// Whether nothing uses `root`, or any view of it, after `op` (which is in
/// root's block, or nested in an op there); `op` itself does not count.
bool unusedAfter(Value root, Operation *op);

} // namespace mlir::distopt

#endif // DISTOPT_CONVERSION_DISTOPTTORUNTIME_BUFFERUSES_H
