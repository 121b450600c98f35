//===- CompressWire.h - mycc's own pass over distopt ops --------*- C++ -*-===//

#ifndef MYCC_COMPRESSWIRE_H
#define MYCC_COMPRESSWIRE_H

namespace mycc {
/// Registers --mycc-compress-wire.
void registerCompressWirePass();
} // namespace mycc

#endif // MYCC_COMPRESSWIRE_H
