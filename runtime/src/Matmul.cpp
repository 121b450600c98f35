//===- Matmul.cpp - matrix products for compiled steps ---------*- C++ -*-===//
//
// distopt_rt_matmul_f32: the matrix products of a compiled step (Muon's
// Newton-Schulz iterations, PowerSGD's factors) through the BLAS the
// machine has, found at run time as CUDA and NCCL are (no build-time
// dependency): OpenBLAS, else any libblas.so.3 with CBLAS, or the library
// DISTOPT_BLAS names. On one thread, so
// that a product's bits do not depend on how many threads a rank runs (the
// ranks of a replicated update must agree bit for bit); the library's own
// setting, which the program (torch) may rely on, is put back after each
// product. Without a BLAS (or with DISTOPT_BLAS=none), a loop here.
//
//===----------------------------------------------------------------------===//

#include "Comm.h"

#include "distopt_rt.h"

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <string>

namespace {

// CBLAS's enums, as cblas.h defines them.
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

using SgemmFn = void (*)(int order, int transA, int transB, int m, int n, int k,
                         float alpha, const float *a, int lda, const float *b,
                         int ldb, float beta, float *c, int ldc);

struct Blas {
  SgemmFn sgemm = nullptr;
  /// OpenBLAS's thread count, where the library is OpenBLAS.
  int (*getThreads)() = nullptr;
  void (*setThreads)(int) = nullptr;
  std::string name = "none";
  /// Why the library DISTOPT_BLAS names cannot be used ("": it can).
  std::string error;
};

/// Opens `library` as `result`'s BLAS; false (with dlerror's reason in
/// `why`) where it does not open or has no cblas_sgemm.
bool open(const char *library, Blas &result, std::string &why) {
  void *handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    why = dlerror();
    return false;
  }
  auto sgemm = reinterpret_cast<SgemmFn>(dlsym(handle, "cblas_sgemm"));
  if (!sgemm) {
    why = "it has no cblas_sgemm";
    dlclose(handle);
    return false;
  }
  auto getThreads =
      reinterpret_cast<int (*)()>(dlsym(handle, "openblas_get_num_threads"));
  auto setThreads = reinterpret_cast<void (*)(int)>(
      dlsym(handle, "openblas_set_num_threads"));
  if (getThreads && setThreads) {
    result.getThreads = getThreads;
    result.setThreads = setThreads;
  }
  result.sgemm = sgemm;
  result.name = library;
  return true;
}

const Blas &blas() {
  static const Blas found = [] {
    Blas result;
    std::string why;
    const char *choice = std::getenv("DISTOPT_BLAS");
    if (choice && std::strcmp(choice, "none") == 0)
      return result;
    // A library named is that one, or an error: not a silent fallback.
    if (choice && *choice) {
      if (!open(choice, result, why))
        result.error = std::string("DISTOPT_BLAS=") + choice + ": " + why;
      return result;
    }
    for (const char *library : {"libopenblas.so.0", "libblas.so.3"})
      if (open(library, result, why))
        break;
    return result;
  }();
  return found;
}

/// c += op(a) op(b), the sum over k in order for each element.
void loopMatmul(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                const float *a, int64_t lda, const float *b, int64_t ldb,
                float *c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      float x = transA ? a[p * lda + i] : a[i * lda + p];
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] += x * (transB ? b[j * ldb + p] : b[p * ldb + j]);
    }
}

} // namespace

extern "C" {

distopt_rt_status distopt_rt_matmul_f32(int32_t transpose_a,
                                        int32_t transpose_b, int64_t m,
                                        int64_t n, int64_t k, const float *a,
                                        int64_t lda, const float *b,
                                        int64_t ldb, float *c, int64_t ldc) {
  constexpr int64_t kMaxInt = 0x7fffffff;
  int64_t aCols = transpose_a ? m : k, bCols = transpose_b ? k : n;
  if (m < 0 || n < 0 || k < 0 || lda < aCols || ldb < bCols || ldc < n ||
      (m > 0 && n > 0 && !c) || (m > 0 && n > 0 && k > 0 && (!a || !b)))
    return distopt::rt::fail(
        DISTOPT_RT_INVALID_ARGUMENT,
        "distopt_rt_matmul_f32: bad sizes, strides or buffers (m " +
            std::to_string(m) + ", n " + std::to_string(n) + ", k " +
            std::to_string(k) + ", lda " + std::to_string(lda) + ", ldb " +
            std::to_string(ldb) + ", ldc " + std::to_string(ldc) +
            (transpose_a ? ", a transposed" : "") +
            (transpose_b ? ", b transposed" : "") + ")");
  if (m == 0 || n == 0 || k == 0)
    return DISTOPT_RT_OK;
  const Blas &found = blas();
  if (!found.error.empty())
    return distopt::rt::fail(DISTOPT_RT_UNAVAILABLE,
                             "distopt_rt_matmul_f32: " + found.error);
  bool fits = m <= kMaxInt && n <= kMaxInt && k <= kMaxInt && lda <= kMaxInt &&
              ldb <= kMaxInt && ldc <= kMaxInt;
  if (found.sgemm && fits) {
    int threads = found.getThreads ? found.getThreads() : 1;
    if (threads != 1)
      found.setThreads(1);
    found.sgemm(kRowMajor, transpose_a ? kTrans : kNoTrans,
                transpose_b ? kTrans : kNoTrans, static_cast<int>(m),
                static_cast<int>(n), static_cast<int>(k), 1.0f, a,
                static_cast<int>(lda), b, static_cast<int>(ldb), 1.0f, c,
                static_cast<int>(ldc));
    if (threads != 1)
      found.setThreads(threads);
  } else {
    loopMatmul(transpose_a, transpose_b, m, n, k, a, lda, b, ldb, c, ldc);
  }
  return DISTOPT_RT_OK;
}

const char *distopt_rt_blas(void) { return blas().name.c_str(); }

} // extern "C"
