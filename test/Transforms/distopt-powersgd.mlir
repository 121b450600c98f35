// RUN: distopt-opt %s -split-input-file --distopt-powersgd | FileCheck %s
// RUN: distopt-opt %s -split-input-file --distopt-powersgd="rank=2 error-feedback=false warm-start=false" | FileCheck %s --check-prefix=NOEF
// RUN: distopt-opt %s -split-input-file --distopt-powersgd --distopt-verify-collectives > /dev/null
// RUN: not distopt-opt %s -split-input-file --distopt-powersgd=rank=0 2>&1 | FileCheck %s --check-prefix=RANK
// RUN: not distopt-opt %s -split-input-file --distopt-powersgd=min-compression-rate=0 2>&1 | FileCheck %s --check-prefix=RATE
// RUN: distopt-opt %s -split-input-file --distopt-powersgd=batch-mb=1 | FileCheck %s --check-prefix=BATCH
// RUN: not distopt-opt %s -split-input-file --distopt-powersgd=batch-mb=-1 2>&1 | FileCheck %s --check-prefix=BATCH-MB
// RUN: not distopt-opt %s -split-input-file --distopt-pipeline="powersgd-rank=1 powersgd-batch-mb=inf" 2>&1 | FileCheck %s --check-prefix=BATCH-MB-INF
// RUN: distopt-opt %s -split-input-file --distopt-pipeline="powersgd-rank=1 powersgd-orthogonalization-epsilon=1e-8" | FileCheck %s --check-prefix=EPS
// RUN: not distopt-opt %s -split-input-file --distopt-powersgd=orthogonalization-epsilon=-1 2>&1 | FileCheck %s --check-prefix=EPS-BAD
//
// PyTorch's compression ratios on ResNet-18 (CIFAR) gradients: 243x at rank
// 1, 136x at 2, 72x at 4, 37x at 8.
// RUN: distopt-translate --import-param-spec %examples/specs/resnet18-cifar.json | distopt-opt --distopt-fuse-div-into-allreduce --distopt-powersgd=rank=1 --distopt-report -o /dev/null | FileCheck %s --check-prefix=R18-1
// RUN: distopt-translate --import-param-spec %examples/specs/resnet18-cifar.json | distopt-opt --distopt-fuse-div-into-allreduce --distopt-powersgd=rank=2 --distopt-report -o /dev/null | FileCheck %s --check-prefix=R18-2
// RUN: distopt-translate --import-param-spec %examples/specs/resnet18-cifar.json | distopt-opt --distopt-fuse-div-into-allreduce --distopt-powersgd=rank=4 --distopt-report -o /dev/null | FileCheck %s --check-prefix=R18-4
// RUN: distopt-translate --import-param-spec %examples/specs/resnet18-cifar.json | distopt-opt --distopt-fuse-div-into-allreduce --distopt-powersgd=rank=8 --distopt-report -o /dev/null | FileCheck %s --check-prefix=R18-8
// RUN: distopt-translate --import-param-spec %examples/specs/resnet18-cifar.json | distopt-opt --distopt-fuse-div-into-allreduce --distopt-powersgd="rank=1 batch-mb=25" --distopt-report -o /dev/null | FileCheck %s --check-prefix=R18-25MB
// RUN: distopt-translate --import-param-spec %examples/specs/resnet18-cifar.json | distopt-opt --distopt-pipeline="powersgd-rank=1 powersgd-batch-mb=1000" --distopt-report -o /dev/null | FileCheck %s --check-prefix=R18-ONE
// start-iter: plain averaging up to that step, then compression; the state
// is passed through unchanged until then.
// RUN: distopt-translate --import-param-spec %examples/specs/resnet18-cifar.json | distopt-opt --distopt-fuse-div-into-allreduce --distopt-pipeline="powersgd-rank=1 powersgd-start-iter=10" --distopt-verify-collectives | FileCheck %s --check-prefix=START
// RUN: not distopt-opt %s -split-input-file --distopt-powersgd=start-iter=-1 2>&1 | FileCheck %s --check-prefix=START-BAD
// RUN: distopt-opt %S/Inputs/powersgd-keep.mlir --distopt-powersgd="rank=1 start-iter=2" | FileCheck %s --check-prefix=KEEP
// RUN: not distopt-opt %s -split-input-file --distopt-powersgd=start-iter=5 2>&1 | FileCheck %s --check-prefix=START-NOSTEP
//
// Compression together with ZeRO-2 sharding.
// RUN: distopt-translate --import-param-spec %examples/specs/gpt2-small.json | distopt-opt --distopt-fuse-div-into-allreduce --distopt-shard-optimizer=stage=2 --distopt-powersgd --distopt-verify-collectives | FileCheck %s --check-prefix=ZERO2

// RANK: --distopt-powersgd: rank must be at least 1, got 0
// RATE: --distopt-powersgd: min-compression-rate must be positive, got 0
// BATCH-MB: --distopt-powersgd: batch-mb must be finite and not negative, got -1
// BATCH-MB-INF: --distopt-powersgd: batch-mb must be finite and not negative, got INF
// EPS: distopt.powersgd_all_reduce {{.*}} rank 1 {orthogonalization_epsilon = 1.000000e-08 : f64}
// EPS-BAD: --distopt-powersgd: orthogonalization-epsilon must be finite and >= 0, got -1
// START: %[[TEN:.*]] = arith.constant 10 : i64
// START: %[[LATER:.*]] = arith.cmpi sgt, %[[STEP:[^,]*]], %[[TEN]] : i64
// START: scf.if %[[LATER]]
// START: distopt.powersgd_all_reduce
// START: } else {
// START: %[[AVG:.*]] = distopt.all_reduce avg
// START: scf.yield %[[AVG]],
// START-BAD: --distopt-powersgd: start-iter must not be negative, got -1
// Under an overflow check that keeps the update, the compression's state is
// kept by it too; a select that keeps no update freezes nothing. Before
// start-iter the gradient is averaged as before (wire bf16).
// KEEP-LABEL: func.func @kept
// KEEP: distopt.all_reduce avg %{{.*}} on @dp wire bf16
// KEEP: %[[OK:.*]] = distopt.all_finite
// KEEP: arith.select %[[OK]], %{{.*}}, %arg0
// KEEP-NEXT: arith.select %[[OK]], %{{.*}}#1, %arg4
// KEEP-NEXT: arith.select %[[OK]], %{{.*}}#2, %arg5
// KEEP-NEXT: arith.select %[[OK]], %{{.*}}#3, %arg6
// KEEP-LABEL: func.func @flag
// KEEP: arith.select %{{.*}}, %{{.*}}, %{{.*}} : f32
// KEEP-NEXT: return %new_param, %{{.*}}, %{{.*}}#1, %{{.*}}#2, %{{.*}}#3
// START-NOSTEP: error: --distopt-powersgd: start-iter=5 needs the step number: an i64 argument with distopt.role "step"
// Its 21 compressed tensors issue 2 collectives each by default; with
// batch-mb their factors share them (the lowering's batches, which
// distopt-lower-local-ops.mlir checks): 44 MB of them in 2 batches of up to
// 25 MiB, or in one. The uncompressed tensors share one all_reduce.
// R18-1: powersgd_all_reduce{{ +}}42{{ }}
// R18-1: all_reduce{{ +}}1{{ }}
// R18-1: total{{ +}}43{{ }}
// R18-1: (powersgd_all_reduce: 21 tensors, each all-reducing its P and Q factors)
// R18-1: compression: 243.
// R18-25MB: powersgd_all_reduce{{ +}}4{{ }}
// R18-25MB: (powersgd_all_reduce: 21 tensors, their P and Q factors all-reduced in 2 batches of 2 all_reduces)
// R18-25MB: compression: 243.
// R18-ONE: powersgd_all_reduce{{ +}}2{{ }}
// R18-ONE: total{{ +}}3{{ }}
// R18-ONE: (powersgd_all_reduce: 21 tensors, their P and Q factors all-reduced in 1 batch of 2 all_reduces)
// R18-2: compression: 135.8
// R18-4: compression: 72.
// R18-8: compression: 37.

distopt.process_group @dp size 4

// A 64x32 matrix is compressed at rank 1 ((64 + 32) * 2 < 2048), a 3-d
// convolution weight is viewed as 16 x 36; the bias and a 4x4 matrix
// ((4 + 4) * 2 = 16, not < 16) share one plain all_reduce. The conv's
// average goes back to its shape where it is used (here the return), so that
// nothing separates the two PowerSGD ops from the place where the lowering
// all-reduces their factors together.
// CHECK-LABEL: func.func @step
// CHECK-SAME: %[[W:[^:]*]]: tensor<64x32xf32> {distopt.name = "w"
// CHECK-SAME: %[[P:[^:]*]]: tensor<64x1xf32> {distopt.init = "zeros", distopt.name = "w.powersgd_p", distopt.role = "state"}
// CHECK-SAME: %[[Q:[^:]*]]: tensor<32x1xf32> {distopt.init = "randn", distopt.name = "w.powersgd_q", distopt.role = "state"}
// CHECK-SAME: %[[E:[^:]*]]: tensor<64x32xf32> {distopt.init = "zeros", distopt.name = "w.powersgd_error", distopt.per_rank, distopt.role = "state"}
// CHECK-SAME: tensor<16x36xf32> {distopt.init = "zeros", distopt.name = "conv.powersgd_error", distopt.per_rank, distopt.role = "state"}
// CHECK-SAME: -> (tensor<64x32xf32>, tensor<16x3x3x4xf32>, tensor<4xf32>, tensor<4x4xf32>, tensor<64x1xf32> {{{.*}}"w.powersgd_p"{{.*}}}, tensor<32x1xf32> {{{.*}}"w.powersgd_q"{{.*}}}, tensor<64x32xf32> {{{.*}}"w.powersgd_error"{{.*}}}
// CHECK: %[[R:.*]], %{{.*}}, %{{.*}}, %{{.*}} = distopt.powersgd_all_reduce %[[W]], %[[P]], %[[Q]], %[[E]] on @dp rank 1 : tensor<64x32xf32>, tensor<64x1xf32>, tensor<32x1xf32>
// CHECK: %[[C:.*]] = tensor.collapse_shape %{{.*}} {{\[\[}}0], [1, 2, 3]] : tensor<16x3x3x4xf32> into tensor<16x36xf32>
// CHECK: distopt.powersgd_all_reduce %[[C]], {{.*}} rank 1 : tensor<16x36xf32>
// CHECK: distopt.bucket_pack %{{.*}}, %{{.*}} : tensor<4x4xf32>, tensor<4xf32> -> tensor<20xf32>
// CHECK-NEXT: distopt.all_reduce avg %{{.*}} : tensor<20xf32>
// CHECK-NOT: distopt.all_reduce
// CHECK: %[[X:.*]] = tensor.expand_shape
// CHECK-NEXT: return %[[R]], %[[X]],
//
// Rank 2 without error feedback: no error state; Q redrawn every step.
// NOEF-LABEL: func.func @step
// NOEF-SAME: tensor<32x2xf32> {distopt.init = "randn_each_step", distopt.name = "w.powersgd_q"
// NOEF-NOT: powersgd_error
// NOEF: distopt.powersgd_all_reduce %{{.*}}, %{{.*}}, %{{.*}} on @dp rank 2 : tensor<64x32xf32>
func.func @step(%w: tensor<64x32xf32> {distopt.name = "w", distopt.role = "grad"},
                %conv: tensor<16x3x3x4xf32> {distopt.name = "conv", distopt.role = "grad"},
                %b: tensor<4xf32> {distopt.name = "b", distopt.role = "grad"},
                %s: tensor<4x4xf32> {distopt.name = "s", distopt.role = "grad"})
    -> (tensor<64x32xf32>, tensor<16x3x3x4xf32>, tensor<4xf32>, tensor<4x4xf32>) {
  %0 = distopt.all_reduce avg %w on @dp : tensor<64x32xf32>
  %1 = distopt.all_reduce avg %conv on @dp : tensor<16x3x3x4xf32>
  %2 = distopt.all_reduce avg %b on @dp : tensor<4xf32>
  %3 = distopt.all_reduce avg %s on @dp : tensor<4x4xf32>
  return %0, %1, %2, %3 : tensor<64x32xf32>, tensor<16x3x3x4xf32>, tensor<4xf32>, tensor<4x4xf32>
}

// -----

distopt.process_group @dp size 4

// Sums are not averages: left alone, as are integers.
// CHECK-LABEL: func.func @left_alone
// CHECK: distopt.all_reduce sum %{{.*}} : tensor<64x32xf32>
// CHECK: distopt.all_reduce avg %{{.*}} : tensor<64x32xi32>
// CHECK-NOT: powersgd
func.func @left_alone(%w: tensor<64x32xf32>, %i: tensor<64x32xi32>) -> (tensor<64x32xf32>, tensor<64x32xi32>) {
  %0 = distopt.all_reduce sum %w on @dp : tensor<64x32xf32>
  %1 = distopt.all_reduce avg %i on @dp : tensor<64x32xi32>
  return %0, %1 : tensor<64x32xf32>, tensor<64x32xi32>
}

// -----

distopt.process_group @dp size 4

// With batch-mb=1, the two gradients it compresses (8 KiB each) share a
// batch, numbered after those the step has; PowerSGD ops it did not make
// keep their numbers, or their lack of one.
// CHECK-LABEL: func.func @numbered
// BATCH-LABEL: func.func @numbered
// BATCH: distopt.powersgd_all_reduce %arg0, {{.*}} rank 1 {batch = 3 : i64} :
// BATCH: distopt.powersgd_all_reduce %arg1, {{.*}} rank 1 :
// BATCH: distopt.powersgd_all_reduce %arg2, {{.*}} rank 1 {batch = 4 : i64} :
// BATCH: distopt.powersgd_all_reduce %arg3, {{.*}} rank 1 {batch = 4 : i64} :
func.func @numbered(%h0: tensor<8x8xf32>, %h1: tensor<8x8xf32>,
                    %w0: tensor<64x32xf32>, %w1: tensor<64x32xf32>,
                    %p: tensor<8x1xf32>, %q: tensor<8x1xf32>)
    -> (tensor<8x8xf32>, tensor<8x8xf32>, tensor<64x32xf32>, tensor<64x32xf32>) {
  %r0:3 = distopt.powersgd_all_reduce %h0, %p, %q on @dp rank 1 {batch = 3 : i64} : tensor<8x8xf32>, tensor<8x1xf32>, tensor<8x1xf32>
  %r1:3 = distopt.powersgd_all_reduce %h1, %p, %q on @dp rank 1 : tensor<8x8xf32>, tensor<8x1xf32>, tensor<8x1xf32>
  %0 = distopt.all_reduce avg %w0 on @dp : tensor<64x32xf32>
  %1 = distopt.all_reduce avg %w1 on @dp : tensor<64x32xf32>
  return %r0#0, %r1#0, %0, %1 : tensor<8x8xf32>, tensor<8x8xf32>, tensor<64x32xf32>, tensor<64x32xf32>
}

// ZeRO-2 on GPT-2: the reduce_scatters are gone; the matrices go through
// PowerSGD, the vectors through one all_reduce; each rank keeps its chunk.
// ZERO2-LABEL: func.func @step
// ZERO2-NOT: distopt.reduce_scatter
// ZERO2: distopt.powersgd_all_reduce
// ZERO2: distopt.all_reduce avg
// ZERO2: distopt.shard_slice
// ZERO2-NOT: distopt.reduce_scatter
// ZERO2: return
