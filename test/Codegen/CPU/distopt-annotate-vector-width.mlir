// RUN: distopt-opt %s --distopt-annotate-vector-width --split-input-file | FileCheck %s
// RUN: distopt-opt %s --distopt-annotate-vector-width=bits=512 --split-input-file | FileCheck %s --check-prefix=WIDE
// RUN: distopt-opt %s --distopt-annotate-vector-width=bits=0 --split-input-file | FileCheck %s --check-prefix=OFF
// RUN: not distopt-opt %s --pass-pipeline="builtin.module(func.func(distopt-annotate-vector-width{bits=96}))" --split-input-file 2>&1 | FileCheck %s --check-prefix=NOT-POWER

// NOT-POWER: .mlir:{{[0-9]+}}:1: error: --distopt-annotate-vector-width: bits must be a power of two, or 0, got 96
// OFF-NOT: loop_vectorize
// OFF-NOT: simdlen(8)

// An AdamW-like update over f32 buffers, with a 0-d learning rate: 8 lanes
// at 256 bits, 16 at 512.
// CHECK: #[[$F32:.*]] = #llvm.loop_vectorize<width = 8 : i32>
// CHECK: #[[$ANN_F32:.*]] = #llvm.loop_annotation<vectorize = #[[$F32]]>
// WIDE: #[[$F32:.*]] = #llvm.loop_vectorize<width = 16 : i32>
// WIDE: #[[$ANN_F32:.*]] = #llvm.loop_annotation<vectorize = #[[$F32]]>
// CHECK-LABEL: func.func @update
// CHECK: scf.for
// CHECK: } {loop_annotation = #[[$ANN_F32]]}
// WIDE-LABEL: func.func @update
// WIDE: } {loop_annotation = #[[$ANN_F32]]}
func.func @update(%p: memref<1000xf32>, %g: memref<1000xf32>,
                  %m: memref<1000xf32>, %lr: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 1000 : index
  %beta = arith.constant 0.9 : f32
  scf.for %i = %c0 to %n step %c1 {
    %rate = memref.load %lr[] : memref<f32>
    %gi = memref.load %g[%i] : memref<1000xf32>
    %mi = memref.load %m[%i] : memref<1000xf32>
    %pi = memref.load %p[%i] : memref<1000xf32>
    %m1 = arith.mulf %mi, %beta : f32
    %m2 = arith.addf %m1, %gi : f32
    %finite = math.isfinite %m2 : f32
    %m3 = arith.select %finite, %m2, %mi : f32
    %step = arith.mulf %rate, %m3 : f32
    %p1 = arith.subf %pi, %step : f32
    memref.store %m3, %m[%i] : memref<1000xf32>
    memref.store %p1, %p[%i] : memref<1000xf32>
  }
  return
}

// -----

// The widest scalar decides: bf16 in and out, computed in f32 (8 lanes);
// f64 (4 lanes). A subview at an offset is still walked element by
// element, and so is a buffer of dynamic size; index arithmetic (i64) does
// not count as a scalar of the loop. A loop annotated already keeps its
// annotation.
// CHECK-DAG: #[[$F64:.*]] = #llvm.loop_vectorize<width = 4 : i32>
// CHECK-DAG: #[[$F32:.*]] = #llvm.loop_vectorize<width = 8 : i32>
// CHECK-DAG: #[[$ANN_F64:.*]] = #llvm.loop_annotation<vectorize = #[[$F64]]>
// CHECK-DAG: #[[$ANN_F32:.*]] = #llvm.loop_annotation<vectorize = #[[$F32]]>
// CHECK-DAG: #[[$KEPT:.*]] = #llvm.loop_annotation<disableNonforced = true>
// CHECK-LABEL: func.func @widths
// CHECK: } {loop_annotation = #[[$ANN_F32]]}
// CHECK: } {loop_annotation = #[[$ANN_F64]]}
// CHECK: } {loop_annotation = #[[$ANN_F32]]}
// CHECK: } {loop_annotation = #[[$KEPT]]}
func.func @widths(%a: memref<64xbf16>, %b: memref<128xf64>, %d: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %two = arith.constant 2.0 : f32
  %twod = arith.constant 2.0 : f64
  scf.for %i = %c0 to %c64 step %c1 {
    %x = memref.load %a[%i] : memref<64xbf16>
    %w = arith.extf %x : bf16 to f32
    %y = arith.mulf %w, %two : f32
    %z = arith.truncf %y : f32 to bf16
    memref.store %z, %a[%i] : memref<64xbf16>
  }
  %upper = memref.subview %b[64] [64] [1]
      : memref<128xf64> to memref<64xf64, strided<[1], offset: 64>>
  scf.for %i = %c0 to %c64 step %c1 {
    %x = memref.load %upper[%i] : memref<64xf64, strided<[1], offset: 64>>
    %y = arith.mulf %x, %twod : f64
    memref.store %y, %upper[%i] : memref<64xf64, strided<[1], offset: 64>>
  }
  %n = memref.dim %d, %c0 : memref<?xf32>
  scf.for %i = %c0 to %n step %c1 {
    %wide = arith.index_cast %i : index to i64
    %x = arith.uitofp %wide : i64 to f32
    memref.store %x, %d[%i] : memref<?xf32>
  }
  scf.for %i = %c0 to %n step %c1 {
    %x = memref.load %d[%i] : memref<?xf32>
    memref.store %x, %d[%i] : memref<?xf32>
  } {loop_annotation = #llvm.loop_annotation<disableNonforced = true>}
  return
}

// -----

// Not element-wise, left to the target: the inner loop of the PowerSGD
// contraction Q'^T[j, k] += M[i, k] * P[i, j], as --convert-linalg-to-loops
// writes it (2-D buffers); a sum into a 0-d buffer; a sum carried in the
// loop; a loop by steps of 2; a strided buffer; a neighbour's element; a
// call; a view made inside the loop (element 2i, whatever its layout
// says); buffers of index and of vectors, which have no scalar width
// (the pass crashed on index); a loop around another.
// CHECK-LABEL: func.func @not_elementwise
// CHECK-NOT: loop_annotation
// CHECK: return
func.func private @opaque(f32) -> f32
func.func @not_elementwise(%mt: memref<256x576xf32>, %p: memref<256x4xf32>,
                           %qt: memref<4x576xf32>, %v: memref<576xf32>,
                           %sum: memref<f32>,
                           %strided: memref<288xf32, strided<[2]>>,
                           %offsets: memref<8xindex>,
                           %vectors: memref<8xvector<4xf32>>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c256 = arith.constant 256 : index
  %c288 = arith.constant 288 : index
  %c575 = arith.constant 575 : index
  %c576 = arith.constant 576 : index
  %zero = arith.constant 0.0 : f32
  scf.for %i = %c0 to %c256 step %c1 {
    scf.for %j = %c0 to %c4 step %c1 {
      scf.for %k = %c0 to %c576 step %c1 {
        %x = memref.load %mt[%i, %k] : memref<256x576xf32>
        %y = memref.load %p[%i, %j] : memref<256x4xf32>
        %acc = memref.load %qt[%j, %k] : memref<4x576xf32>
        %xy = arith.mulf %x, %y : f32
        %s = arith.addf %acc, %xy : f32
        memref.store %s, %qt[%j, %k] : memref<4x576xf32>
      }
    }
  }
  scf.for %i = %c0 to %c576 step %c1 {
    %x = memref.load %v[%i] : memref<576xf32>
    %acc = memref.load %sum[] : memref<f32>
    %s = arith.addf %acc, %x : f32
    memref.store %s, %sum[] : memref<f32>
  }
  %total = scf.for %i = %c0 to %c576 step %c1 iter_args(%acc = %zero) -> f32 {
    %x = memref.load %v[%i] : memref<576xf32>
    %s = arith.addf %acc, %x : f32
    scf.yield %s : f32
  }
  memref.store %total, %sum[] : memref<f32>
  scf.for %i = %c0 to %c576 step %c2 {
    %x = memref.load %v[%i] : memref<576xf32>
    memref.store %x, %v[%i] : memref<576xf32>
  }
  scf.for %i = %c0 to %c288 step %c1 {
    %x = memref.load %strided[%i] : memref<288xf32, strided<[2]>>
    memref.store %x, %strided[%i] : memref<288xf32, strided<[2]>>
  }
  scf.for %i = %c0 to %c575 step %c1 {
    %next = arith.addi %i, %c1 : index
    %x = memref.load %v[%next] : memref<576xf32>
    memref.store %x, %v[%i] : memref<576xf32>
  }
  scf.for %i = %c0 to %c576 step %c1 {
    %x = memref.load %v[%i] : memref<576xf32>
    %y = func.call @opaque(%x) : (f32) -> f32
    memref.store %y, %v[%i] : memref<576xf32>
  }
  scf.for %i = %c0 to %c288 step %c1 {
    %tail = memref.subview %v[%i] [288] [1]
        : memref<576xf32> to memref<288xf32, strided<[1], offset: ?>>
    %x = memref.load %tail[%i] : memref<288xf32, strided<[1], offset: ?>>
    memref.store %x, %tail[%i] : memref<288xf32, strided<[1], offset: ?>>
  }
  %c8 = arith.constant 8 : index
  scf.for %i = %c0 to %c8 step %c1 {
    %x = memref.load %offsets[%i] : memref<8xindex>
    %y = arith.addi %x, %c1 : index
    memref.store %y, %offsets[%i] : memref<8xindex>
  }
  scf.for %i = %c0 to %c8 step %c1 {
    %x = memref.load %vectors[%i] : memref<8xvector<4xf32>>
    memref.store %x, %vectors[%i] : memref<8xvector<4xf32>>
  }
  return
}

// -----

// A work-sharing loop (a large update, parallel since --convert-scf-to-
// openmp) gets a composite omp.simd. Left alone, though each body alone
// would qualify: a loop with a reduction clause, with an ordered clause,
// with a chunk size, over two indices, by steps of 2, one whose body is
// several blocks (the first alone would qualify), and one composite
// already.
// CHECK-LABEL: func.func @worksharing
// CHECK: omp.parallel {
// CHECK-NEXT: omp.wsloop {
// CHECK-NEXT: omp.simd simdlen(8) {
// CHECK-NEXT: omp.loop_nest
// CHECK: } {omp.composite}
// CHECK-NEXT: } {omp.composite}
// CHECK: omp.wsloop reduction(
// CHECK-NOT: omp.simd
// CHECK: omp.wsloop ordered(0)
// CHECK-NOT: omp.simd
// CHECK: omp.wsloop schedule(static = %{{.*}} : i64)
// CHECK-NOT: omp.simd
// CHECK: omp.loop_nest (%{{.*}}, %{{.*}})
// CHECK-NOT: omp.simd
// CHECK: step (%c2)
// CHECK-NOT: omp.simd
// CHECK: ^bb1:
// CHECK-NOT: omp.simd
// CHECK: omp.simd simdlen(4)
// CHECK-NOT: omp.simd
// CHECK: return
omp.declare_reduction @add_f32 : f32 init {
^bb0(%x: f32):
  %zero = arith.constant 0.0 : f32
  omp.yield(%zero : f32)
} combiner {
^bb0(%x: f32, %y: f32):
  %s = arith.addf %x, %y : f32
  omp.yield(%s : f32)
}
func.func @worksharing(%a: memref<262144xf32>, %sum: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 262144 : index
  %two = arith.constant 2.0 : f32
  %acc = memref.alloca() : memref<1xf32>
  omp.parallel {
    omp.wsloop {
      omp.loop_nest (%i) : index = (%c0) to (%n) step (%c1) {
        %x = memref.load %a[%i] : memref<262144xf32>
        %y = arith.mulf %x, %two : f32
        memref.store %y, %a[%i] : memref<262144xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  omp.parallel {
    omp.wsloop reduction(@add_f32 %acc -> %r : memref<1xf32>) {
      omp.loop_nest (%i) : index = (%c0) to (%n) step (%c1) {
        %x = memref.load %a[%i] : memref<262144xf32>
        %y = arith.mulf %x, %two : f32
        memref.store %y, %a[%i] : memref<262144xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  omp.parallel {
    omp.wsloop ordered(0) {
      omp.loop_nest (%i) : index = (%c0) to (%n) step (%c1) {
        %x = memref.load %a[%i] : memref<262144xf32>
        memref.store %x, %a[%i] : memref<262144xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  %chunk = arith.constant 1024 : i64
  omp.parallel {
    omp.wsloop schedule(static = %chunk : i64) {
      omp.loop_nest (%i) : index = (%c0) to (%n) step (%c1) {
        %x = memref.load %a[%i] : memref<262144xf32>
        memref.store %x, %a[%i] : memref<262144xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  omp.parallel {
    omp.wsloop {
      omp.loop_nest (%i, %j) : index = (%c0, %c0) to (%n, %c1) step (%c1, %c1) {
        %x = memref.load %a[%i] : memref<262144xf32>
        memref.store %x, %a[%i] : memref<262144xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  %c2 = arith.constant 2 : index
  omp.parallel {
    omp.wsloop {
      omp.loop_nest (%i) : index = (%c0) to (%n) step (%c2) {
        %x = memref.load %a[%i] : memref<262144xf32>
        memref.store %x, %a[%i] : memref<262144xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  omp.parallel {
    omp.wsloop {
      omp.loop_nest (%i) : index = (%c0) to (%n) step (%c1) {
        %x = memref.load %a[%i] : memref<262144xf32>
        memref.store %x, %a[%i] : memref<262144xf32>
        cf.br ^bb1
      ^bb1:
        memref.store %x, %a[%c0] : memref<262144xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  omp.parallel {
    omp.wsloop {
      omp.simd simdlen(4) {
        omp.loop_nest (%i) : index = (%c0) to (%n) step (%c1) {
          %x = memref.load %a[%i] : memref<262144xf32>
          memref.store %x, %a[%i] : memref<262144xf32>
          omp.yield
        }
      } {omp.composite}
    } {omp.composite}
    omp.terminator
  }
  return
}
