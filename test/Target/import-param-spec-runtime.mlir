// runtime_hyperparameters: each group's rate and hyperparameters are f64
// arguments of role hyperparameter, named after the group (`optimizer` for
// the parameters in no group), starting from the spec's values; the step
// has no lr argument, and each update takes its group's as runtime operands
// (the attributes still say which state there is).
// RUN: distopt-translate --import-param-spec %S/Inputs/runtime-hyperparameters.json | FileCheck %s
// RUN: distopt-translate --import-param-spec %S/Inputs/runtime-hyperparameters.json | distopt-opt --distopt-pipeline=zero-stage=2 | FileCheck %s --check-prefix=ZERO
// RUN: sed -e 's/"lr": 0.002/"lr": 0.002, "lr_scale": 2/' %S/Inputs/runtime-hyperparameters.json \
// RUN:   | distopt-translate --import-param-spec | FileCheck %s --check-prefix=SCALED
// RUN: sed -e 's/"runtime_hyperparameters": true/"runtime_hyperparameters": 1/' %S/Inputs/runtime-hyperparameters.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=NOTBOOL

// CHECK-LABEL: func.func @step
// CHECK-NOT: distopt.role = "lr"
// CHECK-SAME: %[[LR0:[^:]*]]: f64 {distopt.name = "optimizer.lr", distopt.role = "hyperparameter", distopt.value = 1.000000e-03 : f64}
// CHECK-SAME: %[[B10:[^:]*]]: f64 {distopt.name = "optimizer.beta1", distopt.role = "hyperparameter", distopt.value = 9.000000e-01 : f64}
// CHECK-SAME: %[[B20:[^:]*]]: f64 {distopt.name = "optimizer.beta2", distopt.role = "hyperparameter", distopt.value = 0.94999999999999996 : f64}
// CHECK-SAME: %[[EPS0:[^:]*]]: f64 {distopt.name = "optimizer.eps", distopt.role = "hyperparameter", distopt.value = 1.000000e-08 : f64}
// CHECK-SAME: %[[WD0:[^:]*]]: f64 {distopt.name = "optimizer.weight_decay", distopt.role = "hyperparameter", distopt.value = 1.000000e-01 : f64}
// CHECK-SAME: %[[LR1:[^:]*]]: f64 {distopt.name = "group0.lr", distopt.role = "hyperparameter", distopt.value = 2.000000e-03 : f64}
// CHECK-SAME: {distopt.name = "group0.beta1", distopt.role = "hyperparameter", distopt.value = 9.000000e-01 : f64}
// CHECK-SAME: {distopt.name = "group0.beta2", distopt.role = "hyperparameter", distopt.value = 0.94999999999999996 : f64}
// CHECK-SAME: {distopt.name = "group0.eps", distopt.role = "hyperparameter", distopt.value = 1.000000e-08 : f64}
// CHECK-SAME: %[[WD1:[^:]*]]: f64 {distopt.name = "group0.weight_decay", distopt.role = "hyperparameter", distopt.value = 0.000000e+00 : f64}
// CHECK-SAME: %[[STEP:[^:]*]]: i64 {distopt.role = "step"}
// CHECK: distopt.adamw_update {{.*}} lr(%[[LR0]]) step(%[[STEP]]) runtime(beta1 = %[[B10]], beta2 = %[[B20]], eps = %[[EPS0]], weight_decay = %[[WD0]]) {beta2 = 0.94999999999999996 : f64, weight_decay = 1.000000e-01 : f64} : tensor<4x3xf32>, f64
// CHECK: distopt.adamw_update {{.*}} lr(%[[LR1]]) step(%[[STEP]]) runtime({{.*}}weight_decay = %[[WD1]]) {beta2 = 0.94999999999999996 : f64, weight_decay = 0.000000e+00 : f64} : tensor<4xf32>, f64
// CHECK: distopt.adamw_update {{.*}} lr(%[[LR0]]) step(%[[STEP]]) runtime(beta1 = %[[B10]], {{.*}}weight_decay = %[[WD0]]) {{.*}} : tensor<2x4xf32>, f64
//
// Under ZeRO the two groups are two flat layouts, each update reading its
// group's runtime hyperparameters.
// ZERO: distopt.adamw_update {{.*}} lr(%[[ZLR0:[^)]*]]) {{.*}} {beta2 = 0.94999999999999996 : f64, weight_decay = 1.000000e-01 : f64} : tensor<16xf32>, f64
// ZERO-NOT: lr(%[[ZLR0]])
// ZERO: distopt.adamw_update {{.*}} {beta2 = 0.94999999999999996 : f64, weight_decay = 0.000000e+00 : f64} : tensor<16xf32>, f64
//
// A group's lr_scale scales its own rate.
// SCALED: {distopt.name = "group0.lr", distopt.role = "hyperparameter", distopt.value = 4.000000e-03 : f64}
//
// NOTBOOL: param spec: spec.runtime_hyperparameters: expected true or false
