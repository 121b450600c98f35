//===- Alloc.cpp - memory for compiled steps, cached ----------------------===//
//
// distopt-compile lowers memref.alloc and dealloc to MLIR's generic
// allocation functions, defined here. A step allocates the same buffers
// every time it runs (buckets, unpacked gradients, returned tensors); for
// large ones, fresh memory means the kernel maps and zeroes it again each
// step (a page fault per 4 KiB: GPT-2's 500 MB of bucketed gradients cost
// 1.8x the step's own time). Blocks of 1 MiB or more are therefore kept
// when freed and handed out again, as PyTorch's caching allocator does;
// the cache holds at most half of the machine's memory.
//
//===----------------------------------------------------------------------===//

#include "distopt_rt.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <unistd.h>
#include <unordered_map>

namespace {

constexpr uint64_t kLargeBlock = 1 << 20;
constexpr uint64_t kBlockAlignment = 4096;

struct Cache {
  std::mutex mutex;
  std::unordered_map<void *, uint64_t> capacity; // every live or cached block
  std::multimap<uint64_t, void *> idle;          // cached, by capacity
  uint64_t idleBytes = 0;
  uint64_t limit;

  Cache() {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    limit = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) / 2
                                  : uint64_t(1) << 32;
  }

  void *allocate(uint64_t size, uint64_t alignment) {
    if (size < kLargeBlock || alignment > kBlockAlignment)
      return std::aligned_alloc(alignment < 64 ? 64 : alignment,
                                (size + 63) / 64 * 64 + (size == 0 ? 64 : 0));
    uint64_t rounded = (size + kBlockAlignment - 1) & ~(kBlockAlignment - 1);
    std::lock_guard<std::mutex> lock(mutex);
    // The smallest idle block that fits and wastes at most a quarter.
    auto it = idle.lower_bound(rounded);
    if (it != idle.end() && it->first <= rounded + rounded / 4) {
      void *block = it->second;
      idleBytes -= it->first;
      idle.erase(it);
      return block;
    }
    void *block = std::aligned_alloc(kBlockAlignment, rounded);
    if (block)
      capacity[block] = rounded;
    return block;
  }

  void release(void *block) {
    if (!block)
      return;
    std::unique_lock<std::mutex> lock(mutex);
    auto it = capacity.find(block);
    if (it == capacity.end()) {
      lock.unlock();
      std::free(block);
      return;
    }
    uint64_t bytes = it->second;
    if (idleBytes + bytes > limit) {
      capacity.erase(it);
      lock.unlock();
      std::free(block);
      return;
    }
    idle.emplace(bytes, block);
    idleBytes += bytes;
  }
};

Cache &cache() {
  static Cache *instance = new Cache(); // lives until the process ends
  return *instance;
}

} // namespace

extern "C" DISTOPT_RT_API void *_mlir_memref_to_llvm_alloc(uint64_t size) {
  return cache().allocate(size, 64);
}

extern "C" DISTOPT_RT_API void *
_mlir_memref_to_llvm_aligned_alloc(uint64_t alignment, uint64_t size) {
  return cache().allocate(size, alignment);
}

extern "C" DISTOPT_RT_API void _mlir_memref_to_llvm_free(void *ptr) {
  cache().release(ptr);
}
