// RUN: distopt-opt %s --distopt-offload-to-gpu --split-input-file -verify-diagnostics | FileCheck %s

// A constant gets a device copy, freed at the end unless it is returned.
memref.global "private" constant @c : memref<4xf32> = dense<1.0>
// CHECK-LABEL: func.func @constant
// CHECK: %[[HOST:.*]] = memref.get_global @c
// CHECK: %[[DEV:.*]] = gpu.alloc () : memref<4xf32>
// CHECK: gpu.memcpy %[[DEV]], %[[HOST]]
// CHECK-NOT: gpu.dealloc
// CHECK: return %[[DEV]]
func.func @constant() -> memref<4xf32> {
  %0 = memref.get_global @c : memref<4xf32>
  return %0 : memref<4xf32>
}

// -----

// A scalar read on the host: a one-thread kernel stores it to a device
// buffer, which is copied to a host slot and read there.
// CHECK-LABEL: func.func @scalar
// CHECK: %[[SLOT:.*]] = memref.alloca() : memref<1xf32>
// CHECK: %[[DEV:.*]] = gpu.alloc () : memref<1xf32>
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}} = %[[ONE:.*]], {{.*}} = %[[ONE]], {{.*}} = %[[ONE]]) threads({{.*}}) in ({{.*}} = %[[ONE]], {{.*}} = %[[ONE]], {{.*}} = %[[ONE]])
// CHECK:   %[[V:.*]] = memref.load %arg0[]
// CHECK:   memref.store %[[V]], %[[DEV]]
// CHECK: gpu.memcpy %[[SLOT]], %[[DEV]]
// CHECK: %[[R:.*]] = memref.load %[[SLOT]]
// CHECK: gpu.dealloc %[[DEV]]
// CHECK: return %[[R]]
func.func @scalar(%m: memref<f32>) -> f32 {
  %v = memref.load %m[] : memref<f32>
  return %v : f32
}

// -----

// An element-wise loop over 3x5 elements: collapsed to 15, tiled by 256,
// tiles on blocks and elements on threads, with a bound check.
// CHECK-LABEL: func.func @elementwise
// CHECK: scf.parallel
// CHECK:   scf.parallel
// CHECK:     arith.cmpi ult
// CHECK:     scf.if
// CHECK:   } {mapping = [#gpu.loop_dim_map<processor = thread_x
// CHECK: } {mapping = [#gpu.loop_dim_map<processor = block_x
func.func @elementwise(%a: memref<3x5xf32>, %b: memref<3x5xf32>) {
  memref.copy %a, %b : memref<3x5xf32> to memref<3x5xf32>
  return
}

// -----

// A whole-tensor reduction (a sum of squares in f64): every one of 32768
// threads combines a strided share into a partial result, then one loop
// combines those in order with the output's initial value.
// CHECK-LABEL: func.func @sum_of_squares
// CHECK: %[[PARTIALS:.*]] = gpu.alloc () : memref<32768xf64>
// CHECK: scf.parallel
// CHECK:   scf.for {{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (f64)
// CHECK:     arith.mulf
// CHECK:     arith.addf %[[ACC]]
// CHECK:   memref.store {{.*}}, %[[PARTIALS]]
// CHECK: } {mapping = [#gpu.loop_dim_map<processor = block_x
// CHECK: gpu.launch blocks
// CHECK:   memref.load %arg1[]
// CHECK:   scf.for
// CHECK:     memref.load %[[PARTIALS]]
// CHECK:   memref.store {{.*}}, %arg1[]
// CHECK: gpu.dealloc %[[PARTIALS]]
#id = affine_map<(d0, d1) -> (d0, d1)>
#scalar = affine_map<(d0, d1) -> ()>
func.func @sum_of_squares(%x: memref<3x5xf64>, %out: memref<f64>) {
  linalg.generic {indexing_maps = [#id, #scalar], iterator_types = ["reduction", "reduction"]}
      ins(%x : memref<3x5xf64>) outs(%out : memref<f64>) {
  ^bb0(%e: f64, %acc: f64):
    %sq = arith.mulf %e, %e : f64
    %sum = arith.addf %acc, %sq : f64
    linalg.yield %sum : f64
  }
  return
}

// -----

// Two independent copies (10 and 600 elements: 1 + 3 blocks) become one
// launch whose blocks dispatch to their copy; a third one reads what the
// first wrote, so it stays a launch of its own, after them.
// CHECK-LABEL: func.func @multi_tensor
// CHECK: scf.parallel (%[[B:.*]]) = (%{{.*}}) to (%c4{{.*}}) step
// CHECK:   scf.parallel
// CHECK:     %[[PAST:.*]] = arith.cmpi uge, %[[B]], %c1
// CHECK:     scf.index_switch
// CHECK:     case 0 {
// CHECK:       memref.load %arg0
// CHECK:     case 1 {
// CHECK:       memref.load %arg2
// CHECK: scf.parallel
// CHECK:   scf.parallel
// CHECK:     memref.load %arg1
// CHECK:     memref.store {{.*}}, %arg4
// CHECK-NOT: scf.index_switch
func.func @multi_tensor(%a: memref<10xf32>, %b: memref<10xf32>, %c: memref<600xf32>,
                        %d: memref<600xf32>, %e: memref<10xf32>) {
  memref.copy %a, %b : memref<10xf32> to memref<10xf32>
  memref.copy %c, %d : memref<600xf32> to memref<600xf32>
  memref.copy %b, %e : memref<10xf32> to memref<10xf32>
  return
}

// -----

func.func @tensors(%t: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{works on tensors: --distopt-offload-to-gpu runs on a bufferized step}}
  %0 = arith.addf %t, %t : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @alloc_in_loop(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    // expected-error @below {{inside a parallel loop cannot run on the GPU: device code does not allocate}}
    %m = memref.alloc() : memref<4xf32>
    memref.dealloc %m : memref<4xf32>
    scf.reduce
  }
  return
}

// -----

// A contraction's loops as the lowering leaves them: parallel rows, the
// reduction loop, parallel columns inside it. The rows become the launch;
// the column loop, inside the reduction loop's region, runs sequentially in
// each thread (left a parallel loop, convert-parallel-loops-to-gpu would
// keep the whole nest on the host, reading device memory:
// verify-offload.mlir).
// CHECK-LABEL: func.func @products
// CHECK: scf.parallel
// CHECK: scf.parallel
// CHECK: scf.for
// CHECK-NEXT: scf.for
// CHECK: memref.store
// CHECK-NOT: scf.parallel
// CHECK: return
func.func @products(%a: memref<24x10xf32>, %b: memref<10x10xf32>, %c: memref<24x10xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c10 = arith.constant 10 : index
  %c24 = arith.constant 24 : index
  scf.parallel (%i) = (%c0) to (%c24) step (%c1) {
    scf.for %k = %c0 to %c10 step %c1 {
      scf.parallel (%j) = (%c0) to (%c10) step (%c1) {
        %x = memref.load %a[%i, %k] : memref<24x10xf32>
        %y = memref.load %b[%k, %j] : memref<10x10xf32>
        %z = memref.load %c[%i, %j] : memref<24x10xf32>
        %p = arith.mulf %x, %y : f32
        %s = arith.addf %z, %p : f32
        memref.store %s, %c[%i, %j] : memref<24x10xf32>
        scf.reduce
      }
    }
    scf.reduce
  }
  return
}
