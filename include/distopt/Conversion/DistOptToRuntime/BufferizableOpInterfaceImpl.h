//===- BufferizableOpInterfaceImpl.h - collectives on buffers ---*- C++ -*-===//

#ifndef DISTOPT_CONVERSION_DISTOPTTORUNTIME_BUFFERIZABLEOPINTERFACEIMPL_H
#define DISTOPT_CONVERSION_DISTOPTTORUNTIME_BUFFERIZABLEOPINTERFACEIMPL_H

namespace mlir {
class DialectRegistry;
namespace distopt {
/// Lets one-shot bufferization handle the synchronous collectives: they
/// become calls of the runtime on buffers, in place where legal.
void registerBufferizableOpInterfaceExternalModels(DialectRegistry &registry);
} // namespace distopt
} // namespace mlir

#endif // DISTOPT_CONVERSION_DISTOPTTORUNTIME_BUFFERIZABLEOPINTERFACEIMPL_H
