//===- parse_fuzzer.cpp - libFuzzer: parse, verify, print, reparse --------===//
//
// Any input: the parser and the verifiers of distopt (and the dialects
// around it) must not crash; what verifies must print, in the generic form
// too, and parse back to something that verifies.
//
//===----------------------------------------------------------------------===//

#include "FuzzCommon.h"

#include "mlir/IR/OperationSupport.h"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mlir::MLIRContext context(distopt::fuzz::registry(),
                            mlir::MLIRContext::Threading::DISABLED);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      distopt::fuzz::parse(context, data, size);
  if (!module)
    return 0;
  for (bool generic : {false, true}) {
    std::string text;
    llvm::raw_string_ostream os(text);
    mlir::OpPrintingFlags flags;
    if (generic)
      flags.printGenericOpForm();
    module->print(os, flags);
    mlir::OwningOpRef<mlir::ModuleOp> again = distopt::fuzz::parse(
        context, reinterpret_cast<const uint8_t *>(text.data()), text.size());
    if (!again) {
      // What verified and printed must read back: a printer/parser bug.
      llvm::errs() << "printed module does not parse back:\n" << text << "\n";
      std::abort();
    }
  }
  return 0;
}
