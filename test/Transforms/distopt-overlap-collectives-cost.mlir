// A start copies its input, so a collective is overlapped only when the work
// that would run meanwhile writes at least min-work-ratio times its input.
// RUN: distopt-opt %s --distopt-overlap-collectives | FileCheck %s
// RUN: distopt-opt %s --distopt-overlap-collectives="min-work-ratio=8" | FileCheck %s --check-prefix=STRICT

distopt.process_group @dp size 4

// 4 KiB reduced while 16 KiB of updates are computed: overlapped (by
// default; not when 8x the input is asked for).
// CHECK-LABEL: func.func @enough_work
// CHECK: distopt.all_reduce_start avg %arg0
// CHECK: distopt.sgd_update
// CHECK: distopt.wait
// STRICT-LABEL: func.func @enough_work
// STRICT-NOT: distopt.all_reduce_start
// STRICT: distopt.all_reduce avg %arg0
func.func @enough_work(%g: tensor<1024xf32>, %p: tensor<4096xf32>, %q: tensor<4096xf32>, %lr: f32, %t: i64)
    -> (tensor<1024xf32>, tensor<4096xf32>) {
  %r = distopt.all_reduce avg %g on @dp : tensor<1024xf32>
  %u = distopt.sgd_update %p, %q lr(%lr) step(%t) : tensor<4096xf32>, f32
  return %r, %u : tensor<1024xf32>, tensor<4096xf32>
}

// The result is needed right away: nothing to overlap, no start.
// CHECK-LABEL: func.func @used_at_once
// CHECK-NOT: distopt.all_reduce_start
// CHECK: %[[R:.*]] = distopt.all_reduce avg %arg0
// CHECK-NEXT: distopt.sgd_update %arg1, %[[R]]
func.func @used_at_once(%g: tensor<1024xf32>, %p: tensor<1024xf32>, %lr: f32, %t: i64) -> tensor<1024xf32> {
  %r = distopt.all_reduce avg %g on @dp : tensor<1024xf32>
  %u = distopt.sgd_update %p, %r lr(%lr) step(%t) : tensor<1024xf32>, f32
  return %u : tensor<1024xf32>
}
