// RUN: distopt-opt %s -split-input-file --distopt-grad-as-bucket-view | FileCheck %s
// Idempotent: a second run finds no pack of gradient arguments.
// RUN: distopt-opt %s -split-input-file --distopt-grad-as-bucket-view --distopt-grad-as-bucket-view | FileCheck %s
// The step DDP's bucketing forms, end to end: no copy is left.
// RUN: distopt-opt %s -split-input-file --distopt-bucketize --distopt-grad-as-bucket-view --distopt-lower-to-cpu | FileCheck %s --check-prefix=LOWERED
// The report still counts the bucket (an argument now).
// RUN: distopt-opt %s -split-input-file --distopt-grad-as-bucket-view --distopt-report -o /dev/null | FileCheck %s --check-prefix=REPORT

distopt.process_group @dp size 4

// Two gradients in one bucket: one flat argument, in the first gradient's
// place, with the layout bucket_pack gives them (b at 0, a at 16).
// CHECK-LABEL: func.func @bucket
// CHECK-SAME: (%[[W:[^:]*]]: tensor<4x4xf32> {distopt.name = "a", distopt.role = "param"},
// CHECK-SAME: %[[BUCKET:[^:]*]]: tensor<32xf32> {distopt.layout = [{name = "b", offset = 0 : i64, shape = array<i64: 8>}, {name = "a", offset = 16 : i64, shape = array<i64: 4, 4>}], distopt.name = "bucket0", distopt.role = "grad"},
// CHECK-SAME: %{{[^:]*}}: f32 {distopt.role = "lr"}, %{{[^:]*}}: i64 {distopt.role = "step"})
// CHECK-SAME: -> (tensor<4x4xf32> {distopt.name = "a", distopt.role = "param"})
// CHECK-NOT: distopt.bucket_pack
// CHECK: %[[R:.*]] = distopt.all_reduce avg %[[BUCKET]] on @dp : tensor<32xf32>
// CHECK: %[[U:.*]]:2 = distopt.bucket_unpack %[[R]] : tensor<32xf32> -> tensor<8xf32>, tensor<4x4xf32>
// CHECK: distopt.sgd_update %[[W]], %[[U]]#1
// REPORT-LABEL: distopt report for @bucket
// REPORT: buckets: 1
// REPORT-NEXT: # tensors elements bytes padding
// REPORT-NEXT: 0 2 32 128 8
// LOWERED-LABEL: llvm.func @bucket
// LOWERED-NOT: llvm.call @memcpy
// LOWERED-NOT: llvm.call @malloc
// LOWERED: llvm.call @distopt_rt_all_reduce
// LOWERED-NOT: llvm.call @memcpy
// LOWERED-NOT: llvm.call @malloc
// LOWERED: llvm.return
func.func @bucket(%w: tensor<4x4xf32> {distopt.name = "a", distopt.role = "param"},
                  %ga: tensor<4x4xf32> {distopt.name = "a", distopt.role = "grad"},
                  %gb: tensor<8xf32> {distopt.name = "b", distopt.role = "grad"},
                  %lr: f32 {distopt.role = "lr"}, %t: i64 {distopt.role = "step"})
    -> (tensor<4x4xf32> {distopt.name = "a", distopt.role = "param"}) {
  %p = distopt.bucket_pack %gb, %ga : tensor<8xf32>, tensor<4x4xf32> -> tensor<32xf32>
  %r = distopt.all_reduce avg %p on @dp : tensor<32xf32>
  %b, %a = distopt.bucket_unpack %r : tensor<32xf32> -> tensor<8xf32>, tensor<4x4xf32>
  %w1 = distopt.sgd_update %w, %a lr(%lr) step(%t) : tensor<4x4xf32>, f32
  return %w1 : tensor<4x4xf32>
}

// -----

distopt.process_group @dp size 4

// Returned gradients become one returned bucket: the reduced bucket itself
// when they are all of it, in its layout.
// CHECK-LABEL: func.func @returned
// CHECK-SAME: (%[[BUCKET:[^:]*]]: tensor<32xf32> {distopt.layout = [{name = "b", offset = 0 : i64, shape = array<i64: 8>}, {name = "a", offset = 16 : i64, shape = array<i64: 16>}], distopt.name = "bucket0", distopt.role = "grad"})
// CHECK-SAME: -> (tensor<32xf32> {distopt.layout = [{name = "b", offset = 0 : i64, shape = array<i64: 8>}, {name = "a", offset = 16 : i64, shape = array<i64: 16>}], distopt.name = "bucket0", distopt.role = "grad"})
// CHECK: %[[R:.*]] = distopt.all_reduce avg %[[BUCKET]]
// CHECK-NOT: distopt.bucket_pack
// CHECK: return %[[R]] : tensor<32xf32>
func.func @returned(%ga: tensor<16xf32> {distopt.name = "a", distopt.role = "grad"},
                    %gb: tensor<8xf32> {distopt.name = "b", distopt.role = "grad"})
    -> (tensor<16xf32> {distopt.name = "a", distopt.role = "grad"},
        tensor<8xf32> {distopt.name = "b", distopt.role = "grad"}) {
  %p = distopt.bucket_pack %gb, %ga : tensor<8xf32>, tensor<16xf32> -> tensor<32xf32>
  %r = distopt.all_reduce avg %p on @dp : tensor<32xf32>
  %b, %a = distopt.bucket_unpack %r : tensor<32xf32> -> tensor<8xf32>, tensor<16xf32>
  return %a, %b : tensor<16xf32>, tensor<8xf32>
}

// -----

distopt.process_group @dp size 4

// Other uses of a gradient read it from the bucket; returned values that
// are not the unpacked bucket are packed into the returned one.
// CHECK-LABEL: func.func @other_uses
// CHECK-SAME: (%[[BUCKET:[^:]*]]: tensor<32xf32>
// CHECK-NEXT: %[[G:.*]]:2 = distopt.bucket_unpack %[[BUCKET]] : tensor<32xf32> -> tensor<8xf32>, tensor<16xf32>
// CHECK: %[[S:.*]] = arith.mulf %[[G]]#1, %[[G]]#1 : tensor<16xf32>
// CHECK: distopt.all_reduce sum %[[BUCKET]]
// CHECK: %[[BACK:.*]] = distopt.bucket_pack %[[G]]#0, %[[S]] : tensor<8xf32>, tensor<16xf32> -> tensor<32xf32>
// CHECK: return %{{.*}}, %[[BACK]] : tensor<32xf32>, tensor<32xf32>
func.func @other_uses(%ga: tensor<16xf32> {distopt.name = "a", distopt.role = "grad"},
                      %gb: tensor<8xf32> {distopt.name = "b", distopt.role = "grad"})
    -> (tensor<32xf32>, tensor<16xf32> {distopt.name = "a", distopt.role = "grad"},
        tensor<8xf32> {distopt.name = "b", distopt.role = "grad"}) {
  %sq = arith.mulf %ga, %ga : tensor<16xf32>
  %p = distopt.bucket_pack %gb, %ga : tensor<8xf32>, tensor<16xf32> -> tensor<32xf32>
  %r = distopt.all_reduce sum %p on @dp : tensor<32xf32>
  return %r, %sq, %gb : tensor<32xf32>, tensor<16xf32>, tensor<8xf32>
}

// -----

distopt.process_group @dp size 4

// A ZeRO-2 flat bucket (padded to the group) becomes an argument too.
// CHECK-LABEL: func.func @zero2
// CHECK-SAME: (%[[BUCKET:[^:]*]]: tensor<64xf32> {distopt.layout = [{name = "a", offset = 0 : i64, shape = array<i64: 16>}, {name = "b", offset = 16 : i64, shape = array<i64: 8>}], distopt.name = "bucket0", distopt.role = "grad"})
// CHECK: distopt.reduce_scatter avg %[[BUCKET]] on @dp : tensor<64xf32> -> tensor<16xf32>
func.func @zero2(%ga: tensor<16xf32> {distopt.name = "a", distopt.role = "grad"},
                 %gb: tensor<8xf32> {distopt.name = "b", distopt.role = "grad"}) -> tensor<16xf32> {
  %p = distopt.bucket_pack %ga, %gb : tensor<16xf32>, tensor<8xf32> -> tensor<64xf32>
  %s = distopt.reduce_scatter avg %p on @dp : tensor<64xf32> -> tensor<16xf32>
  return %s : tensor<16xf32>
}

// -----

distopt.process_group @dp size 4

// Left alone: a gradient in two buckets (it cannot be a view of both), a
// bucket of computed values, of parameters, of unnamed or same-named
// gradients, and one with only some of its gradients returned.
// CHECK-LABEL: func.func @left_alone
// CHECK-COUNT-6: distopt.bucket_pack
// CHECK-NOT: bucket0
func.func @left_alone(%ga: tensor<16xf32> {distopt.name = "a", distopt.role = "grad"},
                      %gb: tensor<8xf32> {distopt.name = "b", distopt.role = "grad"},
                      %w: tensor<8xf32> {distopt.name = "b", distopt.role = "param"},
                      %gu: tensor<8xf32> {distopt.role = "grad"},
                      %gd1: tensor<8xf32> {distopt.name = "d", distopt.role = "grad"},
                      %gd2: tensor<8xf32> {distopt.name = "d", distopt.role = "grad"},
                      %ge: tensor<8xf32> {distopt.name = "e", distopt.role = "grad"},
                      %gf: tensor<8xf32> {distopt.name = "f", distopt.role = "grad"})
    -> (tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<48xf32>, tensor<32xf32>,
        tensor<8xf32> {distopt.name = "e", distopt.role = "grad"}) {
  %twice1 = distopt.bucket_pack %ga, %gb : tensor<16xf32>, tensor<8xf32> -> tensor<32xf32>
  %twice2 = distopt.bucket_pack %gb, %ga : tensor<8xf32>, tensor<16xf32> -> tensor<32xf32>
  %sq = arith.mulf %gb, %gb : tensor<8xf32>
  %computed = distopt.bucket_pack %sq, %ga : tensor<8xf32>, tensor<16xf32> -> tensor<32xf32>
  %params = distopt.bucket_pack %w, %w : tensor<8xf32>, tensor<8xf32> -> tensor<32xf32>
  %named = distopt.bucket_pack %gu, %gd1, %gd2 : tensor<8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<48xf32>
  %some = distopt.bucket_pack %ge, %gf : tensor<8xf32>, tensor<8xf32> -> tensor<32xf32>
  return %twice1, %twice2, %computed, %params, %named, %some, %ge : tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<48xf32>, tensor<32xf32>, tensor<8xf32>
}

// -----

distopt.process_group @dp size 4

// A name already taken is not reused.
// CHECK-LABEL: func.func @fresh_name
// CHECK-SAME: distopt.name = "bucket0", distopt.role = "grad"}
// CHECK-SAME: distopt.name = "bucket1", distopt.role = "grad"}
func.func @fresh_name(%old: tensor<16xf32> {distopt.name = "bucket0", distopt.role = "grad"},
                      %ga: tensor<16xf32> {distopt.name = "a", distopt.role = "grad"},
                      %gb: tensor<8xf32> {distopt.name = "b", distopt.role = "grad"}) -> (tensor<16xf32>, tensor<32xf32>) {
  %r0 = distopt.all_reduce sum %old on @dp : tensor<16xf32>
  %p = distopt.bucket_pack %ga, %gb : tensor<16xf32>, tensor<8xf32> -> tensor<32xf32>
  %r = distopt.all_reduce sum %p on @dp : tensor<32xf32>
  return %r0, %r : tensor<16xf32>, tensor<32xf32>
}
