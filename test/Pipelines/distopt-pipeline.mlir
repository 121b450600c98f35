// The registered pipeline on LLaMA-7B (64 ranks), plain and composed.
// RUN: distopt-translate --import-param-spec %examples/specs/llama-7b.json -o %t.mlir
// RUN: distopt-opt %t.mlir --distopt-pipeline | FileCheck %s --check-prefix=DP
// RUN: distopt-opt %t.mlir --distopt-pipeline="zero-stage=2 powersgd-rank=4" | FileCheck %s --check-prefix=Z2PSGD
// RUN: distopt-opt %t.mlir --distopt-pipeline="zero-stage=3 overlap=false" --distopt-report -o /dev/null | FileCheck %s --check-prefix=Z3
// RUN: distopt-opt %t.mlir --distopt-pipeline="zero-stage=1 zero-strategy=greedy" | FileCheck %s --check-prefix=GREEDY
// RUN: not distopt-opt %t.mlir --distopt-pipeline="zero-stage=4" 2>&1 | FileCheck %s --check-prefix=STAGE
// RUN: not distopt-opt %t.mlir --distopt-pipeline="backend=gloo" 2>&1 | FileCheck %s --check-prefix=BACKEND
// RUN: not distopt-opt %t.mlir --distopt-pipeline="zero-stage=1 zero-strategy=random" 2>&1 | FileCheck %s --check-prefix=STRATEGY
// RUN: not distopt-opt %t.mlir --distopt-pipeline="reduce-dtype=f16" 2>&1 | FileCheck %s --check-prefix=DTYPE
// RUN: distopt-opt %t.mlir --distopt-pipeline="reduce-dtype=none" | FileCheck %s --check-prefix=DP
// RUN: not distopt-opt %t.mlir --distopt-pipeline="powersgd-rank=-1" 2>&1 | FileCheck %s --check-prefix=RANK
// Options of a pass the pipeline does not run are refused by name, not
// ignored; powersgd-rank=0 (off) given too changes nothing.
// RUN: not distopt-opt %t.mlir --distopt-pipeline="dion-batch-mb=25 powersgd-rank=0 powersgd-batch-mb=1 error-feedback=false" -o /dev/null 2>&1 | FileCheck %s --check-prefix=UNUSED
// RUN: not distopt-opt %t.mlir --distopt-pipeline="zero-strategy=greedy bucketize=false bucket-cap-mb=5" -o /dev/null 2>&1 | FileCheck %s --check-prefix=UNUSED-ZERO
// UNUSED-ZERO: error: distopt-pipeline: zero-strategy needs zero-stage (ZeRO is off at stage 0 without hybrid-shard-size); bucket-cap-mb needs bucketize (buckets are off)
// UNUSED: error: distopt-pipeline: dion-batch-mb needs dion-low-rank-sync (it batches that sync's all-reduces); error-feedback needs powersgd-rank (PowerSGD is off without it); powersgd-batch-mb needs powersgd-rank (PowerSGD is off without it)
// RUN: not distopt-opt %t.mlir --distopt-pipeline="bucket-cap-mb=0" 2>&1 | FileCheck %s --check-prefix=CAP

// Plain data parallelism: averaged, bucketed; no division left. Every
// matrix is at least a bucket's 25 MB, so none is packed: each is reduced
// in place, asynchronously while the rest runs. The 65 norm vectors share
// one bucket, which has nothing to overlap with, so it stays synchronous
// (a start would only add a copy).
// DP-LABEL: func.func @step
// DP-NOT: arith.divf
// DP: distopt.all_reduce_start avg
// DP: %[[BUCKET:.*]] = distopt.bucket_pack {{.*}} -> tensor<266240xbf16>
// DP-NEXT: %[[SUM:.*]] = distopt.all_reduce avg %[[BUCKET]]
// DP-NOT: distopt.bucket_pack
// DP: distopt.bucket_unpack %[[SUM]] : tensor<266240xbf16> -> tensor<4096xbf16>
// DP: distopt.wait
// DP: return

// ZeRO-2 with PowerSGD: matrices compressed, vectors batched, chunks kept.
// Z2PSGD-LABEL: func.func @step
// Z2PSGD-NOT: distopt.reduce_scatter
// Z2PSGD: distopt.powersgd_all_reduce {{.*}} rank 4 : tensor<32000x4096xbf16>
// Z2PSGD: distopt.shard_slice
// The parameters are gathered and unpacked at once: nothing to overlap.
// Z2PSGD: distopt.all_gather %
// Z2PSGD: return

// Z3: total {{[0-9]+}} 0.2500

// GREEDY-LABEL: func.func @step
// GREEDY: distopt.owned_by @world rank 0
// GREEDY: distopt.broadcast_start

// STAGE: --distopt-shard-optimizer: stage must be 1, 2 or 3, got 4
// BACKEND: for the --backend option: 'gloo' is not one of: nccl, mpi, sum-only
// STRATEGY: for the --zero-strategy option: 'random' is not one of: flat, greedy
// DTYPE: for the --reduce-dtype option: 'f16' is not one of: none, f32, f64
// RANK: --distopt-powersgd: rank must be at least 1, got -1
// CAP: --distopt-bucketize: cap-mb must be positive, got 0
