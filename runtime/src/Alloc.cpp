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
// It also counts the bytes handed out and not yet freed, and their peak:
// what a step and its driver hold, as measured memory per rank (B5).
//
//===----------------------------------------------------------------------===//

#include "Alloc.h"

#include "distopt_rt.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <malloc.h>
#include <map>
#include <mutex>
#include <unistd.h>
#include <unordered_map>
#include <vector>

namespace {

constexpr uint64_t kLargeBlock = 1 << 20;
constexpr uint64_t kBlockAlignment = 4096;

/// Bytes in use (handed out, not freed) and their high-water mark.
std::atomic<uint64_t> inUse{0}, peak{0};

void count(uint64_t bytes) {
  uint64_t now = inUse.fetch_add(bytes) + bytes;
  uint64_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}

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
    // DISTOPT_RT_CACHE_MB caps it (0: free at once), for runs whose memory
    // per rank matters more than the page faults (ZeRO-3 with units).
    if (const char *env = std::getenv("DISTOPT_RT_CACHE_MB")) {
      char *end = nullptr;
      double mb = std::strtod(env, &end);
      if (end != env && *end == '\0' && mb >= 0 && mb < 1e12)
        limit = uint64_t(mb * (1 << 20));
    }
  }

  void *allocate(uint64_t size, uint64_t alignment) {
    if (size < kLargeBlock || alignment > kBlockAlignment) {
      void *small =
          std::aligned_alloc(alignment < 64 ? 64 : alignment,
                             (size + 63) / 64 * 64 + (size == 0 ? 64 : 0));
      if (small)
        count(malloc_usable_size(small));
      return small;
    }
    uint64_t rounded = (size + kBlockAlignment - 1) & ~(kBlockAlignment - 1);
    std::lock_guard<std::mutex> lock(mutex);
    // The smallest idle block that fits and wastes at most a quarter.
    auto it = idle.lower_bound(rounded);
    if (it != idle.end() && it->first <= rounded + rounded / 4) {
      void *block = it->second;
      idleBytes -= it->first;
      count(it->first);
      idle.erase(it);
      return block;
    }
    void *block = std::aligned_alloc(kBlockAlignment, rounded);
    if (block) {
      capacity[block] = rounded;
      count(rounded);
    }
    return block;
  }

  void release(void *block) {
    if (!block)
      return;
    std::unique_lock<std::mutex> lock(mutex);
    auto it = capacity.find(block);
    if (it == capacity.end()) {
      lock.unlock();
      inUse -= malloc_usable_size(block);
      std::free(block);
      return;
    }
    uint64_t bytes = it->second;
    inUse -= bytes;
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

namespace distopt::rt {

namespace {
thread_local StepAllocations *recorder = nullptr;
} // namespace

StepAllocations::StepAllocations() : outer(recorder) { recorder = this; }
StepAllocations::~StepAllocations() { recorder = outer; }
StepAllocations *StepAllocations::current() { return recorder; }

void StepAllocations::freeAll() {
  for (void *block : blocks)
    cache().release(block);
  blocks.clear();
}

} // namespace distopt::rt

using distopt::rt::StepAllocations;

/// A block handed to compiled code, recorded where a step runs.
static void *handedOut(void *block) {
  if (StepAllocations *step = StepAllocations::current(); step && block)
    step->taken(block);
  return block;
}

extern "C" DISTOPT_RT_API void *_mlir_memref_to_llvm_alloc(uint64_t size) {
  return handedOut(cache().allocate(size, 64));
}

extern "C" DISTOPT_RT_API void *
_mlir_memref_to_llvm_aligned_alloc(uint64_t alignment, uint64_t size) {
  return handedOut(cache().allocate(size, alignment));
}

extern "C" DISTOPT_RT_API void _mlir_memref_to_llvm_free(void *ptr) {
  if (StepAllocations *step = StepAllocations::current())
    step->givenBack(ptr);
  cache().release(ptr);
}

extern "C" DISTOPT_RT_API void distopt_rt_memory_stats(uint64_t *in_use,
                                                       uint64_t *peak_bytes) {
  if (in_use)
    *in_use = inUse.load();
  if (peak_bytes)
    *peak_bytes = peak.load();
}

namespace {
using UnrankedMemRef = distopt_rt_unranked_memref;

struct StridedView {
  char *data;
  const int64_t *sizes, *strides;
  StridedView(const UnrankedMemRef &m, int64_t elementSize) {
    auto *words = static_cast<const int64_t *>(m.descriptor);
    data = reinterpret_cast<char *>(words[1]) + words[2] * elementSize;
    sizes = words + 3;
    strides = words + 3 + m.rank;
  }
};
} // namespace

/// What `memref.copy` calls when either side is not contiguous with a static
/// shape (MLIR's C runner utilities define it too; compiled steps find it
/// here): rows along the innermost dimension, one memcpy each when it is
/// contiguous on both sides.
extern "C" DISTOPT_RT_API void memrefCopy(int64_t elementSize,
                                          UnrankedMemRef *source,
                                          UnrankedMemRef *target) {
  int64_t rank = source->rank;
  StridedView from(*source, elementSize), to(*target, elementSize);
  if (rank == 0) {
    std::memcpy(to.data, from.data, elementSize);
    return;
  }
  for (int64_t d = 0; d < rank; ++d)
    if (from.sizes[d] == 0)
      return;
  int64_t inner = from.sizes[rank - 1];
  bool contiguous = from.strides[rank - 1] == 1 && to.strides[rank - 1] == 1;
  std::vector<int64_t> index(rank - 1, 0);
  while (true) {
    int64_t fromOffset = 0, toOffset = 0;
    for (int64_t d = 0; d + 1 < rank; ++d) {
      fromOffset += index[d] * from.strides[d];
      toOffset += index[d] * to.strides[d];
    }
    if (contiguous) {
      std::memcpy(to.data + toOffset * elementSize,
                  from.data + fromOffset * elementSize, inner * elementSize);
    } else {
      for (int64_t i = 0; i < inner; ++i)
        std::memcpy(
            to.data + (toOffset + i * to.strides[rank - 1]) * elementSize,
            from.data + (fromOffset + i * from.strides[rank - 1]) * elementSize,
            elementSize);
    }
    int64_t d = rank - 2;
    while (d >= 0 && ++index[d] == from.sizes[d])
      index[d--] = 0;
    if (d < 0)
      return;
  }
}
