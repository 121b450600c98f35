//===- allreduce_bench.cpp - distopt_rt vs raw MPI, same run ----*- C++ -*-===//
//
// For each size, times MPI_Allreduce (sum) and distopt_rt_all_reduce (sum,
// avg, premul_sum) on the same f32 buffers, alternating, and prints a
// markdown row: median microseconds, bus bandwidth (2(n-1)/n * bytes / t)
// and the ratio to MPI. Run under mpirun; rank 0 prints.
//
//===----------------------------------------------------------------------===//

#include "distopt_rt.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int64_t maxBytes = argc > 1 ? std::atoll(argv[1]) : (int64_t(1) << 28);
  distopt_rt_comm *comm;
  if (distopt_rt_comm_create("mpi", size, 300, &comm) != DISTOPT_RT_OK) {
    std::fprintf(stderr, "%s\n", distopt_rt_last_error());
    return 1;
  }
  if (rank == 0) {
    std::printf("| bytes | MPI_Allreduce us | distopt sum us | sum / MPI | "
                "distopt avg us | avg / MPI | premul / MPI | busbw GB/s "
                "(distopt sum) |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  double busFactor = size > 1 ? 2.0 * (size - 1) / size : 1.0;
  for (int64_t bytes = 8; bytes <= maxBytes; bytes *= 4) {
    int64_t count = bytes / 4;
    std::vector<float> send(count, 1.0f), recv(count);
    int iters = bytes <= (1 << 20) ? 200 : bytes <= (1 << 24) ? 20 : 5;
    std::vector<double> tMpi, tSum, tAvg, tPremul;
    auto timeIt = [&](auto &&body) {
      MPI_Barrier(MPI_COMM_WORLD);
      double start = MPI_Wtime();
      body();
      double local = MPI_Wtime() - start, slowest;
      MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      return slowest * 1e6;
    };
    for (int i = 0; i < iters + 2; ++i) { // two warm-up rounds
      double a = timeIt([&] {
        MPI_Allreduce(send.data(), recv.data(), (int)count, MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
      });
      double b = timeIt([&] {
        distopt_rt_all_reduce(comm, send.data(), recv.data(), count,
                              DISTOPT_RT_F32, DISTOPT_RT_SUM, 1.0,
                              DISTOPT_RT_F32);
      });
      double c = timeIt([&] {
        distopt_rt_all_reduce(comm, send.data(), recv.data(), count,
                              DISTOPT_RT_F32, DISTOPT_RT_AVG, 1.0,
                              DISTOPT_RT_F32);
      });
      double d = timeIt([&] {
        distopt_rt_all_reduce(comm, send.data(), recv.data(), count,
                              DISTOPT_RT_F32, DISTOPT_RT_PREMUL_SUM, 0.5,
                              DISTOPT_RT_F32);
      });
      if (i >= 2) {
        tMpi.push_back(a);
        tSum.push_back(b);
        tAvg.push_back(c);
        tPremul.push_back(d);
      }
    }
    double mpi = median(tMpi), sum = median(tSum), avg = median(tAvg),
           premul = median(tPremul);
    if (rank == 0)
      std::printf("| %lld | %.1f | %.1f | %.2f | %.1f | %.2f | %.2f | %.2f |\n",
                  (long long)bytes, mpi, sum, sum / mpi, avg, avg / mpi,
                  premul / mpi, busFactor * bytes / sum / 1e3);
  }
  distopt_rt_comm_destroy(comm);
  MPI_Finalize();
  return 0;
}
