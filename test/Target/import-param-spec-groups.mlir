// Parameter groups: names or glob patterns, each group the optimizer's
// defaults with its overrides (or an optimizer of its own type); parameters in no group take the defaults. A
// group's lr_scale multiplies the step's rate (once, in f64); its state
// follows its own hyperparameters (amsgrad's max_exp_avg_sq).
// RUN: distopt-translate --import-param-spec %S/Inputs/groups.json | FileCheck %s
// RUN: distopt-translate --import-param-spec %S/Inputs/groups.json | distopt-opt --distopt-fuse-div-into-allreduce --distopt-shard-optimizer=stage=2 | FileCheck %s --check-prefix=ZERO
//
// RUN: sed -e 's/"head.weight"\]/"head.weight", "fc.*"]/' %S/Inputs/groups.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: sed -e 's/"head.weight"\]/"head.weight", "emb.*"]/' %S/Inputs/groups.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=NOTHING
// RUN: sed -e 's/"lr_scale": 0.5/"lr": 0.5/' %S/Inputs/groups.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=GROUPLR
// RUN: sed -e 's/"lr_scale": 0.5/"lr_scale": -1/' %S/Inputs/groups.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=SCALE
// RUN: sed -e 's/"amsgrad": true/"momentum": 0.9/' %S/Inputs/groups.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=KEY
// RUN: sed -e 's/"params": \["head.weight"\]/"params": []/' %S/Inputs/groups.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=EMPTY
// A group of another type is that optimizer with the group's keys only
// (not the defaults': AdamW's betas mean nothing to SGD).
// RUN: sed -e 's/"weight_decay": 0.0}/"weight_decay": 0.0, "type": "sgd", "momentum": 0.9}/' %S/Inputs/groups.json \
// RUN:   | distopt-translate --import-param-spec | FileCheck %s --check-prefix=TYPE

// CHECK-LABEL: func.func @step
// CHECK-SAME: {distopt.name = "head.weight.max_exp_avg_sq", distopt.role = "state"}
// CHECK-SAME: %[[LR:[^:]*]]: f64 {distopt.role = "lr"}
// Each distinct rate is checked (finite, non-negative) before anything runs.
// CHECK-NEXT: distopt.check_rate %[[LR]] param_group -1
// CHECK-NEXT: %[[HALF:.*]] = arith.constant 5.000000e-01 : f64
// CHECK-NEXT: %[[SCALED:.*]] = arith.mulf %[[LR]], %[[HALF]] : f64
// CHECK-NEXT: distopt.check_rate %[[SCALED]] param_group 1
// CHECK-NEXT: distopt.all_reduce
// CHECK: distopt.adamw_update {{.*}} lr(%[[LR]]) {{.*}} {weight_decay = 1.000000e-01 : f64} : tensor<4x3xf32>
// CHECK: distopt.adamw_update {{.*}} lr(%[[LR]]) {{.*}} {weight_decay = 0.000000e+00 : f64} : tensor<4xf32>
// CHECK: distopt.adamw_update {{.*}} lr(%[[LR]]) {{.*}} {weight_decay = 0.000000e+00 : f64} : tensor<4xf32>
// CHECK: distopt.adamw_update {{.*}} lr(%[[SCALED]]) {{.*}} {amsgrad, weight_decay = 1.000000e-01 : f64} : tensor<2x4xf32>
// CHECK: distopt.adamw_update {{.*}} lr(%[[LR]]) {{.*}} {weight_decay = 0.000000e+00 : f64} : tensor<2xf32>
//
// Under ZeRO each group is a flat layout of its own: decayed (fc.weight),
// not decayed (the biases and ln.weight), and the scaled AMSGrad head.
// ZERO-DAG: distopt.name = "flat0.exp_avg"
// ZERO-DAG: distopt.name = "flat1.exp_avg"
// ZERO-DAG: distopt.name = "flat2.max_exp_avg_sq"
//
// TWICE: param spec: param_groups[1].params[1]: parameter 'fc.bias' is in param_groups[0] already
// NOTHING: param spec: param_groups[1].params[1]: 'emb.*' matches no parameter
// GROUPLR: param spec: param_groups[1].lr: a group scales the step's learning rate: use lr_scale (or give the spec runtime_hyperparameters)
// SCALE: param spec: param_groups[1].lr_scale: must be non-negative, got -1
// KEY: param spec: param_groups[1]: unknown key 'momentum'
// EMPTY: param spec: param_groups[1].params: expected a non-empty list of names or glob patterns
// TYPE: distopt.adamw_update {{.*}} : tensor<4x3xf32>
// TYPE: distopt.sgd_update {{.*}} {momentum = 9.000000e-01 : f64} : tensor<4xf32>
// TYPE: distopt.sgd_update {{.*}} {momentum = 9.000000e-01 : f64} : tensor<4xf32>
// TYPE: distopt.adamw_update {{.*}} {amsgrad, weight_decay = 1.000000e-01 : f64} : tensor<2x4xf32>
