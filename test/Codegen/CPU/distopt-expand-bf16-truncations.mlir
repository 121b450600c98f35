// Rounding to bf16 on the bits (no __truncsfbf2 or __truncdfbf2 calls), f64
// through f32 rounded to odd, and bf16 arithmetic in f32.
// RUN: distopt-opt %s --distopt-expand-bf16-truncations | FileCheck %s
// Execution: test/Integration/f64-to-bf16.test.

// CHECK-LABEL: func.func @from_f32
// CHECK-NOT: arith.truncf
// CHECK: %[[BITS:.*]] = arith.bitcast %{{.*}} : f32 to i32
// CHECK: arith.shrui %[[BITS]]
// CHECK: arith.cmpf uno
// CHECK: arith.trunci %{{.*}} : i32 to i16
// CHECK: %[[R:.*]] = arith.bitcast %{{.*}} : i16 to bf16
// CHECK: return %[[R]]
func.func @from_f32(%x: f32) -> bf16 {
  %r = arith.truncf %x : f32 to bf16
  return %r : bf16
}

// CHECK-LABEL: func.func @from_f64
// CHECK: %[[NEAR:.*]] = arith.truncf %{{.*}} : f64 to f32
// CHECK: %[[BACK:.*]] = arith.extf %[[NEAR]] : f32 to f64
// CHECK: arith.cmpf ogt
// CHECK: arith.cmpf one, %[[BACK]]
// CHECK: arith.ori
// CHECK-NOT: arith.truncf
// CHECK: arith.bitcast %{{.*}} : i16 to bf16
func.func @from_f64(%x: f64) -> bf16 {
  %r = arith.truncf %x : f64 to bf16
  return %r : bf16
}

// CHECK-LABEL: func.func @arithmetic
// CHECK: %[[A:.*]] = arith.extf %{{.*}} : bf16 to f32
// CHECK: %[[B:.*]] = arith.extf %{{.*}} : bf16 to f32
// CHECK: arith.addf %[[A]], %[[B]] : f32
// CHECK: math.sqrt %{{.*}} : f32
// CHECK-NOT: arith.truncf
// CHECK: arith.cmpf olt, %{{.*}}, %{{.*}} : bf16
// Left alone: other types, and a rounding mode asked for explicitly.
// CHECK: arith.truncf %{{.*}} : f32 to f16
// CHECK: arith.truncf %{{.*}} toward_zero : f32 to bf16
func.func @arithmetic(%x: bf16, %y: bf16, %h: f32) -> (bf16, i1, f16, bf16) {
  %s = arith.addf %x, %y : bf16
  %q = math.sqrt %s : bf16
  %c = arith.cmpf olt, %x, %y : bf16
  %f = arith.truncf %h : f32 to f16
  %z = arith.truncf %h toward_zero : f32 to bf16
  return %q, %c, %f, %z : bf16, i1, f16, bf16
}
