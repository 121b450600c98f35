// f32 matrix products on buffers become distopt_rt_matmul_f32 calls: each
// input read as it is or transposed (from the loops its map names), in
// either operand order; anything else is left to the loops.
// RUN: distopt-opt %s --distopt-contractions-to-runtime=min-dim=1 | FileCheck %s
// Products with a loop below min-dim (32 by default) stay loops.
// RUN: distopt-opt %s --distopt-contractions-to-runtime | FileCheck %s --check-prefix=THIN
// THIN-NOT: distopt_rt_matmul_f32
// RUN: not distopt-opt %s --distopt-contractions-to-runtime=min-dim=0 2>&1 | FileCheck %s --check-prefix=MINDIM
// MINDIM: error: --distopt-contractions-to-runtime: min-dim must be positive, got 0

#mk = affine_map<(i, j, k) -> (i, k)>
#km = affine_map<(i, j, k) -> (k, i)>
#kn = affine_map<(i, j, k) -> (k, j)>
#nk = affine_map<(i, j, k) -> (j, k)>
#mn = affine_map<(i, j, k) -> (i, j)>

// CHECK-LABEL: func.func @plain
// CHECK: %[[S:.*]] = call @distopt_rt_matmul_f32(%c0_i32{{(_[0-9]+)?}}, %c0_i32{{(_[0-9]+)?}}, {{.*}}) : (i32, i32, i64, i64, i64, !llvm.ptr, i64, !llvm.ptr, i64, !llvm.ptr, i64) -> i32
// CHECK: scf.if
// CHECK-NEXT: func.call @distopt_rt_fatal(%[[S]])
// CHECK-NOT: linalg.generic
func.func @plain(%a: memref<4x6xf32>, %b: memref<6x5xf32>, %c: memref<4x5xf32>) {
  linalg.generic {indexing_maps = [#mk, #kn, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %b : memref<4x6xf32>, memref<6x5xf32>) outs(%c : memref<4x5xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %p fastmath<reassoc> : f32
    linalg.yield %s : f32
  }
  return
}

// X^T X (a transposed) and X X^T (b transposed).
// CHECK-LABEL: func.func @transposed
// CHECK: call @distopt_rt_matmul_f32(%c1_i32{{(_[0-9]+)?}}, %c0_i32{{(_[0-9]+)?}},
// CHECK: call @distopt_rt_matmul_f32(%c0_i32{{(_[0-9]+)?}}, %c1_i32{{(_[0-9]+)?}},
func.func @transposed(%x: memref<8x3xf32>, %g: memref<3x3xf32>, %w: memref<3x8xf32>, %h: memref<3x3xf32>) {
  linalg.generic {indexing_maps = [#km, #kn, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %x : memref<8x3xf32>, memref<8x3xf32>) outs(%g : memref<3x3xf32>) {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#mk, #nk, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%w, %w : memref<3x8xf32>, memref<3x8xf32>) outs(%h : memref<3x3xf32>) {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %q, %p : f32
    %s = arith.addf %m, %acc : f32
    linalg.yield %s : f32
  }
  return
}

// The operand with the result's column first: b then a.
// CHECK-LABEL: func.func @swapped
// CHECK-SAME: %[[B:[^:]*]]: memref<6x5xf32>, %[[A:[^:]*]]: memref<4x6xf32>
// CHECK: %[[PA:.*]] = memref.extract_aligned_pointer_as_index %[[A]]
// CHECK: %[[PB:.*]] = memref.extract_aligned_pointer_as_index %[[B]]
// CHECK: call @distopt_rt_matmul_f32
func.func @swapped(%b: memref<6x5xf32>, %a: memref<4x6xf32>, %c: memref<4x5xf32>) {
  linalg.generic {indexing_maps = [#kn, #mk, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%b, %a : memref<6x5xf32>, memref<4x6xf32>) outs(%c : memref<4x5xf32>) {
  ^bb0(%y: f32, %x: f32, %acc: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  }
  return
}

// Left as loops: f64, rows that are not contiguous, a body that is not a
// sum of products (bf16 inputs widened), a product on tensors.
// CHECK-LABEL: func.func @left
// CHECK-NOT: distopt_rt_matmul_f32
// CHECK-COUNT-4: linalg.generic
func.func @left(%a: memref<4x6xf64>, %b: memref<6x5xf64>, %c: memref<4x5xf64>,
                %s: memref<4x6xf32, strided<[12, 2]>>, %t: memref<6x5xf32>, %u: memref<4x5xf32>,
                %h: memref<4x6xbf16>, %k: memref<6x5xbf16>,
                %ta: tensor<4x6xf32>, %tb: tensor<6x5xf32>, %tc: tensor<4x5xf32>) -> tensor<4x5xf32> {
  linalg.generic {indexing_maps = [#mk, #kn, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %b : memref<4x6xf64>, memref<6x5xf64>) outs(%c : memref<4x5xf64>) {
  ^bb0(%x: f64, %y: f64, %acc: f64):
    %p = arith.mulf %x, %y : f64
    %r = arith.addf %acc, %p : f64
    linalg.yield %r : f64
  }
  linalg.generic {indexing_maps = [#mk, #kn, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%s, %t : memref<4x6xf32, strided<[12, 2]>>, memref<6x5xf32>) outs(%u : memref<4x5xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %p = arith.mulf %x, %y : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  }
  linalg.generic {indexing_maps = [#mk, #kn, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%h, %k : memref<4x6xbf16>, memref<6x5xbf16>) outs(%u : memref<4x5xf32>) {
  ^bb0(%x: bf16, %y: bf16, %acc: f32):
    %xw = arith.extf %x : bf16 to f32
    %yw = arith.extf %y : bf16 to f32
    %p = arith.mulf %xw, %yw : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  }
  %out = linalg.generic {indexing_maps = [#mk, #kn, #mn], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%ta, %tb : tensor<4x6xf32>, tensor<6x5xf32>) outs(%tc : tensor<4x5xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %p = arith.mulf %x, %y : f32
    %r = arith.addf %acc, %p : f32
    linalg.yield %r : f32
  } -> tensor<4x5xf32>
  return %out : tensor<4x5xf32>
}
