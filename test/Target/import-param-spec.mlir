// distopt-translate --import-param-spec: the step of a small spec, and one
// case per kind of malformed spec.
// RUN: distopt-translate --import-param-spec %S/Inputs/ok.json | FileCheck %s
// RUN: distopt-translate --import-param-spec %S/Inputs/ok.json | distopt-opt --distopt-verify-collectives > /dev/null
// RUN: not distopt-translate --import-param-spec %S/Inputs/unknown-key.json 2>&1 | FileCheck %s --check-prefix=KEY
// RUN: not distopt-translate --import-param-spec %S/Inputs/unknown-optimizer.json 2>&1 | FileCheck %s --check-prefix=OPT
// RUN: not distopt-translate --import-param-spec %S/Inputs/world-size.json 2>&1 | FileCheck %s --check-prefix=WORLD
// RUN: not distopt-translate --import-param-spec %S/Inputs/bad-shape.json 2>&1 | FileCheck %s --check-prefix=SHAPE
// RUN: not distopt-translate --import-param-spec %S/Inputs/bad-dtype.json 2>&1 | FileCheck %s --check-prefix=DTYPE
// RUN: not distopt-translate --import-param-spec %S/Inputs/duplicate.json 2>&1 | FileCheck %s --check-prefix=DUP
// RUN: not distopt-translate --import-param-spec %S/Inputs/bad-beta.json 2>&1 | FileCheck %s --check-prefix=BETA
// RUN: not distopt-translate --import-param-spec %S/Inputs/truncated.json 2>&1 | FileCheck %s --check-prefix=JSON
// RUN: not distopt-translate --import-param-spec %S/Inputs/empty.json 2>&1 | FileCheck %s --check-prefix=EMPTY
// RUN: not distopt-translate --import-param-spec %S/Inputs/world-size-huge.json 2>&1 | FileCheck %s --check-prefix=WORLD
// RUN: not distopt-translate --import-param-spec %S/Inputs/shape-overflow.json 2>&1 | FileCheck %s --check-prefix=OVERFLOW
// RUN: not distopt-translate --import-param-spec %S/Inputs/total-overflow.json 2>&1 | FileCheck %s --check-prefix=TOTAL
// RUN: not distopt-translate --import-param-spec %S/Inputs/negative-lr.json 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// RUN: %python -c "print('{\"world_size\": 2, \"model\": ' + '[' * 100000)" > %t.deep.json
// RUN: not distopt-translate --import-param-spec %t.deep.json 2>&1 | FileCheck %s --check-prefix=DEEP
// RUN: distopt-translate --import-param-spec %S/Inputs/adagrad.json | FileCheck %s --check-prefix=ADAGRAD

// CHECK: module attributes {distopt.lr = 5.000000e-01 : f64, distopt.model = "small", distopt.num_parameters = 15 : i64, distopt.world_size = 2 : i64}
// CHECK: distopt.process_group @world size 2
// CHECK-LABEL: func.func @step(
// CHECK-SAME: %[[W:[^:]*]]: tensor<3x4xf32> {distopt.name = "fc.weight", distopt.role = "param"}
// CHECK-SAME: %[[B:[^:]*]]: tensor<3xf32> {distopt.name = "fc.bias", distopt.role = "param"}
// CHECK-SAME: %[[GW:[^:]*]]: tensor<3x4xf32> {distopt.name = "fc.weight", distopt.role = "grad"}
// CHECK-SAME: %[[GB:[^:]*]]: tensor<3xf32> {distopt.name = "fc.bias", distopt.role = "grad"}
// CHECK-SAME: %[[MW:[^:]*]]: tensor<3x4xf32> {distopt.name = "fc.weight.momentum_buffer", distopt.role = "state"}
// CHECK-SAME: %[[MB:[^:]*]]: tensor<3xf32> {distopt.name = "fc.bias.momentum_buffer", distopt.role = "state"}
// CHECK-SAME: %[[LR:[^:]*]]: f64 {distopt.role = "lr"}, %[[T:[^:]*]]: i64 {distopt.role = "step"}
// Every reduction, then every division (so that buckets can gather the
// reductions).
// CHECK: %[[SW:.*]] = distopt.all_reduce sum %[[GW]] on @world : tensor<3x4xf32>
// CHECK: %[[SB:.*]] = distopt.all_reduce sum %[[GB]] on @world : tensor<3xf32>
// CHECK: %[[NW:.*]] = arith.constant dense<2.000000e+00> : tensor<3x4xf32>
// CHECK: %[[DW:.*]] = arith.divf %[[SW]], %[[NW]]
// CHECK: %[[DB:.*]] = arith.divf %[[SB]]
// CHECK: %[[PW:.*]], %[[BW:.*]] = distopt.sgd_update %[[W]], %[[DW]] state(%[[MW]]) lr(%[[LR]]) step(%[[T]]) {momentum = 9.000000e-01 : f64, nesterov, weight_decay = 1.000000e-03 : f64}
// CHECK: %[[PB:.*]], %[[BB:.*]] = distopt.sgd_update %[[B]], %[[DB]] state(%[[MB]])
// CHECK: return %[[PW]], %[[PB]], %[[BW]], %[[BB]]

// KEY: unknown-key.json:1:1: error: param spec: optimizer: unknown key 'momentom' (expected one of type, lr, momentum, dampening, weight_decay, nesterov, maximize)
// OPT: error: param spec: optimizer.type: unknown optimizer 'lamb' (expected adagrad, adam, adamw, dion, muon, rmsprop or sgd)
// WORLD: error: param spec: world_size: expected an integer from 1 to 1048576
// SHAPE: error: param spec: parameters[0].shape: expected a list of positive integers
// DTYPE: error: param spec: parameters[0].dtype: unsupported dtype 'f64' (expected f32, bf16 or f16)
// DUP: error: param spec: parameters[1].name: duplicate parameter name 'a'
// The optimizer's verifier, at a location naming the parameter.
// BETA: bad-beta.json:1:1: error: 'distopt.adam_update' op 'beta1' must be in [0, 1), got 1
// BETA: note: in the update of parameter 'layer.w'
// JSON: error: param spec: JSON: {{.*}}
// EMPTY: error: param spec: parameters: expected a non-empty list
// Sizes are checked before anything is computed from them.
// OVERFLOW: error: param spec: parameters[0].shape: more than 2^53 elements (the most a tensor may have)
// TOTAL: error: param spec: parameters[2]: the parameters up to here have more than 2^53 elements
// NEGATIVE: error: param spec: optimizer.lr: must be non-negative (torch.optim's rule), got -1.000000e-03
// Nesting is refused before parsing (the parser recurses once per level).
// DEEP: error: param spec: {{JSON}}: [1:91]: nested deeper than 64 levels
// Every optimizer key reaches the update as an attribute; a 0-d parameter.
// ADAGRAD: distopt.adagrad_update
// ADAGRAD-SAME: {eps = 9.9999999999999995E-7 : f64, initial_accumulator_value = 2.500000e-01 : f64, lr_decay = 5.000000e-01 : f64, maximize, weight_decay = 1.250000e-01 : f64} : tensor<f32>, f64
