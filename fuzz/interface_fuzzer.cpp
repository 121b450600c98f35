//===- interface_fuzzer.cpp - libFuzzer: a step's interface JSON ----------===//
//
// Any input: the reader accepts an interface or says which field is wrong,
// never crashes; what it accepts writes back to JSON that reads again.
//
//===----------------------------------------------------------------------===//

#include "distopt/StepInterface/StepInterface.h"

#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  llvm::Expected<distopt::step::Interface> parsed =
      distopt::step::parseInterface(text);
  if (!parsed) {
    llvm::consumeError(parsed.takeError());
    return 0;
  }
  std::string written;
  llvm::raw_string_ostream(written) << distopt::step::toJSON(*parsed);
  llvm::Expected<distopt::step::Interface> again =
      distopt::step::parseInterface(written);
  if (!again) {
    llvm::errs() << "an accepted interface does not read back: "
                 << llvm::toString(again.takeError()) << "\n"
                 << written << "\n";
    std::abort();
  }
  return 0;
}
