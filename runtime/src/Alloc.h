//===- Alloc.h - the blocks a compiled step holds --------------*- C++ -*-===//
//
// Compiled steps allocate through the runtime (Alloc.cpp). A step that
// fails part way returns the failed call's status from there, past the
// frees it would have reached; the session records what the step takes so
// that it can free it then.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_RT_ALLOC_H
#define DISTOPT_RT_ALLOC_H

#include <unordered_set>

namespace distopt::rt {

/// While alive, records the blocks compiled code on this thread takes from
/// the runtime's allocator and has not given back.
class StepAllocations {
public:
  StepAllocations();
  ~StepAllocations();
  StepAllocations(const StepAllocations &) = delete;
  StepAllocations &operator=(const StepAllocations &) = delete;

  /// Gives back every block still held.
  void freeAll();

  /// The recorder of this thread, or null (used by the allocator).
  static StepAllocations *current();
  void taken(void *block) { blocks.insert(block); }
  void givenBack(void *block) { blocks.erase(block); }

private:
  std::unordered_set<void *> blocks;
  StepAllocations *outer;
};

} // namespace distopt::rt

#endif // DISTOPT_RT_ALLOC_H
