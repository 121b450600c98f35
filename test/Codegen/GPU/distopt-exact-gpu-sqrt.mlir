// RUN: distopt-opt %s --distopt-exact-gpu-sqrt | FileCheck %s

// Scalar f32 and f64 square roots become NVVM's correctly rounded
// intrinsic (sqrt.rn in PTX); others are left as they are.
// CHECK-LABEL: func.func @sqrt
// CHECK: llvm.call_intrinsic "llvm.nvvm.sqrt.rn.f"(%{{.*}}) : (f32) -> f32
// CHECK: llvm.call_intrinsic "llvm.nvvm.sqrt.rn.d"(%{{.*}}) : (f64) -> f64
// CHECK: math.sqrt %{{.*}} : vector<4xf32>
// CHECK: math.sqrt %{{.*}} : f16
func.func @sqrt(%a: f32, %b: f64, %c: vector<4xf32>, %d: f16) -> (f32, f64, vector<4xf32>, f16) {
  %x = math.sqrt %a : f32
  %y = math.sqrt %b : f64
  %z = math.sqrt %c : vector<4xf32>
  %w = math.sqrt %d : f16
  return %x, %y, %z, %w : f32, f64, vector<4xf32>, f16
}
