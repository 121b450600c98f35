// RUN: distopt-opt %s --split-input-file --verify-diagnostics | FileCheck %s

// The step ABI's attributes (docs/step-abi.md), each in a form the dialect
// accepts: on arguments, results, a split step's entry, the module.

// CHECK-LABEL: func.func @step(
// CHECK-SAME: distopt.role = "param"
// CHECK-SAME: distopt.layout = [{name = "w", offset = 0 : i64, shape = array<i64: 2, 2>}, {name = "b", offset = 4 : i64, owner = 1 : i64, shape = array<i64: 2>}]
module attributes {distopt.world_size = 2 : i64, distopt.model = "m", distopt.lr = 1.0e-03 : f64, distopt.seed = 7 : i64, distopt.num_parameters = 6 : i64, distopt.grad_accumulation = 2 : i64} {
func.func @step(%p: tensor<4xf32> {distopt.role = "param", distopt.name = "w"},
                %s: tensor<6xf32> {distopt.role = "state", distopt.name = "flat0.exp_avg", distopt.shard_of = 12 : i64, distopt.init = "randn", distopt.per_rank,
                                   distopt.layout = [{name = "w", offset = 0 : i64, shape = array<i64: 2, 2>}, {name = "b", offset = 4 : i64, shape = array<i64: 2>, owner = 1 : i64}]},
                %beta: f64 {distopt.role = "hyperparameter", distopt.name = "group0.beta1", distopt.value = 9.0e-01 : f64})
    -> (tensor<4xf32> {distopt.role = "param", distopt.name = "w"}, f32 {distopt.role = "loss"}, i1 {distopt.role = "skipped"})
    attributes {distopt.in_place_results = array<i64: 0, -1, -1>} {
  %l = arith.constant 0.0 : f32
  %k = arith.constant false
  return %p, %l, %k : tensor<4xf32>, f32, i1
}
func.func @step_update(%p: tensor<4xf32> {distopt.role = "param", distopt.name = "w"}) -> tensor<4xf32> attributes {distopt.entry = "update"} {
  return %p : tensor<4xf32>
}
}

// -----

// expected-error @below {{argument #0: "distopt.role" must be one of param, grad, main_param, state, lr, step, loss, skipped, grad_accum, hyperparameter, reduced_grad, gathered_param, got "weights"}}
func.func @step(%p: tensor<4xf32> {distopt.role = "weights"}) {
  return
}

// -----

// expected-error @below {{argument #0: "distopt.role" "loss" is a role of results only}}
func.func @step(%p: f32 {distopt.role = "loss"}) {
  return
}

// -----

// expected-error @below {{result #0: "distopt.name" must be a string, got 3 : i64}}
func.func @step(%p: tensor<4xf32>) -> (tensor<4xf32> {distopt.name = 3}) {
  return %p : tensor<4xf32>
}

// -----

// expected-error @below {{argument #0: "distopt.layout" entry #0 {name = "w", shape = array<i64: 4>} must be {name = "...", offset = N, shape = array<i64: ...>} with an optional owner = R (N, R and the dimensions non-negative)}}
func.func @step(%s: tensor<4xf32> {distopt.layout = [{name = "w", shape = array<i64: 4>}]}) {
  return
}

// -----

// expected-error @below {{argument #0: "distopt.layout" entry #0}}
func.func @step(%s: tensor<4xf32> {distopt.layout = [{name = "w", offset = -4 : i64, shape = array<i64: 4>}]}) {
  return
}

// -----

// expected-error @below {{argument #0: "distopt.layout" must be an array of entries}}
func.func @step(%s: tensor<4xf32> {distopt.layout = "w"}) {
  return
}

// -----

// expected-error @below {{argument #0: "distopt.init" must be "zeros", "randn" or "randn_each_step", got "ones"}}
func.func @step(%s: tensor<4xf32> {distopt.init = "ones"}) {
  return
}

// -----

// expected-error @below {{argument #0: "distopt.shard_of" must be a positive integer, got 0 : i64}}
func.func @step(%s: tensor<4xf32> {distopt.shard_of = 0 : i64}) {
  return
}

// -----

// expected-error @below {{argument #0: "distopt.value" must be a number, got "0.9"}}
func.func @step(%s: f64 {distopt.value = "0.9"}) {
  return
}

// -----

// expected-error @below {{argument #0: "distopt.per_rank" takes no value (each rank's copy is its own) or "mean" (the copies stand for their mean), got true}}
func.func @step(%s: tensor<4xf32> {distopt.per_rank = true}) {
  return
}

// -----

// Copies that stand for their mean (Dion's low-rank sync).
// CHECK: func.func @step(%{{.*}}: tensor<4xf32> {distopt.name = "w.momentum", distopt.per_rank = "mean", distopt.role = "state"})
func.func @step(%s: tensor<4xf32> {distopt.role = "state", distopt.name = "w.momentum", distopt.per_rank = "mean"}) {
  return
}

// -----

// expected-error @below {{argument #0: "distopt.per_rank" takes no value (each rank's copy is its own) or "mean" (the copies stand for their mean), got "median"}}
func.func @step(%s: tensor<4xf32> {distopt.per_rank = "median"}) {
  return
}

// -----

// expected-error @below {{argument #0: "distopt.rol" is not an attribute of the step ABI (role, name, per_rank, layout, value, init, shard_of, unit)}}
func.func @step(%s: tensor<4xf32> {distopt.rol = "param"}) {
  return
}

// -----

// expected-error @below {{"distopt.world_size" must be a positive integer, got 0 : i64}}
module attributes {distopt.world_size = 0 : i64} {
}

// -----

// expected-error @below {{"distopt.entry" must be "reduce", "gather" or "update", got "apply"}}
func.func @step_apply() attributes {distopt.entry = "apply"} {
  return
}

// -----

// expected-error @below {{"distopt.bucket" is not an attribute of the distopt dialect}}
func.func @step() attributes {distopt.bucket = 1 : i64} {
  return
}

// -----

// expected-error @below {{"distopt.matrix_plans" must be an array of {matrices = N, plan = "gather" or "lowrank" (optional), gathered = [names], chosen_us, all_owners_us, all_gathered_us = microseconds}, got [1]}}
func.func @step() attributes {distopt.matrix_plans = [1 : i64]} {
  return
}

// -----

// expected-error @below {{"distopt.matrix_plans" must be an array of}}
func.func @step() attributes {distopt.matrix_plans = [{matrices = 2 : i64, gathered = ["w"], chosen_us = 1.0 : f64, all_owners_us = 2.0 : f64}]} {
  return
}

// -----

// A parameter's unit (FSDP's wrapped module), and a gather entry.
// CHECK-LABEL: func.func @step_gather0(
// CHECK-SAME: distopt.unit = 3 : i64
// CHECK-SAME: distopt.role = "gathered_param"
// CHECK-SAME: distopt.entry = "gather", distopt.gathers = array<i64: 0>
func.func @step_gather0(%p: tensor<2xf32> {distopt.role = "param", distopt.name = "flat0.param", distopt.unit = 3 : i64, distopt.shard_of = 4 : i64, distopt.layout = [{name = "w", offset = 0 : i64, shape = array<i64: 4>}]},
                        %w: tensor<4xf32> {distopt.role = "gathered_param", distopt.name = "flat0.param", distopt.layout = [{name = "w", offset = 0 : i64, shape = array<i64: 4>}]})
    -> tensor<4xf32> attributes {distopt.entry = "gather", distopt.gathers = array<i64: 0>} {
  return %w : tensor<4xf32>
}

// -----

// expected-error @below {{argument #0: "distopt.unit" must be a non-negative integer, got -1 : i64}}
func.func @step(%p: tensor<4xf32> {distopt.role = "param", distopt.unit = -1 : i64}) {
  return
}

// -----

// expected-error @below {{"distopt.gathers" must be an array<i64: ...>, got 0 : i64}}
func.func @step_gather0() attributes {distopt.entry = "gather", distopt.gathers = 0 : i64} {
  return
}
