//===- BufferizableOpInterfaceImpl.h - collectives on buffers ---*- C++ -*-===//

#ifndef DISTOPT_CONVERSION_DISTOPTTORUNTIME_BUFFERIZABLEOPINTERFACEIMPL_H
#define DISTOPT_CONVERSION_DISTOPTTORUNTIME_BUFFERIZABLEOPINTERFACEIMPL_H

#include "llvm/ADT/StringRef.h"

namespace mlir {
class DialectRegistry;
namespace distopt {
/// On the memref.copy by which an asynchronous collective's request takes
/// its own copy of the input (see --distopt-async-in-place).
constexpr llvm::StringLiteral kRequestInputAttr = "distopt.request_input";

/// Lets one-shot bufferization handle the synchronous collectives: they
/// become calls of the runtime on buffers, in place where legal.
void registerBufferizableOpInterfaceExternalModels(DialectRegistry &registry);
} // namespace distopt
} // namespace mlir

#endif // DISTOPT_CONVERSION_DISTOPTTORUNTIME_BUFFERIZABLEOPINTERFACEIMPL_H
