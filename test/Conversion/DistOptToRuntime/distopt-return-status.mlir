// RUN: distopt-opt %s --split-input-file --distopt-return-status --verify-diagnostics | FileCheck %s

// An entry point (C calls it, nothing here does) with two checked runtime
// calls, as the
// bufferization models emit them after --convert-scf-to-cf: each failure
// branches to one block that returns the status after poison for the
// step's own result; the normal return adds 0; the declaration of
// distopt_rt_fatal, now unused, is gone.

// CHECK-NOT: func.func private @distopt_rt_fatal
// CHECK-LABEL: func.func @step(
// CHECK-SAME: -> (memref<4xf32>, i32) attributes {distopt.returns_status, llvm.emit_c_interface}
// CHECK:   %[[S0:.+]] = call @distopt_rt_all_reduce(
// CHECK:   %[[F0:.+]] = arith.cmpi ne, %[[S0]]
// CHECK:   cf.cond_br %[[F0]], ^[[FAIL0:bb[0-9]+]], ^[[NEXT:bb[0-9]+]]
// CHECK: ^[[FAIL0]]:
// CHECK-NEXT: cf.br ^[[FAILED:bb[0-9]+]](%[[S0]] : i32)
// CHECK: ^[[NEXT]]:
// CHECK:   %[[S1:.+]] = call @distopt_rt_all_reduce(
// CHECK:   cf.br ^[[FAILED]](%[[S1]] : i32)
// CHECK:   %[[OK:.+]] = arith.constant 0 : i32
// CHECK:   return %{{.+}}, %[[OK]] : memref<4xf32>, i32
// CHECK: ^[[FAILED]](%[[STATUS:.+]]: i32):
// CHECK-NEXT: %[[POISON:.+]] = ub.poison : memref<4xf32>
// CHECK-NEXT: return %[[POISON]], %[[STATUS]] : memref<4xf32>, i32
func.func private @distopt_rt_fatal(i32)
func.func private @distopt_rt_all_reduce(memref<4xf32>) -> i32
func.func @step(%grad: memref<4xf32>) -> memref<4xf32> attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : i32
  %s0 = call @distopt_rt_all_reduce(%grad) : (memref<4xf32>) -> i32
  %f0 = arith.cmpi ne, %s0, %c0 : i32
  cf.cond_br %f0, ^fail0, ^next
^fail0:
  call @distopt_rt_fatal(%s0) : (i32) -> ()
  cf.br ^next
^next:
  %s1 = call @distopt_rt_all_reduce(%grad) : (memref<4xf32>) -> i32
  %f1 = arith.cmpi ne, %s1, %c0 : i32
  cf.cond_br %f1, ^fail1, ^done
^fail1:
  call @distopt_rt_fatal(%s1) : (i32) -> ()
  cf.br ^done
^done:
  return %grad : memref<4xf32>
}

// -----

// A called step keeps the fatal path (its caller has no status to take),
// and so does a function without a C interface; the declaration stays.

// CHECK: func.func private @distopt_rt_fatal(i32)
// CHECK-LABEL: func.func @step(%{{.+}}: memref<4xf32>) attributes {llvm.emit_c_interface} {
// CHECK: call @distopt_rt_fatal
// CHECK-LABEL: func.func @main() {
// CHECK: call @distopt_rt_fatal
func.func private @distopt_rt_fatal(i32)
func.func private @distopt_rt_all_reduce(memref<4xf32>) -> i32
func.func @step(%grad: memref<4xf32>) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : i32
  %s = call @distopt_rt_all_reduce(%grad) : (memref<4xf32>) -> i32
  %f = arith.cmpi ne, %s, %c0 : i32
  cf.cond_br %f, ^fail, ^done
^fail:
  call @distopt_rt_fatal(%s) : (i32) -> ()
  cf.br ^done
^done:
  return
}
func.func @main() {
  %c0 = arith.constant 0 : i32
  %buffer = memref.alloc() : memref<4xf32>
  call @step(%buffer) : (memref<4xf32>) -> ()
  %s = call @distopt_rt_all_reduce(%buffer) : (memref<4xf32>) -> i32
  %f = arith.cmpi ne, %s, %c0 : i32
  cf.cond_br %f, ^fail, ^done
^fail:
  call @distopt_rt_fatal(%s) : (i32) -> ()
  cf.br ^done
^done:
  memref.dealloc %buffer : memref<4xf32>
  return
}

// -----

// Where a check is still inside a region, there is no block to branch from.

func.func private @distopt_rt_fatal(i32)
func.func @step(%failed: i1, %s: i32) attributes {llvm.emit_c_interface} {
  scf.if %failed {
    // expected-error @below {{a runtime call inside a nested region (a parallel loop) cannot return the step's status}}
    func.call @distopt_rt_fatal(%s) : (i32) -> ()
  }
  return
}

// -----

// A declaration of distopt_rt_fatal of another type is not the runtime's.

func.func private @distopt_rt_fatal(i64)
func.func @step(%s: i64) attributes {llvm.emit_c_interface} {
  // expected-error @below {{expected distopt_rt_fatal to take the i32 status and return nothing}}
  func.call @distopt_rt_fatal(%s) : (i64) -> ()
  return
}
