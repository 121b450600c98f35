// Reductions of bf16/f16 data in f32 (or f32 data in f64): the input is
// extended, the collective works in the wide type, an extension of the
// result to that type is dropped and other uses get it rounded once.
// RUN: distopt-opt %s -split-input-file --distopt-widen-reductions -verify-diagnostics | FileCheck %s
// RUN: distopt-opt %s -split-input-file --distopt-widen-reductions=dtype=f64 -verify-diagnostics | FileCheck %s --check-prefix=F64
// RUN: not distopt-opt %s -split-input-file --distopt-widen-reductions=dtype=f16 2>&1 | FileCheck %s --check-prefix=DTYPE
// The pipeline runs it when asked, after the division fusion.
// RUN: distopt-translate --import-param-spec %S/Inputs/mixed.json \
// RUN:   | distopt-opt --distopt-pipeline="reduce-dtype=f32 zero-stage=2 overlap=false" | FileCheck %s --check-prefix=PIPE
// RUN: distopt-translate --import-param-spec %S/Inputs/mixed.json \
// RUN:   | distopt-opt --distopt-pipeline="zero-stage=2 overlap=false" | FileCheck %s --check-prefix=NOPIPE
// A bucket of widened gradients cannot be a view of them; the view pass says so.
// RUN: distopt-translate --import-param-spec %S/Inputs/mixed.json \
// RUN:   | distopt-opt --distopt-pipeline="reduce-dtype=f32 grad-as-bucket-view" -o /dev/null 2>&1 | FileCheck %s --check-prefix=VIEW
// VIEW: warning: bucket left as a copy: grad 'w' is extended to 'f32' before it is packed (--distopt-widen-reductions); handed in as 'f32', it could be a view of the bucket
// The warning looks at the step's own arguments only (a loop's once crashed it).
// RUN: distopt-opt %S/Inputs/extended-loop-argument.mlir --distopt-grad-as-bucket-view 2>&1 | FileCheck %s --check-prefix=LOOP
// LOOP: warning: bucket left as a copy: grad 'g' is extended to 'f32'
// LOOP-NOT: warning
// LOOP: func.func @step

// DTYPE: for the --dtype option: 'f16' is not one of: f32, f64

// The gradient of an fp32 main parameter: reduced in f32 and never rounded;
// the returned bf16 average is rounded once.
// CHECK-LABEL: func.func @main_param_gradient
// CHECK-SAME: (%[[G:.*]]: tensor<8xbf16>)
// CHECK: %[[W:.*]] = arith.extf %[[G]] : tensor<8xbf16> to tensor<8xf32>
// CHECK: %[[R:.*]] = distopt.all_reduce avg %[[W]] on @dp : tensor<8xf32>
// CHECK: %[[T:.*]] = arith.truncf %[[R]] : tensor<8xf32> to tensor<8xbf16>
// CHECK-NOT: distopt.all_reduce
// CHECK: return %[[R]], %[[T]]
// In f64 the main parameter's gradient is rounded once, to f32 (not to
// bf16 first): both results round the f64 average once.
// F64-LABEL: func.func @main_param_gradient
// F64: %[[W:.*]] = arith.extf %{{.*}} : tensor<8xbf16> to tensor<8xf64>
// F64: %[[R:.*]] = distopt.all_reduce avg %[[W]] on @dp : tensor<8xf64>
// F64-DAG: %[[T:.*]] = arith.truncf %[[R]] : tensor<8xf64> to tensor<8xbf16>
// F64-DAG: %[[M:.*]] = arith.truncf %[[R]] : tensor<8xf64> to tensor<8xf32>
// F64-NOT: arith.extf
// F64: return %[[M]], %[[T]]
distopt.process_group @dp size 4
func.func @main_param_gradient(%g: tensor<8xbf16>) -> (tensor<8xf32>, tensor<8xbf16>) {
  %r = distopt.all_reduce avg %g on @dp : tensor<8xbf16>
  %r32 = arith.extf %r : tensor<8xbf16> to tensor<8xf32>
  return %r32, %r : tensor<8xf32>, tensor<8xbf16>
}

// -----

// The f16 average split against overflow (premul_sum(1/2), then / 2 on 4
// ranks) is one avg in f32; another factor stays a premul_sum, folded; a
// division by zero is no factor and stays a division.
// CHECK-LABEL: func.func @split_average
// CHECK: %[[A:.*]] = distopt.all_reduce avg %{{.*}} on @dp : tensor<8xf32>
// CHECK-NOT: arith.divf
// CHECK: %[[AH:.*]] = arith.truncf %[[A]] : tensor<8xf32> to tensor<8xf16>
// CHECK: %[[P:.*]] = distopt.all_reduce premul_sum(1.250000e-01) %{{.*}} on @dp : tensor<8xf32>
// CHECK-NOT: arith.divf
// CHECK: %[[PH:.*]] = arith.truncf %[[P]] : tensor<8xf32> to tensor<8xf16>
// CHECK: %[[Z:.*]] = distopt.all_reduce premul_sum(5.000000e-01) %{{.*}} on @dp : tensor<8xf32>
// CHECK: %[[ZH:.*]] = arith.truncf %[[Z]] : tensor<8xf32> to tensor<8xf16>
// CHECK: %[[ZD:.*]] = arith.divf %[[ZH]], %{{.*}} : tensor<8xf16>
// CHECK: return %[[AH]], %[[PH]], %[[ZD]]
distopt.process_group @dp size 4
func.func @split_average(%h: tensor<8xf16>) -> (tensor<8xf16>, tensor<8xf16>, tensor<8xf16>) {
  %two = arith.constant dense<2.0> : tensor<8xf16>
  %four = arith.constant dense<4.0> : tensor<8xf16>
  %zero = arith.constant dense<0.0> : tensor<8xf16>
  %s = distopt.all_reduce premul_sum(0.5) %h on @dp : tensor<8xf16>
  %avg = arith.divf %s, %two : tensor<8xf16>
  %t = distopt.all_reduce premul_sum(0.5) %h on @dp : tensor<8xf16>
  %eighth = arith.divf %t, %four : tensor<8xf16>
  %u = distopt.all_reduce premul_sum(0.5) %h on @dp : tensor<8xf16>
  %inf = arith.divf %u, %zero : tensor<8xf16>
  return %avg, %eighth, %inf : tensor<8xf16>, tensor<8xf16>, tensor<8xf16>
}

// -----

// The split of an f16 average on 4098 = 2 x 2049 ranks divides by 2049 in
// f32 (f16 cannot hold 2049): one avg in f32 too. A factor that is not
// exact (1/2 then / 3 on 4 ranks: 1/6) is no premul_sum: the division
// stays.
// CHECK-LABEL: func.func @split_average_wide_division
// CHECK: %[[A:.*]] = distopt.all_reduce avg %{{.*}} on @w4098 : tensor<8xf32>
// CHECK-NOT: arith.divf
// CHECK: %[[AH:.*]] = arith.truncf %[[A]] : tensor<8xf32> to tensor<8xf16>
// CHECK: %[[P:.*]] = distopt.all_reduce premul_sum(5.000000e-01) %{{.*}} on @dp : tensor<8xf32>
// CHECK: %[[PH:.*]] = arith.truncf %[[P]] : tensor<8xf32> to tensor<8xf16>
// CHECK: %[[PD:.*]] = arith.divf %[[PH]], %{{.*}} : tensor<8xf16>
// CHECK: return %[[AH]], %[[PD]]
distopt.process_group @dp size 4
distopt.process_group @w4098 size 4098
func.func @split_average_wide_division(%h: tensor<8xf16>) -> (tensor<8xf16>, tensor<8xf16>) {
  %s = distopt.all_reduce premul_sum(0.5) %h on @w4098 : tensor<8xf16>
  %e = arith.extf %s : tensor<8xf16> to tensor<8xf32>
  %n = arith.constant dense<2049.0> : tensor<8xf32>
  %d = arith.divf %e, %n : tensor<8xf32>
  %avg = arith.truncf %d : tensor<8xf32> to tensor<8xf16>
  %three = arith.constant dense<3.0> : tensor<8xf16>
  %t = distopt.all_reduce premul_sum(0.5) %h on @dp : tensor<8xf16>
  %sixth = arith.divf %t, %three : tensor<8xf16>
  return %avg, %sixth : tensor<8xf16>, tensor<8xf16>
}

// -----

// reduce_scatter, reduce and the asynchronous form (the wait yields f32).
// reduce keeps the division after it: its other ranks keep their input.
// CHECK-LABEL: func.func @other_collectives
// CHECK: %[[S:.*]] = distopt.reduce_scatter sum %{{.*}} on @dp : tensor<8xf32> -> tensor<2xf32>
// CHECK: arith.truncf %[[S]] : tensor<2xf32> to tensor<2xbf16>
// CHECK: %[[R:.*]] = distopt.reduce premul_sum(5.000000e-01) %{{.*}} on @dp root 1 : tensor<8xf32>
// CHECK: %[[RH:.*]] = arith.truncf %[[R]] : tensor<8xf32> to tensor<8xf16>
// CHECK: arith.divf %[[RH]], %{{.*}} : tensor<8xf16>
// CHECK: %[[TOK:.*]] = distopt.all_reduce_start avg %{{.*}} on @dp : tensor<8xf32> -> !distopt.token<tensor<8xf32>>
// CHECK: %[[W:.*]] = distopt.wait %[[TOK]] : !distopt.token<tensor<8xf32>>
// CHECK: return %{{.*}}, %{{.*}}, %[[W]]
distopt.process_group @dp size 4
func.func @other_collectives(%g: tensor<8xbf16>, %h: tensor<8xf16>) -> (tensor<2xbf16>, tensor<8xf16>, tensor<8xf32>) {
  %s = distopt.reduce_scatter sum %g on @dp : tensor<8xbf16> -> tensor<2xbf16>
  %two = arith.constant dense<2.0> : tensor<8xf16>
  %r = distopt.reduce premul_sum(0.5) %h on @dp root 1 : tensor<8xf16>
  %d = arith.divf %r, %two : tensor<8xf16>
  %t = distopt.all_reduce_start avg %g on @dp : tensor<8xbf16> -> !distopt.token<tensor<8xbf16>>
  %w = distopt.wait %t : !distopt.token<tensor<8xbf16>>
  %w32 = arith.extf %w : tensor<8xbf16> to tensor<8xf32>
  return %s, %d, %w32 : tensor<2xbf16>, tensor<8xf16>, tensor<8xf32>
}

// -----

// Left alone: data already as wide (f32; widened to f64 with dtype=f64),
// max (exact in any type), integers, an explicit wire type (warned about),
// a token waited on twice (warned about).
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: arith.extf
// CHECK: distopt.all_reduce avg %{{.*}} on @dp : tensor<8xf32>
// CHECK: distopt.all_reduce max %{{.*}} on @dp : tensor<8xbf16>
// CHECK: distopt.all_reduce sum %{{.*}} on @dp : tensor<8xi32>
// CHECK: distopt.all_reduce avg %{{.*}} on @dp wire bf16 : tensor<8xbf16>
// CHECK: distopt.all_reduce_start avg %{{.*}} on @dp : tensor<8xbf16>
// F64-LABEL: func.func @left_alone
// F64: distopt.all_reduce avg %{{.*}} on @dp : tensor<8xf64>
distopt.process_group @dp size 4
func.func @left_alone(%x: tensor<8xf32>, %g: tensor<8xbf16>, %i: tensor<8xi32>)
    -> (tensor<8xf32>, tensor<8xbf16>, tensor<8xi32>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>) {
  %a = distopt.all_reduce avg %x on @dp : tensor<8xf32>
  %m = distopt.all_reduce max %g on @dp : tensor<8xbf16>
  %s = distopt.all_reduce sum %i on @dp : tensor<8xi32>
  // expected-warning @+1 {{left in 'bf16': its wire type is set explicitly}}
  %w = distopt.all_reduce avg %g on @dp wire bf16 : tensor<8xbf16>
  // expected-warning @+1 {{left in 'bf16': its token is not waited on exactly once}}
  %t = distopt.all_reduce_start avg %g on @dp : tensor<8xbf16> -> !distopt.token<tensor<8xbf16>>
  %t1 = distopt.wait %t : !distopt.token<tensor<8xbf16>>
  %t2 = distopt.wait %t : !distopt.token<tensor<8xbf16>>
  return %a, %m, %s, %w, %t1, %t2 : tensor<8xf32>, tensor<8xbf16>, tensor<8xi32>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>
}

// mixed.json: w (bf16, fp32 main parameters) and b (f32). ZeRO-2 reduces w's
// packed gradients in f32 and updates the main parameters with them.
// PIPE-LABEL: func.func @step
// PIPE: %[[W:.*]] = arith.extf %{{.*}} : tensor<8x4xbf16> to tensor<8x4xf32>
// PIPE: %[[P:.*]] = distopt.bucket_pack %[[W]]{{.*}} : tensor<8x4xf32> -> tensor<64xf32>
// PIPE: %[[S:.*]] = distopt.reduce_scatter avg %[[P]] on @world : tensor<64xf32> -> tensor<16xf32>
// PIPE: distopt.adamw_update %{{.*}}, %[[S]]
// NOPIPE-LABEL: func.func @step
// NOPIPE: distopt.reduce_scatter avg %{{.*}} on @world : tensor<64xbf16> -> tensor<16xbf16>
