//===- allreduce_bench.cpp - distopt_rt vs raw MPI, same run ----*- C++ -*-===//
//
// For each size, times MPI_Allreduce (sum) and distopt_rt_all_reduce (sum,
// avg, premul_sum) on the same f32 buffers, alternating, and the unfused
// average (sum, then a scaling pass) and that pass alone; prints one JSON
// object per size with the median, 10th and 90th percentile over iterations
// of the slowest rank, in microseconds. With --rooted: MPI_Bcast against
// distopt_rt_broadcast and MPI_Reduce (sum) against distopt_rt_reduce
// instead, the root moving to the next rank every iteration.
// Run under mpirun; rank 0 prints:
//   mpirun -np N distopt-rt-allreduce-bench [--rooted] [BYTES...]
//
//===----------------------------------------------------------------------===//

#include "distopt_rt.h"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// The nearest-rank percentile: the spread is the 10th to the 90th, so that
/// one descheduled iteration in 200 does not make it.
static double percentile(std::vector<double> v, double fraction) {
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(fraction * v.size()));
  return v[std::max<size_t>(rank, 1) - 1];
}

/// One JSON object per size (bench/allreduce.py and bench/link.py make the
/// tables): each series' median, 10th and 90th percentile.
static void printRow(
    int64_t bytes, double busFactor,
    std::vector<std::pair<const char *, const std::vector<double> *>> series) {
  std::printf("{\"bytes\": %lld, \"busbw_factor\": %.4f", (long long)bytes,
              busFactor);
  for (auto [name, times] : series)
    std::printf(", \"%s_us\": %.3f, \"%s_p10_us\": %.3f, \"%s_p90_us\": %.3f",
                name, median(*times), name, percentile(*times, 0.1), name,
                percentile(*times, 0.9));
  std::printf("}\n");
  std::fflush(stdout);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // The sizes in bytes: the arguments, or 8 B to 128 MiB by factors of 4.
  std::vector<int64_t> sizes;
  bool rooted = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--rooted")
      rooted = true;
    else
      sizes.push_back(std::atoll(argv[i]));
  }
  if (sizes.empty())
    for (int64_t bytes = 8; bytes <= (int64_t(1) << 27); bytes *= 4)
      sizes.push_back(bytes);
  distopt_rt_comm *comm;
  if (distopt_rt_comm_create("mpi", size, 300, &comm) != DISTOPT_RT_OK) {
    std::fprintf(stderr, "%s\n", distopt_rt_last_error());
    return 1;
  }
  double busFactor = size > 1 ? 2.0 * (size - 1) / size : 1.0;
  for (int64_t bytes : sizes) {
    int64_t count = std::max<int64_t>(bytes / 4, 1);
    std::vector<float> send(count, 1.0f), recv(count);
    int iters = bytes <= (1 << 20) ? 200 : bytes <= (1 << 24) ? 20 : 5;
    std::vector<double> tMpi, tSum, tAvg, tPremul, tScale, tSumScale;
    auto timeIt = [&](auto &&body) {
      MPI_Barrier(MPI_COMM_WORLD);
      double start = MPI_Wtime();
      body();
      double local = MPI_Wtime() - start, slowest;
      MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      return slowest * 1e6;
    };
    if (rooted) {
      std::vector<double> tBcastMpi, tBcast, tReduceMpi, tReduce;
      for (int i = 0; i < iters + 2; ++i) { // two warm-up rounds
        int root = i % size;
        double a = timeIt([&] {
          MPI_Bcast(send.data(), (int)count, MPI_FLOAT, root, MPI_COMM_WORLD);
        });
        double b = timeIt([&] {
          distopt_rt_broadcast(comm, send.data(), send.data(), count,
                               DISTOPT_RT_F32, root, DISTOPT_RT_F32);
        });
        double c = timeIt([&] {
          MPI_Reduce(send.data(), recv.data(), (int)count, MPI_FLOAT, MPI_SUM,
                     root, MPI_COMM_WORLD);
        });
        double d = timeIt([&] {
          distopt_rt_reduce(comm, send.data(), recv.data(), count,
                            DISTOPT_RT_F32, DISTOPT_RT_SUM, 1.0, root,
                            DISTOPT_RT_F32);
        });
        if (i >= 2) {
          tBcastMpi.push_back(a);
          tBcast.push_back(b);
          tReduceMpi.push_back(c);
          tReduce.push_back(d);
        }
      }
      if (rank == 0)
        printRow(bytes, busFactor,
                 {{"bcast_mpi", &tBcastMpi},
                  {"bcast", &tBcast},
                  {"reduce_mpi", &tReduceMpi},
                  {"reduce", &tReduce}});
      continue;
    }
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
      // B4: the average as a sum followed by its own pass over the result
      // (what an unfused step does), and that pass alone.
      float inverse = 1.0f / static_cast<float>(size);
      double e = timeIt([&] {
        for (int64_t k = 0; k < count; ++k)
          recv[k] *= inverse;
      });
      double f = timeIt([&] {
        distopt_rt_all_reduce(comm, send.data(), recv.data(), count,
                              DISTOPT_RT_F32, DISTOPT_RT_SUM, 1.0,
                              DISTOPT_RT_F32);
        for (int64_t k = 0; k < count; ++k)
          recv[k] *= inverse;
      });
      if (i >= 2) {
        tMpi.push_back(a);
        tSum.push_back(b);
        tAvg.push_back(c);
        tPremul.push_back(d);
        tScale.push_back(e);
        tSumScale.push_back(f);
      }
    }
    if (rank == 0)
      printRow(bytes, busFactor,
               {{"mpi", &tMpi},
                {"sum", &tSum},
                {"avg", &tAvg},
                {"premul", &tPremul},
                {"scale_pass", &tScale},
                {"sum_then_scale", &tSumScale}});
  }
  distopt_rt_comm_destroy(comm);
  MPI_Finalize();
  return 0;
}
