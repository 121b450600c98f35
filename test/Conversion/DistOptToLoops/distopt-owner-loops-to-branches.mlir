// RUN: distopt-opt %s -split-input-file -verify-diagnostics --pass-pipeline="builtin.module(func.func(distopt-owner-loops-to-branches))" | FileCheck %s

// An owner loop whose buffers bufferization updated in place carries
// nothing: a branch on the owner's test, the body inlined at iteration 0.
// CHECK-LABEL: func.func @in_place
// CHECK-SAME: (%[[OWNER:.*]]: i1, %[[M:.*]]: memref<4xf32>)
// CHECK: %[[C0:.*]] = arith.constant 0 : index
// CHECK-NOT: scf.for
// CHECK: scf.if %[[OWNER]] {
// CHECK:   memref.store %{{.*}}, %[[M]][%[[C0]]] : memref<4xf32>
// CHECK: }
// CHECK-NOT: distopt.owner_loop
func.func @in_place(%owner: i1, %m: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %trips = arith.select %owner, %c1, %c0 : index
  %v = arith.constant 1.0 : f32
  scf.for %i = %c0 to %trips step %c1 {
    memref.store %v, %m[%i] : memref<4xf32>
  } {distopt.owner_loop}
  return
}

// -----

// Values still carried: the body's results on the owner, the initial ones
// elsewhere.
// CHECK-LABEL: func.func @carried
// CHECK-SAME: (%[[OWNER:.*]]: i1, %[[X:.*]]: f32)
// CHECK: %[[R:.*]] = scf.if %[[OWNER]] -> (f32) {
// CHECK:   %[[Y:.*]] = arith.addf %[[X]], %[[X]] : f32
// CHECK:   scf.yield %[[Y]] : f32
// CHECK: } else {
// CHECK:   scf.yield %[[X]] : f32
// CHECK: }
// CHECK: return %[[R]]
func.func @carried(%owner: i1, %x: f32) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %trips = arith.select %owner, %c1, %c0 : index
  %r = scf.for %i = %c0 to %trips step %c1 iter_args(%a = %x) -> f32 {
    %y = arith.addf %a, %a : f32
    scf.yield %y : f32
  } {distopt.owner_loop}
  return %r : f32
}

// -----

// A marked loop that may run more than once is refused, not made a branch.
func.func @not_an_owner_loop(%n: index, %m: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = arith.constant 1.0 : f32
  // expected-error @below {{marked distopt.owner_loop must run from 0 to select(%owner, 1, 0) by 1}}
  scf.for %i = %c0 to %n step %c1 {
    memref.store %v, %m[%i] : memref<4xf32>
  } {distopt.owner_loop}
  return
}

// -----

// Other loops stay loops.
// CHECK-LABEL: func.func @unmarked
// CHECK: scf.for
// CHECK-NOT: scf.if
func.func @unmarked(%n: index, %m: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = arith.constant 1.0 : f32
  scf.for %i = %c0 to %n step %c1 {
    memref.store %v, %m[%i] : memref<4xf32>
  }
  return
}
