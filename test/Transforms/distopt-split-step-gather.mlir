// --distopt-split-step=gather-params: each ZeRO-3 flat parameter shard also
// gets a gather entry, an all_gather over the group its gradient is
// reduce-scattered on (a hybrid shard group here for the second), returned
// as a new argument of role gathered_param with the flat buffer's layout;
// every entry takes it, and only its gather entry reads it.
// RUN: distopt-opt %s --distopt-split-step=gather-params -split-input-file -verify-diagnostics | FileCheck %s

distopt.process_group @world size 4
distopt.mesh @nodes shape [2, 2]
distopt.process_group @shard size 2 over @nodes axes [1]

// CHECK-LABEL: func.func @step(
// CHECK-SAME: %[[P0:[^:]*]]: tensor<2xf32> {distopt.layout = [{name = "a", offset = 0 : i64, shape = array<i64: 8>}], distopt.name = "flat0.param", distopt.role = "param", distopt.shard_of = 8 : i64}
// CHECK-SAME: %[[P1:[^:]*]]: tensor<3xf32> {distopt.layout = [{name = "b", offset = 0 : i64, shape = array<i64: 6>}], distopt.name = "flat1.param", distopt.role = "param", distopt.shard_of = 6 : i64}
// CHECK-SAME: {distopt.name = "reduced0", distopt.role = "reduced_grad", distopt.shard_of = 8 : i64}
// CHECK-SAME: {distopt.name = "reduced1", distopt.role = "reduced_grad", distopt.shard_of = 6 : i64}
// CHECK-SAME: %{{[^:]*}}: tensor<8xf32> {distopt.layout = [{name = "a", offset = 0 : i64, shape = array<i64: 8>}], distopt.name = "flat0.param", distopt.role = "gathered_param"}
// CHECK-SAME: %{{[^:]*}}: tensor<6xf32> {distopt.layout = [{name = "b", offset = 0 : i64, shape = array<i64: 6>}], distopt.name = "flat1.param", distopt.role = "gathered_param"})
// CHECK-NOT: all_gather
// CHECK: return

// CHECK-LABEL: func.func @step_update(
// CHECK-NOT: all_gather
// CHECK: return

// CHECK-LABEL: func.func @step_gather0(
// CHECK-SAME: -> (tensor<8xf32> {distopt.layout = [{name = "a", offset = 0 : i64, shape = array<i64: 8>}], distopt.name = "flat0.param", distopt.role = "gathered_param"})
// CHECK-SAME: attributes {distopt.entry = "gather", distopt.gathers = array<i64: 0>}
// CHECK-NEXT: %[[A:.*]] = distopt.all_gather %arg0 on @world : tensor<2xf32> -> tensor<8xf32>
// CHECK-NEXT: return %[[A]]

// CHECK-LABEL: func.func @step_gather1(
// CHECK-SAME: attributes {distopt.entry = "gather", distopt.gathers = array<i64: 1>}
// CHECK-NEXT: %[[B:.*]] = distopt.all_gather %arg1 on @shard : tensor<3xf32> -> tensor<6xf32>
// CHECK-NEXT: return %[[B]]
func.func @step(%p0: tensor<2xf32> {distopt.role = "param", distopt.name = "flat0.param", distopt.shard_of = 8 : i64, distopt.layout = [{name = "a", offset = 0 : i64, shape = array<i64: 8>}]},
                %p1: tensor<3xf32> {distopt.role = "param", distopt.name = "flat1.param", distopt.shard_of = 6 : i64, distopt.layout = [{name = "b", offset = 0 : i64, shape = array<i64: 6>}]},
                %g0: tensor<8xf32> {distopt.role = "grad", distopt.name = "bucket0"},
                %g1: tensor<6xf32> {distopt.role = "grad", distopt.name = "bucket1"})
    -> (tensor<2xf32> {distopt.role = "param", distopt.name = "flat0.param", distopt.shard_of = 8 : i64, distopt.layout = [{name = "a", offset = 0 : i64, shape = array<i64: 8>}]},
        tensor<3xf32> {distopt.role = "param", distopt.name = "flat1.param", distopt.shard_of = 6 : i64, distopt.layout = [{name = "b", offset = 0 : i64, shape = array<i64: 6>}]}) {
  %r0 = distopt.reduce_scatter avg %g0 on @world : tensor<8xf32> -> tensor<2xf32>
  %r1 = distopt.reduce_scatter avg %g1 on @shard : tensor<6xf32> -> tensor<3xf32>
  %n0 = arith.subf %p0, %r0 : tensor<2xf32>
  %n1 = arith.subf %p1, %r1 : tensor<3xf32>
  return %n0, %n1 : tensor<2xf32>, tensor<3xf32>
}

// -----

// A shard no reduce-scatter tells the group of is refused, and so is one
// two groups of its size could gather (the axes of a 2 x 2 mesh), and a
// shard that is not a flat buffer of static length (verifier-valid).
distopt.process_group @world size 4

// expected-error @below {{--distopt-split-step: cannot tell which group parameter shard #0 is gathered over: not one group reduce-scatters a 8-element buffer into 4 parts}}
func.func @step(%p0: tensor<2xf32> {distopt.role = "param", distopt.name = "flat0.param", distopt.shard_of = 8 : i64, distopt.layout = [{name = "a", offset = 0 : i64, shape = array<i64: 8>}]},
                %g0: tensor<8xf32> {distopt.role = "grad", distopt.name = "a"})
    -> (tensor<2xf32> {distopt.role = "param", distopt.name = "flat0.param", distopt.shard_of = 8 : i64, distopt.layout = [{name = "a", offset = 0 : i64, shape = array<i64: 8>}]}) {
  %r = distopt.all_reduce avg %g0 on @world : tensor<8xf32>
  %s = tensor.extract_slice %r[0] [2] [1] : tensor<8xf32> to tensor<2xf32>
  %n = arith.subf %p0, %s : tensor<2xf32>
  return %n : tensor<2xf32>
}

// -----

distopt.mesh @nodes shape [2, 2]
distopt.process_group @rows size 2 over @nodes axes [0]
distopt.process_group @cols size 2 over @nodes axes [1]

// expected-error @below {{--distopt-split-step: cannot tell which group parameter shard #0 is gathered over: not one group reduce-scatters a 8-element buffer into 2 parts}}
func.func @step(%p0: tensor<4xf32> {distopt.role = "param", distopt.name = "flat0.param", distopt.shard_of = 8 : i64, distopt.layout = [{name = "a", offset = 0 : i64, shape = array<i64: 8>}]},
                %g0: tensor<8xf32> {distopt.role = "grad", distopt.name = "a"},
                %g1: tensor<8xf32> {distopt.role = "grad", distopt.name = "b"})
    -> (tensor<4xf32> {distopt.role = "param", distopt.name = "flat0.param", distopt.shard_of = 8 : i64, distopt.layout = [{name = "a", offset = 0 : i64, shape = array<i64: 8>}]}) {
  %r0 = distopt.reduce_scatter avg %g0 on @rows : tensor<8xf32> -> tensor<4xf32>
  %r1 = distopt.reduce_scatter avg %g1 on @cols : tensor<8xf32> -> tensor<4xf32>
  %n = arith.subf %p0, %r0 : tensor<4xf32>
  %m = arith.subf %n, %r1 : tensor<4xf32>
  return %m : tensor<4xf32>
}

// -----

distopt.process_group @world size 2

// expected-error @below {{--distopt-split-step: parameter shard #0 is 'tensor<2x2xf32>', not a flat buffer of static length}}
func.func @step(%p0: tensor<2x2xf32> {distopt.role = "param", distopt.name = "flat0.param", distopt.shard_of = 8 : i64, distopt.layout = [{name = "a", offset = 0 : i64, shape = array<i64: 8>}]})
    -> (tensor<2x2xf32> {distopt.role = "param", distopt.name = "flat0.param", distopt.shard_of = 8 : i64, distopt.layout = [{name = "a", offset = 0 : i64, shape = array<i64: 8>}]}) {
  return %p0 : tensor<2x2xf32>
}
