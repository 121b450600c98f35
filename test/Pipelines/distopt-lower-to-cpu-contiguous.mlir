// RUN: distopt-opt %s --distopt-lower-to-cpu | FileCheck %s
// RUN: distopt-opt %s --distopt-lower-to-cpu | FileCheck %s --check-prefix=ANNOTATED
// RUN: distopt-compile %s --cpu=skylake-avx512 -o %t.o
// RUN: llvm-objdump -d %t.o | FileCheck %s --check-prefix=OBJ
// RUN: distopt-compile %s --cpu=znver4 -o %t.znver4.o
// RUN: llvm-objdump -d %t.znver4.o | FileCheck %s --check-prefix=YMM --implicit-check-not=zmm
// RUN: sed 's/64x64x3x3/512x512x3x3/g' %s > %t.large.mlir
// RUN: distopt-opt %t.large.mlir --distopt-lower-to-cpu | FileCheck %s --check-prefix=LARGE
// RUN: distopt-compile %t.large.mlir --cpu=znver4 -o %t.large.o
// RUN: llvm-objdump -d %t.large.o | FileCheck %s --check-prefix=LARGE-YMM --implicit-check-not=zmm
// RUN: distopt-compile %s --cpu=znver4 --elementwise-vector-bits=0 -o %t.zmm.o
// RUN: llvm-objdump -d %t.zmm.o | FileCheck %s --check-prefix=ZMM

// The update of a conv weight (64x64x3x3) runs as one loop over its 36864
// contiguous elements, each operand addressed by that one index. Kept as
// four loops, the innermost of 3 was unrolled by LLVM and the loop around
// it vectorized with gathers and scatters at a stride of 9 elements (at
// 0.3 of the memory bound on ResNet-50's tensors, docs/benchmarks.md B1).
// CHECK-LABEL: llvm.func @step(
// CHECK: %[[N:.*]] = llvm.mlir.constant(36864 : index) : i64
// CHECK: ^bb1(%[[I:.*]]: i64):
// CHECK: llvm.icmp "slt" %[[I]], %[[N]] : i64
// CHECK-COUNT-4: llvm.getelementptr inbounds|nuw %{{.*}}[%[[I]]] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK-NOT: llvm.icmp
// CHECK: llvm.return

// Compiled for a CPU with AVX-512 (where LLVM finds gathers cheap), the
// step vectorizes with plain loads and stores.
// OBJ-LABEL: <distopt_step_packed>:
// OBJ-NOT: gather
// OBJ-NOT: scatter
// OBJ: ret

// The update loop asks LLVM for 256-bit vectors (8 f32 lanes), which it
// uses even for a CPU whose tuning picks 512 bits (znver4): streaming
// updates ran 4-11% faster so on Zen 5 (--distopt-annotate-vector-width).
// With the choice left to the target, the loop is 512 bits wide.
// ANNOTATED: #[[VECTORIZE:.*]] = #llvm.loop_vectorize<width = 8 : i32>
// ANNOTATED: #[[LOOP:.*]] = #llvm.loop_annotation<vectorize = #[[VECTORIZE]]>
// ANNOTATED: llvm.br ^bb1(%{{.*}} : i64) {loop_annotation = #[[LOOP]]}
// YMM-LABEL: <distopt_step_packed>:
// YMM: vfmadd{{.*}}ymm
// YMM: ret

// So does the update of a 512x512x3x3 weight, an OpenMP work-sharing loop
// (2359296 elements), as OpenMP's `for simd` of 8 lanes.
// LARGE: omp.wsloop {
// LARGE-NEXT: omp.simd simdlen(8) {
// LARGE-NEXT: omp.loop_nest
// LARGE: } {omp.composite}
// LARGE-NEXT: } {omp.composite}
// LARGE-YMM: vfmadd{{.*}}ymm
// ZMM-LABEL: <distopt_step_packed>:
// ZMM: vfmadd{{.*}}zmm
// ZMM: ret
module attributes {distopt.world_size = 1 : i64} {
  func.func @step(
      %p: tensor<64x64x3x3xf32> {distopt.name = "w", distopt.role = "param"},
      %g: tensor<64x64x3x3xf32> {distopt.name = "w", distopt.role = "grad"},
      %m: tensor<64x64x3x3xf32> {distopt.name = "w.exp_avg", distopt.role = "state"},
      %v: tensor<64x64x3x3xf32> {distopt.name = "w.exp_avg_sq", distopt.role = "state"},
      %lr: f32 {distopt.role = "lr"}, %step: i64 {distopt.role = "step"})
      -> (tensor<64x64x3x3xf32> {distopt.name = "w", distopt.role = "param"},
          tensor<64x64x3x3xf32> {distopt.name = "w.exp_avg", distopt.role = "state"},
          tensor<64x64x3x3xf32> {distopt.name = "w.exp_avg_sq", distopt.role = "state"}) {
    %np, %ns:2 = distopt.adamw_update %p, %g state(%m, %v) lr(%lr) step(%step)
        : tensor<64x64x3x3xf32>, f32
    return %np, %ns#0, %ns#1 : tensor<64x64x3x3xf32>, tensor<64x64x3x3xf32>, tensor<64x64x3x3xf32>
  }
}
