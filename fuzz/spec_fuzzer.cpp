//===- spec_fuzzer.cpp - libFuzzer: the parameter-spec importer -----------===//
//
// Any input: --import-param-spec must give a module that verifies, or a
// diagnostic; never a crash, however deep the JSON nests or large its
// numbers are.
//
//===----------------------------------------------------------------------===//

#include "FuzzCommon.h"

#include "distopt/Target/ParamSpec.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mlir::MLIRContext context(distopt::fuzz::registry(),
                            mlir::MLIRContext::Threading::DISABLED);
  context.getDiagEngine().registerHandler(
      [](mlir::Diagnostic &) { return mlir::success(); });
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(
          llvm::StringRef(reinterpret_cast<const char *>(data), size), "spec"),
      llvm::SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::distopt::importParamSpec(sourceMgr, &context);
  if (module && mlir::failed(mlir::verify(*module))) {
    llvm::errs() << "the importer made a module that does not verify\n";
    std::abort();
  }
  return 0;
}
