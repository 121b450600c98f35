//===- interface_fuzzer.cpp - libFuzzer: a step's interface JSON ----------===//
//
// Any input: the reader accepts an interface or says which field is wrong,
// never crashes; what it accepts writes back to JSON that reads again.
//
//===----------------------------------------------------------------------===//

#include "distopt/StepInterface/StepInterface.h"

#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view text(reinterpret_cast<const char *>(data), size);
  auto parsed = distopt::step::parseInterface(text);
  if (!parsed)
    return 0;
  std::string written = distopt::step::toJSON(*parsed).str();
  auto again = distopt::step::parseInterface(written);
  if (!again) {
    std::fprintf(stderr, "an accepted interface does not read back: %s\n%s\n",
                 again.error().c_str(), written.c_str());
    std::abort();
  }
  return 0;
}
