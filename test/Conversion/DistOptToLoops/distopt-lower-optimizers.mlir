// RUN: distopt-opt %s --distopt-lower-optimizers | FileCheck %s

// One loop per update: the gradient in, parameter and state out (updated in
// place after bufferization), every operand read once.
// CHECK-LABEL: func.func @adamw
// CHECK-SAME: (%[[P:[^:]*]]: tensor<4x8xf32>, %[[G:[^:]*]]: tensor<4x8xf32>, %[[M:[^:]*]]: tensor<4x8xf32>, %[[V:[^:]*]]: tensor<4x8xf32>
// Scalars once, in f64: bias corrections and AdamW's decay factor.
// CHECK: math.powf {{.*}} : f64
// CHECK: math.powf {{.*}} : f64
// CHECK: %[[R:.*]]:3 = linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]} ins(%[[G]] : tensor<4x8xf32>) outs(%[[P]], %[[M]], %[[V]] : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK: math.fma
// CHECK: math.sqrt {{.*}} : f32
// CHECK: linalg.yield
// CHECK-NOT: linalg.generic
// CHECK: return %[[R]]#0, %[[R]]#1, %[[R]]#2
func.func @adamw(%p: tensor<4x8xf32>, %g: tensor<4x8xf32>, %m: tensor<4x8xf32>, %v: tensor<4x8xf32>, %lr: f32, %t: i64) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %a, %b, %c = distopt.adamw_update %p, %g state(%m, %v) lr(%lr) step(%t) : tensor<4x8xf32>, f32
  return %a, %b, %c : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// bf16 is computed in f32 and rounded once when stored.
// CHECK-LABEL: func.func @sgd_bf16
// CHECK: arith.cmpi eq, %{{.*}}, %{{.*}} : i64
// CHECK: linalg.generic {{.*}} ins(%{{.*}} : tensor<16xbf16>) outs(%{{.*}}, %{{.*}} : tensor<16xbf16>, tensor<16xbf16>)
// CHECK: ^bb0(%[[IN:.*]]: bf16, %[[OUT:.*]]: bf16, %[[BUF:.*]]: bf16):
// CHECK-COUNT-3: arith.extf {{.*}} : bf16 to f32
// CHECK: arith.select
// CHECK-COUNT-2: arith.truncf {{.*}} : f32 to bf16
// CHECK: linalg.yield
func.func @sgd_bf16(%p: tensor<16xbf16>, %g: tensor<16xbf16>, %b: tensor<16xbf16>, %lr: f32, %t: i64) -> (tensor<16xbf16>, tensor<16xbf16>) {
  %a, %c = distopt.sgd_update %p, %g state(%b) lr(%lr) step(%t) {momentum = 0.9, nesterov} : tensor<16xbf16>, f32
  return %a, %c : tensor<16xbf16>, tensor<16xbf16>
}

// An fp32 main parameter with a bf16 gradient: the loop reads the bf16
// gradient and extends it itself (no f32 copy of the gradient); an
// extension with another use stays for it.
// CHECK-LABEL: func.func @main_param_bf16_grad
// CHECK-SAME: (%[[P:[^:]*]]: tensor<16xf32>, %[[G:[^:]*]]: tensor<16xbf16>
// CHECK-NOT: arith.extf %[[G]]
// CHECK: linalg.generic {{.*}} ins(%[[G]] : tensor<16xbf16>) outs(%[[P]] : tensor<16xf32>)
// CHECK: ^bb0(%[[IN:.*]]: bf16, %{{.*}}: f32):
// CHECK: arith.extf %[[IN]] : bf16 to f32
// CHECK: linalg.yield
// CHECK: %[[KEPT:.*]] = arith.extf %[[G]] : tensor<16xbf16> to tensor<16xf32>
// CHECK: linalg.generic {{.*}} ins(%[[G]] : tensor<16xbf16>)
// CHECK: return %{{.*}}, %{{.*}}, %[[KEPT]]
func.func @main_param_bf16_grad(%p: tensor<16xf32>, %g: tensor<16xbf16>, %q: tensor<16xf32>, %lr: f32, %t: i64) -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) {
  %g32 = arith.extf %g : tensor<16xbf16> to tensor<16xf32>
  %a = distopt.sgd_update %p, %g32 lr(%lr) step(%t) : tensor<16xf32>, f32
  %kept = arith.extf %g : tensor<16xbf16> to tensor<16xf32>
  %b = distopt.sgd_update %q, %kept lr(%lr) step(%t) : tensor<16xf32>, f32
  return %a, %b, %kept : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
}

// Every optimizer lowers, and nothing else is touched.
// CHECK-LABEL: func.func @all
// CHECK-NOT: distopt.{{.*}}_update
// CHECK-COUNT-3: linalg.generic
// CHECK: distopt.all_reduce
func.func @all(%p: tensor<8xf32>, %g: tensor<8xf32>, %s: tensor<8xf32>, %lr: f32, %t: i64) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %a, %b = distopt.rmsprop_update %p, %g state(%s) lr(%lr) step(%t) : tensor<8xf32>, f32
  %c, %d = distopt.adagrad_update %a, %g state(%s) lr(%lr) step(%t) : tensor<8xf32>, f32
  %e = distopt.sgd_update %c, %g lr(%lr) step(%t) : tensor<8xf32>, f32
  %r = distopt.all_reduce sum %e on @dp : tensor<8xf32>
  return %r, %b, %d, %e : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}
distopt.process_group @dp size 2

// torch's roundings: addcmul is `v * g` rounded, then one fused multiply-add
// (s + g * g here); addcdiv is (v * g) / d, then the add. Adagrad's sum
// starts at initial_accumulator_value at step 1, as torch creates it.
// CHECK-LABEL: func.func @adagrad_order
// CHECK: %[[FIRST:.*]] = arith.cmpi eq, %{{.*}}, %{{.*}} : i64
// CHECK: ^bb0(%[[G:.*]]: f32, %[[P:.*]]: f32, %[[S:.*]]: f32):
// CHECK: %[[START:.*]] = arith.select %[[FIRST]], %{{.*}}, %[[S]] : f32
// CHECK: %[[ONE_G:.*]] = arith.mulf %{{.*}}, %[[G]] : f32
// CHECK: %[[SUM:.*]] = math.fma %[[ONE_G]], %[[G]], %[[START]] : f32
// CHECK: %[[ROOT:.*]] = math.sqrt %[[SUM]] : f32
// CHECK: %[[STD:.*]] = arith.addf %[[ROOT]], %{{.*}} : f32
// CHECK: %[[NUM:.*]] = arith.mulf %{{.*}}, %[[G]] : f32
// CHECK: %[[QUOT:.*]] = arith.divf %[[NUM]], %[[STD]] : f32
// CHECK: %[[NEW:.*]] = arith.addf %[[P]], %[[QUOT]] : f32
// CHECK: linalg.yield %[[NEW]], %[[SUM]] : f32, f32
func.func @adagrad_order(%p: tensor<8xf32>, %g: tensor<8xf32>, %s: tensor<8xf32>, %lr: f64, %t: i64) -> (tensor<8xf32>, tensor<8xf32>) {
  %a, %b = distopt.adagrad_update %p, %g state(%s) lr(%lr) step(%t) {initial_accumulator_value = 0.25} : tensor<8xf32>, f64
  return %a, %b : tensor<8xf32>, tensor<8xf32>
}

// An update kept only if the gradients were finite (every result selected
// against the operand it updates, on one i1) runs under scf.if: a skipped
// step computes nothing, and the update writes its buffers in place.
// CHECK-LABEL: func.func @kept
// CHECK: %[[R:.*]]:2 = scf.if %{{.*}} -> (tensor<16xf32>, tensor<16xf32>) {
// CHECK: linalg.generic
// CHECK: scf.yield
// CHECK: } else {
// CHECK: scf.yield %{{.*}}, %{{.*}} : tensor<16xf32>, tensor<16xf32>
// CHECK-NOT: arith.select
// CHECK: return %[[R]]#0, %[[R]]#1
func.func @kept(%p: tensor<16xf32>, %g: tensor<16xf32>, %m: tensor<16xf32>,
                %ok: i1, %lr: f32, %t: i64) -> (tensor<16xf32>, tensor<16xf32>) {
  %p1, %m1 = distopt.sgd_update %p, %g state(%m) lr(%lr) step(%t) {momentum = 0.9}
      : tensor<16xf32>, f32
  %p2 = arith.select %ok, %p1, %p : tensor<16xf32>
  %m2 = arith.select %ok, %m1, %m : tensor<16xf32>
  return %p2, %m2 : tensor<16xf32>, tensor<16xf32>
}

// Only the parameter kept: left as it is (selects after the update).
// CHECK-LABEL: func.func @partly
// CHECK-NOT: scf.if
// CHECK: arith.select
func.func @partly(%p: tensor<16xf32>, %g: tensor<16xf32>, %m: tensor<16xf32>,
                  %ok: i1, %lr: f32, %t: i64) -> (tensor<16xf32>, tensor<16xf32>) {
  %p1, %m1 = distopt.sgd_update %p, %g state(%m) lr(%lr) step(%t) {momentum = 0.9}
      : tensor<16xf32>, f32
  %p2 = arith.select %ok, %p1, %p : tensor<16xf32>
  return %p2, %m1 : tensor<16xf32>, tensor<16xf32>
}
