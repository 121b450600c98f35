// One case per verifier diagnostic of the distopt dialect, checking its text.
// RUN: distopt-opt %s -split-input-file -verify-diagnostics -allow-unregistered-dialect

// expected-error @+1 {{group size must be at least 1, got 0}}
distopt.process_group @dp size 0

// -----

// expected-error @+1 {{every mesh axis needs at least 1 rank, got 0}}
distopt.mesh @m shape [2, 0]

// -----

// expected-error @+1 {{a mesh needs at least one axis}}
distopt.mesh @m shape []

// -----

// expected-error @+1 {{the mesh has more than 2^20 ranks, the most a step may be compiled for}}
distopt.mesh @m shape [1024, 1025]

// -----

distopt.mesh @m shape [2, 4]
// expected-error @+1 {{size 2 differs from the 4 ranks of axes [1] of @m}}
distopt.process_group @g size 2 over @m axes [1]

// -----

distopt.mesh @m shape [2, 4]
// expected-error @+1 {{mesh axis 2 is out of range for @m of 2 axes}}
distopt.process_group @g size 2 over @m axes [2]

// -----

distopt.mesh @m shape [2, 4]
// expected-error @+1 {{mesh axis 1 is repeated}}
distopt.process_group @g size 16 over @m axes [1, 1]

// -----

distopt.mesh @m shape [2, 4]
// expected-error @+1 {{mesh axis -1 is negative}}
distopt.process_group @g size 4 over @m axes [-1]

// -----

distopt.mesh @m shape [2, 4]
// expected-error @+1 {{a group over a mesh needs at least one axis}}
distopt.process_group @g size 1 over @m axes []

// -----

// expected-error @+1 {{@nowhere does not name a distopt.mesh}}
distopt.process_group @g size 2 over @nowhere axes [0]

// -----

// expected-error @+1 {{a group over a mesh names both the mesh and its axes}}
"distopt.process_group"() <{sym_name = "g", size = 2 : i64, mesh = @m}> : () -> ()

// -----

distopt.mesh @m shape [2, 2]
// expected-error @+1 {{a group is over a mesh or lists its ranks, not both}}
"distopt.process_group"() <{sym_name = "g", size = 2 : i64, mesh = @m, axes = array<i64: 0>, ranks = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>}> : () -> ()

// -----

// expected-error @+1 {{ranks must be a 2-D list of parts of 2 ranks each, got 'tensor<4xi64>'}}
distopt.process_group @g size 2 ranks dense<[0, 1, 2, 3]> : tensor<4xi64>

// -----

// expected-error @+1 {{ranks must be a 2-D list of parts of 2 ranks each, got 'tensor<2x3xi64>'}}
distopt.process_group @g size 2 ranks dense<[[0, 1, 2], [3, 4, 5]]> : tensor<2x3xi64>

// -----

// expected-error @+1 {{rank 1 is in two parts: the parts must tile the world}}
distopt.process_group @g size 2 ranks dense<[[0, 1], [1, 2]]> : tensor<2x2xi64>

// -----

// expected-error @+1 {{rank 4 (part 1) is outside the world of 4 ranks the parts tile}}
distopt.process_group @g size 2 ranks dense<[[0, 1], [2, 4]]> : tensor<2x2xi64>

// -----

func.func @missing_group() -> index {
  // expected-error @+1 {{@nowhere does not name a distopt.process_group}}
  %r = distopt.rank @nowhere : index
  return %r : index
}

// -----

func.func @symbol_is_not_a_group() -> index {
  // expected-error @+1 {{@symbol_is_not_a_group does not name a distopt.process_group}}
  %n = distopt.group_size @symbol_is_not_a_group : index
  return %n : index
}

// -----

distopt.process_group @dp size 4
func.func @unknown_reduction(%g: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{unknown reduction 'mean'; expected sum, avg, min, max, prod or premul_sum}}
  %0 = distopt.all_reduce mean %g on @dp : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

distopt.process_group @dp size 4
func.func @scale_without_premul(%g: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{a scale is only valid with premul_sum}}
  %0 = distopt.all_reduce sum(0.5) %g on @dp : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

distopt.process_group @dp size 4
func.func @premul_without_scale(%g: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{premul_sum requires a scale}}
  %0 = distopt.all_reduce premul_sum %g on @dp : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

distopt.process_group @dp size 4
func.func @premul_on_integers(%g: tensor<8xi32>) -> tensor<8xi32> {
  // expected-error @+1 {{premul_sum requires a floating-point element type, got 'i32'}}
  %0 = distopt.all_reduce premul_sum(0.25) %g on @dp : tensor<8xi32>
  return %0 : tensor<8xi32>
}

// -----

distopt.process_group @dp size 4
func.func @premul_scale_nan(%g: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{premul_sum scale must be finite}}
  %0 = "distopt.all_reduce"(%g) <{group = @dp, reduction = #distopt.reduction<premul_sum>, scale = 0x7FF8000000000000 : f64}> : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// The factor of pytorch #190747: a scale that is zero in the element type.
distopt.process_group @dp size 4
func.func @premul_scale_underflows(%g: tensor<8xf16>) -> tensor<8xf16> {
  // expected-error @+1 {{premul_sum scale 1e-09 is not representable in 'f16'}}
  %0 = distopt.all_reduce premul_sum(1.0e-9) %g on @dp : tensor<8xf16>
  return %0 : tensor<8xf16>
}

// -----

distopt.process_group @dp size 4
func.func @wire_on_integers(%g: tensor<8xi32>) -> tensor<8xi32> {
  // expected-error @+1 {{a wire type requires floating-point data, got 'i32'}}
  %0 = distopt.all_reduce sum %g on @dp wire bf16 : tensor<8xi32>
  return %0 : tensor<8xi32>
}

// -----

distopt.process_group @dp size 4
func.func @wire_wider(%g: tensor<8xbf16>) -> tensor<8xbf16> {
  // expected-error @+1 {{wire type 'f32' is wider than the element type 'bf16'}}
  %0 = distopt.all_reduce sum %g on @dp wire f32 : tensor<8xbf16>
  return %0 : tensor<8xbf16>
}

// -----

distopt.process_group @dp size 4
func.func @start_token_type(%g: tensor<8xf32>) {
  // expected-error @+1 {{yields 'tensor<4xf32>' but the input is 'tensor<8xf32>'}}
  %t = distopt.all_reduce_start sum %g on @dp : tensor<8xf32> -> !distopt.token<tensor<4xf32>>
  return
}

// -----

distopt.process_group @dp size 4
func.func @gather_scalar(%g: tensor<f32>) {
  // expected-error @+1 {{requires a tensor of rank at least 1}}
  %0 = distopt.all_gather %g on @dp : tensor<f32> -> tensor<f32>
  return
}

// -----

distopt.process_group @dp size 4
func.func @scatter_other_dims(%g: tensor<8x4xf32>) {
  // expected-error @+1 {{yields 'tensor<2x2xf32>', which differs from the input 'tensor<8x4xf32>' in more than dimension 0}}
  %0 = distopt.reduce_scatter sum %g on @dp : tensor<8x4xf32> -> tensor<2x2xf32>
  return
}

// -----

distopt.process_group @dp size 4
func.func @scatter_indivisible(%g: tensor<10xf32>) {
  // expected-error @+1 {{dimension 0 of the input (10) is not divisible by the size of @dp (4)}}
  %0 = distopt.reduce_scatter sum %g on @dp : tensor<10xf32> -> tensor<2xf32>
  return
}

// -----

distopt.process_group @dp size 4
func.func @gather_wrong_size(%g: tensor<8xf32>) {
  // expected-error @+1 {{dimension 0 of the result must be 32 for @dp of size 4, got 16}}
  %0 = distopt.all_gather %g on @dp : tensor<8xf32> -> tensor<16xf32>
  return
}

// -----

distopt.process_group @dp size 4
func.func @root_out_of_range(%g: tensor<8xf32>) {
  // expected-error @+1 {{root 4 is out of range for @dp of size 4}}
  %0 = distopt.broadcast %g on @dp root 4 : tensor<8xf32>
  return
}

// -----

func.func @pack_nothing() {
  // expected-error @+1 {{requires at least one input}}
  %b = "distopt.bucket_pack"() : () -> tensor<4xf32>
  return
}

// -----

func.func @pack_mixed_types(%a: tensor<4xf32>, %b: tensor<4xf16>) {
  // expected-error @+1 {{input #1 has element type 'f16' but the bucket's is 'f32'}}
  %0 = distopt.bucket_pack %a, %b : tensor<4xf32>, tensor<4xf16> -> tensor<32xf32>
  return
}

// -----

func.func @pack_alignment_not_power_of_two(%a: tensor<4xf32>) {
  // expected-error @+1 {{alignment must be a positive power of two, got 48}}
  %0 = distopt.bucket_pack %a {alignment = 48} : tensor<4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @pack_alignment_below_element(%a: tensor<4xf32>) {
  // expected-error @+1 {{alignment (2 bytes) is not a multiple of the element size (4 bytes)}}
  %0 = distopt.bucket_pack %a {alignment = 2} : tensor<4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @unpack_too_small(%b: tensor<20xf32>) {
  // expected-error @+1 {{bucket of 20 elements cannot hold the 26 elements packed at alignment 64}}
  %0, %1 = distopt.bucket_unpack %b : tensor<20xf32> -> tensor<10xf32>, tensor<10xf32>
  return
}

// -----

// Offsets saturate instead of overflowing.
func.func @pack_offsets_overflow(%a: tensor<4xi8>) {
  // expected-error @+1 {{bucket of 4 elements cannot hold the 9223372036854775807 elements packed at alignment 4611686018427387904}}
  %0 = distopt.bucket_pack %a, %a, %a {alignment = 4611686018427387904} : tensor<4xi8>, tensor<4xi8>, tensor<4xi8> -> tensor<4xi8>
  return
}

// -----

distopt.process_group @dp size 4
func.func @powersgd_rank_zero(%g: tensor<8x8xf32>, %p: tensor<8x0xf32>, %q: tensor<8x0xf32>) {
  // expected-error @+1 {{PowerSGD rank must be at least 1, got 0}}
  %r:3 = distopt.powersgd_all_reduce %g, %p, %q on @dp rank 0 : tensor<8x8xf32>, tensor<8x0xf32>, tensor<8x0xf32>
  return
}

// -----

distopt.process_group @dp size 4
func.func @powersgd_vector(%g: tensor<8xf32>, %p: tensor<8x1xf32>, %q: tensor<8x1xf32>) {
  // expected-error @+1 {{gradient must be a matrix (rank 2), got rank 1}}
  %r:3 = distopt.powersgd_all_reduce %g, %p, %q on @dp rank 1 : tensor<8xf32>, tensor<8x1xf32>, tensor<8x1xf32>
  return
}

// -----

distopt.process_group @dp size 4
func.func @powersgd_dynamic(%g: tensor<?x8xf32>, %p: tensor<8x1xf32>, %q: tensor<8x1xf32>) {
  // expected-error @+1 {{gradient must have a static shape}}
  %r:3 = distopt.powersgd_all_reduce %g, %p, %q on @dp rank 1 : tensor<?x8xf32>, tensor<8x1xf32>, tensor<8x1xf32>
  return
}

// -----

distopt.process_group @dp size 4
func.func @powersgd_rank_too_large(%g: tensor<8x4xf32>, %p: tensor<8x5xf32>, %q: tensor<4x5xf32>) {
  // expected-error @+1 {{PowerSGD rank 5 exceeds min(rows, columns) = 4}}
  %r:3 = distopt.powersgd_all_reduce %g, %p, %q on @dp rank 5 : tensor<8x4xf32>, tensor<8x5xf32>, tensor<4x5xf32>
  return
}

// -----

distopt.process_group @dp size 4
func.func @powersgd_p_shape(%g: tensor<8x4xf32>, %p: tensor<8x1xf32>, %q: tensor<4x2xf32>) {
  // expected-error @+1 {{P must be 'tensor<8x2xf32>' (rows of the gradient x rank), got 'tensor<8x1xf32>'}}
  %r:3 = distopt.powersgd_all_reduce %g, %p, %q on @dp rank 2 : tensor<8x4xf32>, tensor<8x1xf32>, tensor<4x2xf32>
  return
}

// -----

distopt.process_group @dp size 4
func.func @powersgd_q_shape(%g: tensor<8x4xf32>, %p: tensor<8x2xf32>, %q: tensor<8x2xf32>) {
  // expected-error @+1 {{Q must be 'tensor<4x2xf32>' (columns of the gradient x rank), got 'tensor<8x2xf32>'}}
  %r:3 = distopt.powersgd_all_reduce %g, %p, %q on @dp rank 2 : tensor<8x4xf32>, tensor<8x2xf32>, tensor<8x2xf32>
  return
}

// -----

distopt.process_group @dp size 4
func.func @powersgd_error_type(%g: tensor<8x4xf32>, %p: tensor<8x2xf32>, %q: tensor<4x2xf32>, %e: tensor<4x8xf32>) {
  // expected-error @+1 {{error state type 'tensor<4x8xf32>' differs from the gradient type 'tensor<8x4xf32>'}}
  %r:4 = "distopt.powersgd_all_reduce"(%g, %p, %q, %e) <{group = @dp, rank = 2 : i64}> : (tensor<8x4xf32>, tensor<8x2xf32>, tensor<4x2xf32>, tensor<4x8xf32>) -> (tensor<8x4xf32>, tensor<8x2xf32>, tensor<4x2xf32>, tensor<4x8xf32>)
  return
}

// -----

distopt.process_group @dp size 4
func.func @powersgd_epsilon(%g: tensor<8x4xf32>, %p: tensor<8x2xf32>, %q: tensor<4x2xf32>) {
  // expected-error @+1 {{orthogonalization_epsilon must be non-negative}}
  %r:3 = distopt.powersgd_all_reduce %g, %p, %q on @dp rank 2 {orthogonalization_epsilon = -1.0} : tensor<8x4xf32>, tensor<8x2xf32>, tensor<4x2xf32>
  return
}

// -----

func.func @orthogonalize_vector(%p: tensor<8xf32>) {
  // expected-error @+1 {{requires a matrix (rank 2), got rank 1}}
  %0 = distopt.orthogonalize %p : tensor<8xf32>
  return
}

// -----

func.func @orthogonalize_epsilon(%p: tensor<8x2xf32>) {
  // expected-error @+1 {{epsilon must be non-negative}}
  %0 = distopt.orthogonalize %p {epsilon = -1.0e-8} : tensor<8x2xf32>
  return
}

// -----

distopt.process_group @dp size 4
func.func @topk_density(%g: tensor<64xf32>, %e: tensor<64xf32>) {
  // expected-error @+1 {{density must be in (0, 1], got 1.5}}
  %r:2 = distopt.topk_all_reduce sum %g, %e on @dp density 1.5 : tensor<64xf32>
  return
}

// -----

distopt.process_group @dp size 4
func.func @topk_reduction(%g: tensor<64xf32>, %e: tensor<64xf32>) {
  // expected-error @+1 {{top-K reduction must be sum, avg or premul_sum, got max}}
  %r:2 = distopt.topk_all_reduce max %g, %e on @dp density 0.1 : tensor<64xf32>
  return
}

// -----

distopt.process_group @dp size 4
func.func @shard_slice_scalar(%g: tensor<f32>) {
  // expected-error @+1 {{requires a tensor of rank at least 1}}
  %0 = distopt.shard_slice %g on @dp : tensor<f32> -> tensor<f32>
  return
}

// -----

distopt.process_group @dp size 4
func.func @shard_slice_other_dims(%g: tensor<8x2xf32>) {
  // expected-error @+1 {{result 'tensor<2x4xf32>' differs from the input 'tensor<8x2xf32>' in more than dimension 0}}
  %0 = distopt.shard_slice %g on @dp : tensor<8x2xf32> -> tensor<2x4xf32>
  return
}

// -----

distopt.process_group @dp size 4
func.func @owned_by_arguments(%p: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{body must not take arguments}}
  %0 = distopt.owned_by @dp rank 0 otherwise(%p) : tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    distopt.yield %x : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

distopt.process_group @dp size 4
func.func @owned_by_terminator(%p: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{body must end with distopt.yield}}
  %0 = distopt.owned_by @dp rank 0 otherwise(%p) : tensor<4xf32> {
    "test.terminator"(%p) : (tensor<4xf32>) -> ()
  }
  return %0 : tensor<4xf32>
}

// -----

distopt.process_group @dp size 4
func.func @owned_by_yield_types(%p: tensor<4xf32>, %q: tensor<8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{distopt.yield returns 'tensor<8xf32>' but the otherwise operands are 'tensor<4xf32>'}}
  %0 = distopt.owned_by @dp rank 0 otherwise(%p) : tensor<4xf32> {
    distopt.yield %q : tensor<8xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

distopt.process_group @dp size 4
func.func @owned_by_result_types(%p: tensor<4xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{results 'tensor<8xf32>' differ from the otherwise operands 'tensor<4xf32>'}}
  %0 = "distopt.owned_by"(%p) <{group = @dp, owner = 0 : i64}> ({
    "distopt.yield"(%p) : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

distopt.process_group @dp size 4
func.func @owned_by_owner_out_of_range(%p: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{owner rank -1 is out of range for @dp of size 4}}
  %0 = distopt.owned_by @dp rank -1 otherwise(%p) : tensor<4xf32> {
    distopt.yield %p : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

func.func @sgd_negative_momentum(%p: tensor<4xf32>, %g: tensor<4xf32>, %b: tensor<4xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{'momentum' must be non-negative, got -0.5}}
  %r:2 = distopt.sgd_update %p, %g state(%b) lr(%lr) step(%t) {momentum = -0.5} : tensor<4xf32>, f32
  return
}

// -----

func.func @sgd_negative_weight_decay(%p: tensor<4xf32>, %g: tensor<4xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{'weight_decay' must be non-negative, got -0.01}}
  %r = distopt.sgd_update %p, %g lr(%lr) step(%t) {weight_decay = -0.01} : tensor<4xf32>, f32
  return
}

// -----

func.func @nesterov_without_momentum(%p: tensor<4xf32>, %g: tensor<4xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{nesterov requires a momentum and zero dampening}}
  %r = distopt.sgd_update %p, %g lr(%lr) step(%t) {nesterov} : tensor<4xf32>, f32
  return
}

// -----

func.func @sgd_missing_momentum_buffer(%p: tensor<4xf32>, %g: tensor<4xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{expects 1 state tensors (momentum_buffer) for these hyperparameters, got 0}}
  %r = distopt.sgd_update %p, %g lr(%lr) step(%t) {momentum = 0.9} : tensor<4xf32>, f32
  return
}

// -----

func.func @runtime_hyperparameter_unknown(%p: tensor<4xf32>, %g: tensor<4xf32>, %lr: f64, %t: i64, %x: f64) {
  // expected-error @+1 {{has no hyperparameter 'beta1' that can be given at run time (it takes momentum, dampening, weight_decay)}}
  %r = distopt.sgd_update %p, %g lr(%lr) step(%t) runtime(beta1 = %x) : tensor<4xf32>, f64
  return
}

// -----

func.func @runtime_hyperparameter_twice(%p: tensor<4xf32>, %g: tensor<4xf32>, %lr: f64, %t: i64, %x: f64) {
  // expected-error @+1 {{takes hyperparameter 'weight_decay' at run time twice}}
  %r = distopt.sgd_update %p, %g lr(%lr) step(%t) runtime(weight_decay = %x, weight_decay = %x) : tensor<4xf32>, f64
  return
}

// -----

func.func @runtime_hyperparameter_names(%p: tensor<4xf32>, %g: tensor<4xf32>, %lr: f64, %t: i64, %x: f64) {
  // expected-error @+1 {{has 1 runtime hyperparameters but 0 names}}
  %r = "distopt.sgd_update"(%p, %g, %lr, %t, %x) <{operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 1>}> : (tensor<4xf32>, tensor<4xf32>, f64, i64, f64) -> tensor<4xf32>
  return
}

// -----

func.func @optimizer_grad_type(%p: tensor<4xf32>, %g: tensor<4xf16>, %lr: f32, %t: i64) {
  // expected-error @+1 {{gradient type 'tensor<4xf16>' differs from the parameter type 'tensor<4xf32>'}}
  %r = "distopt.sgd_update"(%p, %g, %lr, %t) <{operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 0>}> : (tensor<4xf32>, tensor<4xf16>, f32, i64) -> tensor<4xf32>
  return
}

// -----

func.func @optimizer_state_type(%p: tensor<4xf32>, %g: tensor<4xf32>, %m: tensor<4xf32>, %v: tensor<8xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{state #1 ('exp_avg_sq') type 'tensor<8xf32>' differs from the parameter type 'tensor<4xf32>'}}
  %r:3 = "distopt.adam_update"(%p, %g, %m, %v, %lr, %t) <{operandSegmentSizes = array<i32: 1, 1, 2, 1, 1, 0>}> : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<8xf32>, f32, i64) -> (tensor<4xf32>, tensor<4xf32>, tensor<8xf32>)
  return
}

// -----

func.func @negative_learning_rate(%p: tensor<4xf32>, %g: tensor<4xf32>, %t: i64) {
  %lr = arith.constant -0.1 : f32
  // expected-error @+1 {{learning rate must be non-negative, got -0.1}}
  %r = distopt.sgd_update %p, %g lr(%lr) step(%t) : tensor<4xf32>, f32
  return
}

// -----

func.func @step_zero(%p: tensor<4xf32>, %g: tensor<4xf32>, %m: tensor<4xf32>, %v: tensor<4xf32>, %lr: f32) {
  %t = arith.constant 0 : i64
  // expected-error @+1 {{step counts from 1, got 0}}
  %r:3 = distopt.adam_update %p, %g state(%m, %v) lr(%lr) step(%t) : tensor<4xf32>, f32
  return
}

// -----

func.func @adam_beta1(%p: tensor<4xf32>, %g: tensor<4xf32>, %m: tensor<4xf32>, %v: tensor<4xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{'beta1' must be in [0, 1), got 1}}
  %r:3 = distopt.adam_update %p, %g state(%m, %v) lr(%lr) step(%t) {beta1 = 1.0} : tensor<4xf32>, f32
  return
}

// -----

func.func @adamw_beta2(%p: tensor<4xf32>, %g: tensor<4xf32>, %m: tensor<4xf32>, %v: tensor<4xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{'beta2' must be in [0, 1), got -0.5}}
  %r:3 = distopt.adamw_update %p, %g state(%m, %v) lr(%lr) step(%t) {beta2 = -0.5} : tensor<4xf32>, f32
  return
}

// -----

func.func @adam_eps(%p: tensor<4xf32>, %g: tensor<4xf32>, %m: tensor<4xf32>, %v: tensor<4xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{'eps' must be non-negative, got -1e-08}}
  %r:3 = distopt.adam_update %p, %g state(%m, %v) lr(%lr) step(%t) {eps = -1.0e-8} : tensor<4xf32>, f32
  return
}

// -----

func.func @adam_amsgrad_state(%p: tensor<4xf32>, %g: tensor<4xf32>, %m: tensor<4xf32>, %v: tensor<4xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{expects 3 state tensors (exp_avg, exp_avg_sq, max_exp_avg_sq) for these hyperparameters, got 2}}
  %r:3 = distopt.adam_update %p, %g state(%m, %v) lr(%lr) step(%t) {amsgrad} : tensor<4xf32>, f32
  return
}

// -----

func.func @rmsprop_alpha(%p: tensor<4xf32>, %g: tensor<4xf32>, %s: tensor<4xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{'alpha' must be non-negative, got -0.99}}
  %r:2 = distopt.rmsprop_update %p, %g state(%s) lr(%lr) step(%t) {alpha = -0.99} : tensor<4xf32>, f32
  return
}

// -----

func.func @rmsprop_centered_state(%p: tensor<4xf32>, %g: tensor<4xf32>, %s: tensor<4xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{expects 2 state tensors (square_avg, grad_avg) for these hyperparameters, got 1}}
  %r:2 = distopt.rmsprop_update %p, %g state(%s) lr(%lr) step(%t) {centered} : tensor<4xf32>, f32
  return
}

// -----

func.func @adagrad_lr_decay(%p: tensor<4xf32>, %g: tensor<4xf32>, %s: tensor<4xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{'lr_decay' must be non-negative, got -0.1}}
  %r:2 = distopt.adagrad_update %p, %g state(%s) lr(%lr) step(%t) {lr_decay = -0.1} : tensor<4xf32>, f32
  return
}

// -----

func.func @adagrad_initial_accumulator(%p: tensor<4xf32>, %g: tensor<4xf32>, %s: tensor<4xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{'initial_accumulator_value' must be non-negative, got -1}}
  %r:2 = distopt.adagrad_update %p, %g state(%s) lr(%lr) step(%t) {initial_accumulator_value = -1.0} : tensor<4xf32>, f32
  return
}

// -----

func.func @adagrad_state(%p: tensor<4xf32>, %g: tensor<4xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{expects 1 state tensors (sum) for these hyperparameters, got 0}}
  %r = distopt.adagrad_update %p, %g lr(%lr) step(%t) : tensor<4xf32>, f32
  return
}

// -----

func.func @muon_vector(%p: tensor<4xf32>, %g: tensor<4xf32>, %b: tensor<4xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{orthogonalizes matrices: the parameter must have rank 2 or more, got 'tensor<4xf32>'}}
  %r:2 = distopt.muon_update %p, %g state(%b) lr(%lr) step(%t) : tensor<4xf32>, f32
  return
}

// -----

func.func @muon_momentum(%p: tensor<4x2xf32>, %g: tensor<4x2xf32>, %b: tensor<4x2xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{'momentum' must be in [0, 1), got 1}}
  %r:2 = distopt.muon_update %p, %g state(%b) lr(%lr) step(%t) {momentum = 1.0} : tensor<4x2xf32>, f32
  return
}

// -----

func.func @muon_steps(%p: tensor<4x2xf32>, %g: tensor<4x2xf32>, %b: tensor<4x2xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{'ns_steps' must be in [0, 100], got -1}}
  %r:2 = distopt.muon_update %p, %g state(%b) lr(%lr) step(%t) {ns_steps = -1} : tensor<4x2xf32>, f32
  return
}

// -----

func.func @muon_coefficients(%p: tensor<4x2xf32>, %g: tensor<4x2xf32>, %b: tensor<4x2xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{'ns_coefficients' must be three finite numbers (a, b, c)}}
  %r:2 = distopt.muon_update %p, %g state(%b) lr(%lr) step(%t) {ns_coefficients = array<f64: 1.0, 2.0>} : tensor<4x2xf32>, f32
  return
}

// -----

func.func @muon_adjust(%p: tensor<4x2xf32>, %g: tensor<4x2xf32>, %b: tensor<4x2xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{'adjust_lr_fn' must be "original" or "match_rms_adamw", got "moonshot"}}
  %r:2 = distopt.muon_update %p, %g state(%b) lr(%lr) step(%t) {adjust_lr_fn = "moonshot"} : tensor<4x2xf32>, f32
  return
}

// -----

func.func @muon_dtype(%p: tensor<4x2xf32>, %g: tensor<4x2xf32>, %b: tensor<4x2xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{'ns_dtype' must be f32 or bf16, got 'f16'}}
  %r:2 = distopt.muon_update %p, %g state(%b) lr(%lr) step(%t) {ns_dtype = f16} : tensor<4x2xf32>, f32
  return
}

// -----

func.func @muon_state(%p: tensor<4x2xf32>, %g: tensor<4x2xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{expects 1 state tensors (momentum_buffer) for these hyperparameters, got 0}}
  %r = distopt.muon_update %p, %g lr(%lr) step(%t) : tensor<4x2xf32>, f32
  return
}

// -----

func.func @dion_vector(%p: tensor<4xf32>, %g: tensor<4xf32>, %m: tensor<4xf32>, %q: tensor<4xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{orthonormalizes matrices: the parameter must have rank 2 or more, got 'tensor<4xf32>'}}
  %r:3 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) : tensor<4xf32>, f32
  return
}

// -----

func.func @dion_factor(%p: tensor<8x6xf32>, %g: tensor<8x6xf32>, %m: tensor<8x6xf32>, %q: tensor<6x4xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{state #1 ('right_factor') type 'tensor<6x4xf32>' differs from 'tensor<4x6xf32>', the type the update keeps}}
  %r:3 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {rank = 4} : tensor<8x6xf32> [tensor<8x6xf32>, tensor<6x4xf32>], f32
  return
}

// -----

func.func @dion_rank(%p: tensor<8x6xf32>, %g: tensor<8x6xf32>, %m: tensor<8x6xf32>, %q: tensor<1x6xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{'rank' must be at least 1, got 0}}
  %r:3 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {rank = 0} : tensor<8x6xf32> [tensor<8x6xf32>, tensor<1x6xf32>], f32
  return
}

// -----

func.func @dion_group(%p: tensor<8x6xf32>, %g: tensor<8x6xf32>, %m: tensor<8x6xf32>, %q: tensor<6x6xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{@nowhere does not name a distopt.process_group}}
  %r:3 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {group = @nowhere} : tensor<8x6xf32> [tensor<8x6xf32>, tensor<6x6xf32>], f32
  return
}

// -----

func.func @dion_batch(%p: tensor<8x6xf32>, %g: tensor<8x6xf32>, %m: tensor<8x6xf32>, %q: tensor<6x6xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{'batch' numbers updates whose factors are all-reduced together: it needs a 'group'}}
  %r:3 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {batch = 0} : tensor<8x6xf32> [tensor<8x6xf32>, tensor<6x6xf32>], f32
  return
}

// -----

func.func @dion_fraction(%p: tensor<8x6xf32>, %g: tensor<8x6xf32>, %m: tensor<8x6xf32>, %q: tensor<6x6xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{'rank_fraction' must be in (0, 1], got 1.5}}
  %r:3 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {rank_fraction = 1.5} : tensor<8x6xf32> [tensor<8x6xf32>, tensor<6x6xf32>], f32
  return
}

// -----

func.func @dion_mu(%p: tensor<8x6xf32>, %g: tensor<8x6xf32>, %m: tensor<8x6xf32>, %q: tensor<6x6xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{'mu' must be in [0, 1), got 1}}
  %r:3 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {mu = 1.0} : tensor<8x6xf32> [tensor<8x6xf32>, tensor<6x6xf32>], f32
  return
}

// -----

func.func @all_finite_nothing() -> i1 {
  // expected-error @+1 {{requires at least one input}}
  %ok = "distopt.all_finite"() : () -> i1
  return %ok : i1
}

// -----

func.func @all_finite_missing_group(%g: tensor<4xf32>) -> i1 {
  // expected-error @+1 {{@dp does not name a distopt.process_group}}
  %ok = distopt.all_finite %g on @dp : tensor<4xf32>
  return %ok : i1
}

// -----

func.func @growth_factor(%s: f32, %n: i64, %ok: i1) {
  // expected-error @+1 {{growth_factor must be greater than 1, got 1}}
  %r:2 = distopt.loss_scale_update %s, %n, %ok {growth_factor = 1.0} : f32, i64
  return
}

// -----

func.func @backoff_factor(%s: f32, %n: i64, %ok: i1) {
  // expected-error @+1 {{backoff_factor must be in (0, 1), got 1.5}}
  %r:2 = distopt.loss_scale_update %s, %n, %ok {backoff_factor = 1.5} : f32, i64
  return
}

// -----

func.func @growth_interval(%s: f32, %n: i64, %ok: i1) {
  // expected-error @+1 {{growth_interval must be at least 1, got 0}}
  %r:2 = distopt.loss_scale_update %s, %n, %ok {growth_interval = 0} : f32, i64
  return
}

// -----

func.func @clip_nothing() -> f32 {
  // expected-error @+1 {{requires at least one input}}
  %n = "distopt.clip_grad_norm"() <{max_norm = 1.0 : f64}> : () -> f32
  return %n : f32
}

// -----

func.func @clip_result_types(%g: tensor<4xf32>) {
  // expected-error @+1 {{results 'tensor<8xf32>' differ from the inputs 'tensor<4xf32>'}}
  %c, %n = "distopt.clip_grad_norm"(%g) <{max_norm = 1.0 : f64}> : (tensor<4xf32>) -> (tensor<8xf32>, f32)
  return
}

// -----

func.func @clip_max_norm(%g: tensor<4xf32>) {
  // expected-error @+1 {{max_norm must be positive and finite, got 0}}
  %c, %n = distopt.clip_grad_norm %g max_norm 0.0 : tensor<4xf32> -> f32
  return
}

// -----

func.func @clip_norm_type(%g: tensor<4xf32>) {
  // expected-error @+1 {{norm_type must be positive (inf for the maximum norm), got -2}}
  %c, %n = distopt.clip_grad_norm %g max_norm 1.0 {norm_type = -2.0} : tensor<4xf32> -> f32
  return
}

// -----

func.func @clip_bounds_without_group(%g: tensor<4xf32>) {
  // expected-error @+1 {{tensor_bounds describe shards: they need a group}}
  %c, %n = distopt.clip_grad_norm %g max_norm 1.0 {tensor_bounds = [array<i64: 0, 4>]} : tensor<4xf32> -> f32
  return
}

// -----

distopt.process_group @dp size 2
func.func @clip_bounds_count(%g: tensor<4xf32>) {
  // expected-error @+1 {{has 2 tensor_bounds arrays for 1 inputs}}
  %c, %n = distopt.clip_grad_norm %g max_norm 1.0 on @dp {tensor_bounds = [array<i64: 0, 4>, array<i64: 4, 8>]} : tensor<4xf32> -> f32
  return
}

// -----

distopt.process_group @dp size 2
func.func @clip_bounds_overlap(%g: tensor<4xf32>) {
  // expected-error @+1 {{tensor_bounds of input #0 must be [begin, end) pairs, sorted and disjoint}}
  %c, %n = distopt.clip_grad_norm %g max_norm 1.0 on @dp {tensor_bounds = [array<i64: 0, 5, 4, 8>]} : tensor<4xf32> -> f32
  return
}

// -----

distopt.process_group @dp size 2
func.func @clip_bounds_not_flat(%g: tensor<f32>) {
  // expected-error @+1 {{with tensor_bounds takes 1-d shards; input #0 is 'tensor<f32>'}}
  %c, %n = distopt.clip_grad_norm %g max_norm 1.0 on @dp {tensor_bounds = [array<i64: 0, 1>]} : tensor<f32> -> f32
  return
}

// -----

// expected-error @+1 {{the parts list more than the 2^20 ranks a step may be compiled for}}
distopt.process_group @g size 2 ranks dense<0> : tensor<4611686018427387904x2xi64>

// -----

distopt.process_group @dp size 2
func.func @dion_rows_alone(%p: tensor<4x6xf32>, %g: tensor<4x6xf32>, %m: tensor<4x6xf32>, %q: tensor<4x6xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{row shards take 'row_group' and 'matrix_rows' together}}
  %r:3 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {row_group = @dp} : tensor<4x6xf32>, f32
  return
}

// -----

distopt.process_group @dp size 2
func.func @dion_rows_and_group(%p: tensor<4x6xf32>, %g: tensor<4x6xf32>, %m: tensor<4x6xf32>, %q: tensor<6x6xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{a 'group' (the low-rank sync, which reads the rank's own gradient) and row shards of a reduced one ('row_group') exclude each other}}
  %r:3 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {row_group = @dp, matrix_rows = 8 : i64, group = @dp} : tensor<4x6xf32> [tensor<4x6xf32>, tensor<6x6xf32>], f32
  return
}

// -----

distopt.process_group @dp size 2
func.func @dion_rows_conv(%p: tensor<2x2x3xf32>, %g: tensor<2x2x3xf32>, %m: tensor<2x2x3xf32>, %q: tensor<4x6xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{row shards are blocks of a matrix's rows: the parameter must have rank 2, got 'tensor<2x2x3xf32>'}}
  %r:3 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {row_group = @dp, matrix_rows = 4 : i64} : tensor<2x2x3xf32> [tensor<2x2x3xf32>, tensor<4x6xf32>], f32
  return
}

// -----

distopt.process_group @dp size 2
func.func @dion_rows_short(%p: tensor<4x6xf32>, %g: tensor<4x6xf32>, %m: tensor<4x6xf32>, %q: tensor<6x6xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{row shards: 2 blocks of 4 rows cannot hold 'matrix_rows' = 9}}
  %r:3 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {row_group = @dp, matrix_rows = 9 : i64} : tensor<4x6xf32> [tensor<4x6xf32>, tensor<6x6xf32>], f32
  return
}

// -----

func.func @dion_rows_nowhere(%p: tensor<4x6xf32>, %g: tensor<4x6xf32>, %m: tensor<4x6xf32>, %q: tensor<6x6xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{@nowhere does not name a distopt.process_group}}
  %r:3 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {row_group = @nowhere, matrix_rows = 8 : i64} : tensor<4x6xf32> [tensor<4x6xf32>, tensor<6x6xf32>], f32
  return
}

// -----

distopt.process_group @dp size 2
func.func @dion_rows_none(%p: tensor<2x6xf32>, %g: tensor<2x6xf32>, %m: tensor<2x6xf32>, %q: tensor<0x6xf32>, %lr: f32, %t: i64) {
  // expected-error @+1 {{row shards cut a matrix with elements: 'matrix_rows' and the columns must be at least 1, got 0 and 6}}
  %r:3 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {row_group = @dp, matrix_rows = 0 : i64} : tensor<2x6xf32> [tensor<2x6xf32>, tensor<0x6xf32>], f32
  return
}
