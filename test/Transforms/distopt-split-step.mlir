// --distopt-split-step: each gradient's reduction chain (what prepares it,
// its collectives, synchronous or started and waited, and the scaling that
// makes the mean)
// becomes an entry point of its own; @step_update reads what they left;
// @step stays whole. Every entry takes @step's arguments.
// RUN: distopt-opt %s --distopt-split-step -split-input-file -verify-diagnostics | FileCheck %s

distopt.process_group @world size 4

// An all-reduced bucket is left in its argument (role grad); a
// reduce-scattered one in a new argument of role reduced_grad; a gradient
// whose reduction is not such a chain (a product first, as PowerSGD's) is
// reduced in the update.
// CHECK-LABEL: func.func @step(
// CHECK-SAME: %[[G0:[^:]*]]: tensor<8xf32> {distopt.name = "b0", distopt.role = "grad"}
// CHECK-SAME: %[[G1:[^:]*]]: tensor<8xf32> {distopt.name = "b1", distopt.role = "grad"}
// CHECK-SAME: {distopt.name = "m", distopt.role = "grad"}
// CHECK-SAME: %[[SHARD:[^:]*]]: tensor<2xf32> {distopt.name = "reduced1", distopt.role = "reduced_grad", distopt.shard_of = 8 : i64}
// CHECK: distopt.all_reduce_start sum %[[G0]]
// CHECK: distopt.reduce_scatter avg %[[G1]]

// CHECK-LABEL: func.func @step_reduce0(
// CHECK-SAME: -> (tensor<8xf32> {distopt.name = "b0", distopt.role = "grad"})
// CHECK-SAME: attributes {distopt.entry = "reduce", distopt.reduces = array<i64: 0>}
// CHECK-NEXT: %[[T:.*]] = distopt.all_reduce_start sum %arg0
// CHECK-NEXT: %[[W:.*]] = distopt.wait %[[T]]
// CHECK-NEXT: %[[C:.*]] = arith.constant dense<4.000000e+00>
// CHECK-NEXT: %[[M:.*]] = arith.divf %[[W]], %[[C]]
// CHECK-NEXT: return %[[M]]

// CHECK-LABEL: func.func @step_reduce1(
// CHECK-SAME: -> (tensor<2xf32> {distopt.name = "reduced1", distopt.role = "reduced_grad", distopt.shard_of = 8 : i64})
// CHECK-SAME: attributes {distopt.entry = "reduce", distopt.reduces = array<i64: 1>}
// CHECK-NEXT: distopt.reduce_scatter avg %arg1
// CHECK-NEXT: return

// CHECK-LABEL: func.func @step_update(
// CHECK-SAME: %[[UG0:[^:]*]]: tensor<8xf32> {distopt.name = "b0", distopt.role = "grad"}
// CHECK-SAME: %[[UM:[^:]*]]: tensor<4x4xf32> {distopt.name = "m", distopt.role = "grad"}
// CHECK-SAME: %[[USHARD:[^:]*]]: tensor<2xf32> {distopt.name = "reduced1", distopt.role = "reduced_grad", distopt.shard_of = 8 : i64}
// CHECK-SAME: attributes {distopt.entry = "update"}
// CHECK-NOT: all_reduce_start
// CHECK-NOT: reduce_scatter
// CHECK: arith.mulf %[[UM]], %[[UM]]
// CHECK: distopt.all_reduce sum
// CHECK: return %[[UG0]], %[[USHARD]]
func.func @step(%g0: tensor<8xf32> {distopt.role = "grad", distopt.name = "b0"},
                %g1: tensor<8xf32> {distopt.role = "grad", distopt.name = "b1"},
                %m: tensor<4x4xf32> {distopt.role = "grad", distopt.name = "m"})
    -> (tensor<8xf32>, tensor<2xf32>, tensor<4x4xf32>) {
  %t = distopt.all_reduce_start sum %g0 on @world : tensor<8xf32> -> !distopt.token<tensor<8xf32>>
  %s = distopt.wait %t : !distopt.token<tensor<8xf32>>
  %n = arith.constant dense<4.0> : tensor<8xf32>
  %mean = arith.divf %s, %n : tensor<8xf32>
  %shard = distopt.reduce_scatter avg %g1 on @world : tensor<8xf32> -> tensor<2xf32>
  %sq = arith.mulf %m, %m : tensor<4x4xf32>
  %r = distopt.all_reduce sum %sq on @world : tensor<4x4xf32>
  return %mean, %shard, %r : tensor<8xf32>, tensor<2xf32>, tensor<4x4xf32>
}

// -----

distopt.process_group @world size 4

// grad_accumulation: a bf16 gradient widened and added to its f32
// accumulator is part of its chain (the reduce entry reads the accumulator);
// a sum with anything else (a parameter) is not.
// CHECK-LABEL: func.func @step_reduce0(
// CHECK-SAME: %[[G:[^:]*]]: tensor<8xbf16> {distopt.name = "w", distopt.role = "grad"}
// CHECK-SAME: %[[ACC:[^:]*]]: tensor<8xf32> {distopt.name = "w", distopt.role = "grad_accum"}
// CHECK-SAME: attributes {distopt.entry = "reduce", distopt.reduces = array<i64: 0>}
// CHECK: %[[WIDE:.*]] = arith.extf %[[G]]
// CHECK: %[[SUM:.*]] = arith.addf %[[ACC]], %[[WIDE]]
// CHECK: distopt.all_reduce sum %[[SUM]]
// CHECK-NOT: func.func @step_reduce1
// CHECK-LABEL: func.func @step_update(
// CHECK: arith.addf %{{.*}}, %{{.*}} : tensor<4xf32>
// CHECK: distopt.all_reduce sum
func.func @step(%g: tensor<8xbf16> {distopt.role = "grad", distopt.name = "w"},
                %acc: tensor<8xf32> {distopt.role = "grad_accum", distopt.name = "w"},
                %h: tensor<4xf32> {distopt.role = "grad", distopt.name = "v"},
                %p: tensor<4xf32> {distopt.role = "param", distopt.name = "v"})
    -> (tensor<8xf32>, tensor<4xf32>) {
  %wide = arith.extf %g : tensor<8xbf16> to tensor<8xf32>
  %sum = arith.addf %acc, %wide : tensor<8xf32>
  %r = distopt.all_reduce sum %sum on @world : tensor<8xf32>
  %mixed = arith.addf %h, %p : tensor<4xf32>
  %s = distopt.all_reduce sum %mixed on @world : tensor<4xf32>
  return %r, %s : tensor<8xf32>, tensor<4xf32>
}

// -----

distopt.process_group @world size 2

// A bucket whose tensors are each divided by the same constant after
// unpacking (the micro-batches' mean) is divided before: its reduce entry
// returns the mean, as a lone gradient's does. Tensors divided by
// different constants stay as they are.
// CHECK-LABEL: func.func @step_reduce0(
// CHECK: %[[SUM:.*]] = distopt.all_reduce avg
// CHECK: %[[K:.*]] = arith.constant dense<4.000000e+00> : tensor<64xf32>
// CHECK: %[[MEAN:.*]] = arith.divf %[[SUM]], %[[K]] : tensor<64xf32>
// CHECK: return %[[MEAN]]
// CHECK-LABEL: func.func @step_reduce1(
// CHECK: %[[SUM1:.*]] = distopt.all_reduce avg
// CHECK-NEXT: return %[[SUM1]]
// CHECK-LABEL: func.func @step_update(
// CHECK: distopt.bucket_unpack %{{.*}} : tensor<64xf32> -> tensor<8xf32>, tensor<4xf32>
// CHECK-NOT: arith.divf %{{.*}} : tensor<8xf32>
// CHECK: arith.divf %{{.*}} : tensor<4xf32>
func.func @step(%g0: tensor<8xf32> {distopt.role = "grad", distopt.name = "a"},
                %a0: tensor<8xf32> {distopt.role = "grad_accum", distopt.name = "a"},
                %g1: tensor<4xf32> {distopt.role = "grad", distopt.name = "b"},
                %a1: tensor<4xf32> {distopt.role = "grad_accum", distopt.name = "b"},
                %g2: tensor<8xf32> {distopt.role = "grad", distopt.name = "c"},
                %g3: tensor<4xf32> {distopt.role = "grad", distopt.name = "d"})
    -> (tensor<8xf32>, tensor<4xf32>, tensor<8xf32>, tensor<4xf32>) {
  %s0 = arith.addf %a0, %g0 : tensor<8xf32>
  %s1 = arith.addf %a1, %g1 : tensor<4xf32>
  %b = distopt.bucket_pack %s0, %s1 : tensor<8xf32>, tensor<4xf32> -> tensor<64xf32>
  %r = distopt.all_reduce avg %b on @world : tensor<64xf32>
  %u:2 = distopt.bucket_unpack %r : tensor<64xf32> -> tensor<8xf32>, tensor<4xf32>
  %k8 = arith.constant dense<4.0> : tensor<8xf32>
  %k4 = arith.constant dense<4.0> : tensor<4xf32>
  %m0 = arith.divf %u#0, %k8 : tensor<8xf32>
  %m1 = arith.divf %u#1, %k4 : tensor<4xf32>
  %c = distopt.bucket_pack %g2, %g3 : tensor<8xf32>, tensor<4xf32> -> tensor<64xf32>
  %q = distopt.all_reduce avg %c on @world : tensor<64xf32>
  %v:2 = distopt.bucket_unpack %q : tensor<64xf32> -> tensor<8xf32>, tensor<4xf32>
  %h = arith.constant dense<2.0> : tensor<4xf32>
  %d = arith.divf %v#1, %h : tensor<4xf32>
  return %m0, %m1, %v#0, %d : tensor<8xf32>, tensor<4xf32>, tensor<8xf32>, tensor<4xf32>
}

// -----

// expected-error @+1 {{--distopt-split-step: the module has no @step to split}}
module {
  func.func @train(%g: tensor<8xf32>) -> tensor<8xf32> {
    return %g : tensor<8xf32>
  }
}

// -----

// expected-error @+1 {{--distopt-split-step: @step_update exists already (the step is split)}}
module {
  func.func @step(%g: tensor<8xf32>) -> tensor<8xf32> {
    return %g : tensor<8xf32>
  }
  func.func @step_update(%g: tensor<8xf32>) -> tensor<8xf32> {
    return %g : tensor<8xf32>
  }
}
