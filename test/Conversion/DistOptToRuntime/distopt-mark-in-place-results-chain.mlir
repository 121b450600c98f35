// RUN: timeout 60 distopt-opt %s --distopt-mark-in-place-results | FileCheck %s

// ZeRO's owners update a state buffer in a chain of scf.if, one per tensor
// (rank == owner: update in place; else: keep), each branch yielding the
// previous if's result. The buffer is still the argument, found once per
// if: following both branches anew at each link took 2^40 walks here (the
// timeout fails the test; ResNet-50's 54 Muon matrices took minutes).
// CHECK-LABEL: func.func @step
// CHECK-SAME: distopt.in_place_results = array<i64: 0>
// CHECK: return{{$}}
func.func @step(%s: memref<4xf32>, %rank: index) -> memref<4xf32> {
  %one = arith.constant 1.0 : f32
  %c0 = arith.constant 0 : index
  %is0 = arith.cmpi eq, %rank, %c0 : index
  %b0 = scf.if %is0 -> memref<4xf32> {
    memref.store %one, %s[%c0] : memref<4xf32>
    scf.yield %s : memref<4xf32>
  } else {
    scf.yield %s : memref<4xf32>
  }
  %c1 = arith.constant 1 : index
  %is1 = arith.cmpi eq, %rank, %c1 : index
  %b1 = scf.if %is1 -> memref<4xf32> {
    memref.store %one, %b0[%c1] : memref<4xf32>
    scf.yield %b0 : memref<4xf32>
  } else {
    scf.yield %b0 : memref<4xf32>
  }
  %c2 = arith.constant 2 : index
  %is2 = arith.cmpi eq, %rank, %c2 : index
  %b2 = scf.if %is2 -> memref<4xf32> {
    memref.store %one, %b1[%c2] : memref<4xf32>
    scf.yield %b1 : memref<4xf32>
  } else {
    scf.yield %b1 : memref<4xf32>
  }
  %c3 = arith.constant 3 : index
  %is3 = arith.cmpi eq, %rank, %c3 : index
  %b3 = scf.if %is3 -> memref<4xf32> {
    memref.store %one, %b2[%c3] : memref<4xf32>
    scf.yield %b2 : memref<4xf32>
  } else {
    scf.yield %b2 : memref<4xf32>
  }
  %c4 = arith.constant 0 : index
  %is4 = arith.cmpi eq, %rank, %c4 : index
  %b4 = scf.if %is4 -> memref<4xf32> {
    memref.store %one, %b3[%c4] : memref<4xf32>
    scf.yield %b3 : memref<4xf32>
  } else {
    scf.yield %b3 : memref<4xf32>
  }
  %c5 = arith.constant 1 : index
  %is5 = arith.cmpi eq, %rank, %c5 : index
  %b5 = scf.if %is5 -> memref<4xf32> {
    memref.store %one, %b4[%c5] : memref<4xf32>
    scf.yield %b4 : memref<4xf32>
  } else {
    scf.yield %b4 : memref<4xf32>
  }
  %c6 = arith.constant 2 : index
  %is6 = arith.cmpi eq, %rank, %c6 : index
  %b6 = scf.if %is6 -> memref<4xf32> {
    memref.store %one, %b5[%c6] : memref<4xf32>
    scf.yield %b5 : memref<4xf32>
  } else {
    scf.yield %b5 : memref<4xf32>
  }
  %c7 = arith.constant 3 : index
  %is7 = arith.cmpi eq, %rank, %c7 : index
  %b7 = scf.if %is7 -> memref<4xf32> {
    memref.store %one, %b6[%c7] : memref<4xf32>
    scf.yield %b6 : memref<4xf32>
  } else {
    scf.yield %b6 : memref<4xf32>
  }
  %c8 = arith.constant 0 : index
  %is8 = arith.cmpi eq, %rank, %c8 : index
  %b8 = scf.if %is8 -> memref<4xf32> {
    memref.store %one, %b7[%c8] : memref<4xf32>
    scf.yield %b7 : memref<4xf32>
  } else {
    scf.yield %b7 : memref<4xf32>
  }
  %c9 = arith.constant 1 : index
  %is9 = arith.cmpi eq, %rank, %c9 : index
  %b9 = scf.if %is9 -> memref<4xf32> {
    memref.store %one, %b8[%c9] : memref<4xf32>
    scf.yield %b8 : memref<4xf32>
  } else {
    scf.yield %b8 : memref<4xf32>
  }
  %c10 = arith.constant 2 : index
  %is10 = arith.cmpi eq, %rank, %c10 : index
  %b10 = scf.if %is10 -> memref<4xf32> {
    memref.store %one, %b9[%c10] : memref<4xf32>
    scf.yield %b9 : memref<4xf32>
  } else {
    scf.yield %b9 : memref<4xf32>
  }
  %c11 = arith.constant 3 : index
  %is11 = arith.cmpi eq, %rank, %c11 : index
  %b11 = scf.if %is11 -> memref<4xf32> {
    memref.store %one, %b10[%c11] : memref<4xf32>
    scf.yield %b10 : memref<4xf32>
  } else {
    scf.yield %b10 : memref<4xf32>
  }
  %c12 = arith.constant 0 : index
  %is12 = arith.cmpi eq, %rank, %c12 : index
  %b12 = scf.if %is12 -> memref<4xf32> {
    memref.store %one, %b11[%c12] : memref<4xf32>
    scf.yield %b11 : memref<4xf32>
  } else {
    scf.yield %b11 : memref<4xf32>
  }
  %c13 = arith.constant 1 : index
  %is13 = arith.cmpi eq, %rank, %c13 : index
  %b13 = scf.if %is13 -> memref<4xf32> {
    memref.store %one, %b12[%c13] : memref<4xf32>
    scf.yield %b12 : memref<4xf32>
  } else {
    scf.yield %b12 : memref<4xf32>
  }
  %c14 = arith.constant 2 : index
  %is14 = arith.cmpi eq, %rank, %c14 : index
  %b14 = scf.if %is14 -> memref<4xf32> {
    memref.store %one, %b13[%c14] : memref<4xf32>
    scf.yield %b13 : memref<4xf32>
  } else {
    scf.yield %b13 : memref<4xf32>
  }
  %c15 = arith.constant 3 : index
  %is15 = arith.cmpi eq, %rank, %c15 : index
  %b15 = scf.if %is15 -> memref<4xf32> {
    memref.store %one, %b14[%c15] : memref<4xf32>
    scf.yield %b14 : memref<4xf32>
  } else {
    scf.yield %b14 : memref<4xf32>
  }
  %c16 = arith.constant 0 : index
  %is16 = arith.cmpi eq, %rank, %c16 : index
  %b16 = scf.if %is16 -> memref<4xf32> {
    memref.store %one, %b15[%c16] : memref<4xf32>
    scf.yield %b15 : memref<4xf32>
  } else {
    scf.yield %b15 : memref<4xf32>
  }
  %c17 = arith.constant 1 : index
  %is17 = arith.cmpi eq, %rank, %c17 : index
  %b17 = scf.if %is17 -> memref<4xf32> {
    memref.store %one, %b16[%c17] : memref<4xf32>
    scf.yield %b16 : memref<4xf32>
  } else {
    scf.yield %b16 : memref<4xf32>
  }
  %c18 = arith.constant 2 : index
  %is18 = arith.cmpi eq, %rank, %c18 : index
  %b18 = scf.if %is18 -> memref<4xf32> {
    memref.store %one, %b17[%c18] : memref<4xf32>
    scf.yield %b17 : memref<4xf32>
  } else {
    scf.yield %b17 : memref<4xf32>
  }
  %c19 = arith.constant 3 : index
  %is19 = arith.cmpi eq, %rank, %c19 : index
  %b19 = scf.if %is19 -> memref<4xf32> {
    memref.store %one, %b18[%c19] : memref<4xf32>
    scf.yield %b18 : memref<4xf32>
  } else {
    scf.yield %b18 : memref<4xf32>
  }
  %c20 = arith.constant 0 : index
  %is20 = arith.cmpi eq, %rank, %c20 : index
  %b20 = scf.if %is20 -> memref<4xf32> {
    memref.store %one, %b19[%c20] : memref<4xf32>
    scf.yield %b19 : memref<4xf32>
  } else {
    scf.yield %b19 : memref<4xf32>
  }
  %c21 = arith.constant 1 : index
  %is21 = arith.cmpi eq, %rank, %c21 : index
  %b21 = scf.if %is21 -> memref<4xf32> {
    memref.store %one, %b20[%c21] : memref<4xf32>
    scf.yield %b20 : memref<4xf32>
  } else {
    scf.yield %b20 : memref<4xf32>
  }
  %c22 = arith.constant 2 : index
  %is22 = arith.cmpi eq, %rank, %c22 : index
  %b22 = scf.if %is22 -> memref<4xf32> {
    memref.store %one, %b21[%c22] : memref<4xf32>
    scf.yield %b21 : memref<4xf32>
  } else {
    scf.yield %b21 : memref<4xf32>
  }
  %c23 = arith.constant 3 : index
  %is23 = arith.cmpi eq, %rank, %c23 : index
  %b23 = scf.if %is23 -> memref<4xf32> {
    memref.store %one, %b22[%c23] : memref<4xf32>
    scf.yield %b22 : memref<4xf32>
  } else {
    scf.yield %b22 : memref<4xf32>
  }
  %c24 = arith.constant 0 : index
  %is24 = arith.cmpi eq, %rank, %c24 : index
  %b24 = scf.if %is24 -> memref<4xf32> {
    memref.store %one, %b23[%c24] : memref<4xf32>
    scf.yield %b23 : memref<4xf32>
  } else {
    scf.yield %b23 : memref<4xf32>
  }
  %c25 = arith.constant 1 : index
  %is25 = arith.cmpi eq, %rank, %c25 : index
  %b25 = scf.if %is25 -> memref<4xf32> {
    memref.store %one, %b24[%c25] : memref<4xf32>
    scf.yield %b24 : memref<4xf32>
  } else {
    scf.yield %b24 : memref<4xf32>
  }
  %c26 = arith.constant 2 : index
  %is26 = arith.cmpi eq, %rank, %c26 : index
  %b26 = scf.if %is26 -> memref<4xf32> {
    memref.store %one, %b25[%c26] : memref<4xf32>
    scf.yield %b25 : memref<4xf32>
  } else {
    scf.yield %b25 : memref<4xf32>
  }
  %c27 = arith.constant 3 : index
  %is27 = arith.cmpi eq, %rank, %c27 : index
  %b27 = scf.if %is27 -> memref<4xf32> {
    memref.store %one, %b26[%c27] : memref<4xf32>
    scf.yield %b26 : memref<4xf32>
  } else {
    scf.yield %b26 : memref<4xf32>
  }
  %c28 = arith.constant 0 : index
  %is28 = arith.cmpi eq, %rank, %c28 : index
  %b28 = scf.if %is28 -> memref<4xf32> {
    memref.store %one, %b27[%c28] : memref<4xf32>
    scf.yield %b27 : memref<4xf32>
  } else {
    scf.yield %b27 : memref<4xf32>
  }
  %c29 = arith.constant 1 : index
  %is29 = arith.cmpi eq, %rank, %c29 : index
  %b29 = scf.if %is29 -> memref<4xf32> {
    memref.store %one, %b28[%c29] : memref<4xf32>
    scf.yield %b28 : memref<4xf32>
  } else {
    scf.yield %b28 : memref<4xf32>
  }
  %c30 = arith.constant 2 : index
  %is30 = arith.cmpi eq, %rank, %c30 : index
  %b30 = scf.if %is30 -> memref<4xf32> {
    memref.store %one, %b29[%c30] : memref<4xf32>
    scf.yield %b29 : memref<4xf32>
  } else {
    scf.yield %b29 : memref<4xf32>
  }
  %c31 = arith.constant 3 : index
  %is31 = arith.cmpi eq, %rank, %c31 : index
  %b31 = scf.if %is31 -> memref<4xf32> {
    memref.store %one, %b30[%c31] : memref<4xf32>
    scf.yield %b30 : memref<4xf32>
  } else {
    scf.yield %b30 : memref<4xf32>
  }
  %c32 = arith.constant 0 : index
  %is32 = arith.cmpi eq, %rank, %c32 : index
  %b32 = scf.if %is32 -> memref<4xf32> {
    memref.store %one, %b31[%c32] : memref<4xf32>
    scf.yield %b31 : memref<4xf32>
  } else {
    scf.yield %b31 : memref<4xf32>
  }
  %c33 = arith.constant 1 : index
  %is33 = arith.cmpi eq, %rank, %c33 : index
  %b33 = scf.if %is33 -> memref<4xf32> {
    memref.store %one, %b32[%c33] : memref<4xf32>
    scf.yield %b32 : memref<4xf32>
  } else {
    scf.yield %b32 : memref<4xf32>
  }
  %c34 = arith.constant 2 : index
  %is34 = arith.cmpi eq, %rank, %c34 : index
  %b34 = scf.if %is34 -> memref<4xf32> {
    memref.store %one, %b33[%c34] : memref<4xf32>
    scf.yield %b33 : memref<4xf32>
  } else {
    scf.yield %b33 : memref<4xf32>
  }
  %c35 = arith.constant 3 : index
  %is35 = arith.cmpi eq, %rank, %c35 : index
  %b35 = scf.if %is35 -> memref<4xf32> {
    memref.store %one, %b34[%c35] : memref<4xf32>
    scf.yield %b34 : memref<4xf32>
  } else {
    scf.yield %b34 : memref<4xf32>
  }
  %c36 = arith.constant 0 : index
  %is36 = arith.cmpi eq, %rank, %c36 : index
  %b36 = scf.if %is36 -> memref<4xf32> {
    memref.store %one, %b35[%c36] : memref<4xf32>
    scf.yield %b35 : memref<4xf32>
  } else {
    scf.yield %b35 : memref<4xf32>
  }
  %c37 = arith.constant 1 : index
  %is37 = arith.cmpi eq, %rank, %c37 : index
  %b37 = scf.if %is37 -> memref<4xf32> {
    memref.store %one, %b36[%c37] : memref<4xf32>
    scf.yield %b36 : memref<4xf32>
  } else {
    scf.yield %b36 : memref<4xf32>
  }
  %c38 = arith.constant 2 : index
  %is38 = arith.cmpi eq, %rank, %c38 : index
  %b38 = scf.if %is38 -> memref<4xf32> {
    memref.store %one, %b37[%c38] : memref<4xf32>
    scf.yield %b37 : memref<4xf32>
  } else {
    scf.yield %b37 : memref<4xf32>
  }
  %c39 = arith.constant 3 : index
  %is39 = arith.cmpi eq, %rank, %c39 : index
  %b39 = scf.if %is39 -> memref<4xf32> {
    memref.store %one, %b38[%c39] : memref<4xf32>
    scf.yield %b38 : memref<4xf32>
  } else {
    scf.yield %b38 : memref<4xf32>
  }
  return %b39 : memref<4xf32>
}
