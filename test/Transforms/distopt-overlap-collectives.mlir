// Placement, with every collective overlapped (min-work-ratio=0):
// RUN: distopt-opt %s --distopt-overlap-collectives="min-work-ratio=0" | FileCheck %s
// RUN: distopt-opt %s --distopt-overlap-collectives="min-work-ratio=0" --distopt-verify-collectives > /dev/null
// The default's cost rule: distopt-overlap-collectives-cost.mlir.

distopt.process_group @dp size 4

// Starts move up to just after their inputs, in order; waits move down to
// just before the first use; the multiply overlaps with both reductions.
// CHECK-LABEL: func.func @step
// CHECK-SAME: (%[[A:.*]]: tensor<8xf32>, %[[B:.*]]: tensor<8xf32>)
// CHECK-NEXT: %[[TA:.*]] = distopt.all_reduce_start avg %[[A]] on @dp
// CHECK-NEXT: %[[X:.*]] = arith.mulf %[[B]], %[[B]]
// CHECK-NEXT: %[[TX:.*]] = distopt.reduce_scatter_start sum %[[X]] on @dp : tensor<8xf32> -> !distopt.token<tensor<2xf32>>
// CHECK-NEXT: %[[Y:.*]] = arith.mulf %[[A]], %[[B]]
// CHECK-NEXT: %[[RA:.*]] = distopt.wait %[[TA]]
// CHECK-NEXT: %[[S:.*]] = arith.addf %[[RA]], %[[Y]]
// CHECK-NEXT: %[[TG:.*]] = distopt.all_gather_start %{{.*}} on @dp
// CHECK-NEXT: %[[RX:.*]] = distopt.wait %[[TX]]
// CHECK-NEXT: %[[RG:.*]] = distopt.wait %[[TG]]
// CHECK-NEXT: return %[[S]], %[[RX]], %[[RG]]
func.func @step(%a: tensor<8xf32>, %b: tensor<8xf32>) -> (tensor<8xf32>, tensor<2xf32>, tensor<32xf32>) {
  %x = arith.mulf %b, %b : tensor<8xf32>
  %y = arith.mulf %a, %b : tensor<8xf32>
  %ra = distopt.all_reduce avg %a on @dp : tensor<8xf32>
  %s = arith.addf %ra, %y : tensor<8xf32>
  %rx = distopt.reduce_scatter sum %x on @dp : tensor<8xf32> -> tensor<2xf32>
  %rg = distopt.all_gather %s on @dp : tensor<8xf32> -> tensor<32xf32>
  return %s, %rx, %rg : tensor<8xf32>, tensor<2xf32>, tensor<32xf32>
}

// Every collective kind has a start form; an unused result is still waited.
// CHECK-LABEL: func.func @kinds
// CHECK: distopt.broadcast_start %{{.*}} on @dp root 2
// CHECK: distopt.reduce_start max %{{.*}} on @dp root 1
// CHECK: distopt.all_reduce_start premul_sum(5.000000e-01) %{{.*}} on @dp wire bf16
// CHECK: distopt.wait
// CHECK: distopt.wait
// CHECK: distopt.wait
// CHECK-NEXT: return
func.func @kinds(%a: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %0 = distopt.broadcast %a on @dp root 2 : tensor<8xf32>
  %1 = distopt.reduce max %a on @dp root 1 : tensor<8xf32>
  %2 = distopt.all_reduce premul_sum(0.5) %a on @dp wire bf16 : tensor<8xf32>
  return %0, %1 : tensor<8xf32>, tensor<8xf32>
}

// Left alone: collectives already asynchronous, and other communicating ops,
// which a new start does not cross. A use nested in a region puts the wait
// before the region.
// CHECK-LABEL: func.func @left_alone
// CHECK-NEXT: %[[T:.*]] = distopt.all_reduce_start sum
// CHECK-NEXT: %[[OK:.*]] = distopt.all_finite
// CHECK-NEXT: %[[R:.*]] = distopt.wait %[[T]]
// CHECK-NEXT: %[[S:.*]] = distopt.all_reduce_start avg
// CHECK-NEXT: %[[A:.*]] = distopt.wait %[[S]]
// CHECK-NEXT: scf.if %[[OK]]
// CHECK-NEXT: scf.yield %[[A]]
func.func @left_alone(%c: i1, %a: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %t = distopt.all_reduce_start sum %a on @dp : tensor<8xf32> -> !distopt.token<tensor<8xf32>>
  %ok = distopt.all_finite %a on @dp : tensor<8xf32>
  %r = distopt.wait %t : !distopt.token<tensor<8xf32>>
  %avg = distopt.all_reduce avg %a on @dp : tensor<8xf32>
  %out = scf.if %ok -> tensor<8xf32> {
    scf.yield %avg : tensor<8xf32>
  } else {
    scf.yield %a : tensor<8xf32>
  }
  return %r, %out : tensor<8xf32>, tensor<8xf32>
}
