//===- asan_options.cpp - sanitizer defaults of the fuzz targets ----------===//
//
// libMLIR.so is not instrumented, but LLVM's allocators inlined into the
// fuzz targets are: they poison the free parts of their slabs, which the
// library's own copies then write into. With user poisoning off, ASan checks
// real allocations only.
//
//===----------------------------------------------------------------------===//

extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0";
}
