// Hybrid groups --distopt-shard-optimizer refuses (for
// distopt-shard-optimizer-hybrid.mlir): the interface says only that rank r
// holds chunk r mod S, so the groups must lay the chunks out that way.

// The shard group over the mesh's first axis: ranks 0 and 2 share out the
// chunks, not 0 and 1.
distopt.process_group @world size 4
distopt.mesh @m shape [2, 2]
// expected-error @+1 {{--distopt-shard-optimizer: hybrid shards are laid out by world rank (rank r holds chunk r mod 2), so @shard must be runs of consecutive ranks in order (the last axis of a mesh), but world rank 1 is rank 0 of its part 1}}
distopt.process_group @shard size 2 over @m axes [0]
distopt.process_group @replicate size 2 over @m axes [1]
func.func @columns(%p: tensor<4xf32> {distopt.role = "param"}, %g: tensor<4xf32> {distopt.role = "grad"}, %lr: f32, %t: i64) -> tensor<4xf32> {
  %r = distopt.all_reduce avg %g on @world : tensor<4xf32>
  %p1 = distopt.sgd_update %p, %r lr(%lr) step(%t) : tensor<4xf32>, f32
  return %p1 : tensor<4xf32>
}

// -----

// Replicas that do not hold the same chunk.
distopt.process_group @world size 6
distopt.mesh @m shape [3, 2]
distopt.process_group @shard size 2 over @m axes [1]
// expected-error @+1 {{--distopt-shard-optimizer: @replicate must join the ranks holding the same chunk of @shard, but world ranks 0 and 4 are in different parts}}
distopt.process_group @replicate size 3 ranks dense<[[0, 2, 5], [1, 3, 4]]> : tensor<2x3xi64>
func.func @crossed(%p: tensor<4xf32> {distopt.role = "param"}, %g: tensor<4xf32> {distopt.role = "grad"}, %lr: f32, %t: i64) -> tensor<4xf32> {
  %r = distopt.all_reduce avg %g on @world : tensor<4xf32>
  %p1 = distopt.sgd_update %p, %r lr(%lr) step(%t) : tensor<4xf32>, f32
  return %p1 : tensor<4xf32>
}

// -----

distopt.process_group @world size 4
distopt.mesh @m shape [2, 2]
distopt.process_group @shard size 2 over @m axes [1]
// expected-error @+1 {{--distopt-shard-optimizer: @replicate joins ranks holding different chunks of @shard (world rank 1)}}
distopt.process_group @replicate size 2 ranks dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>
func.func @same_part(%p: tensor<4xf32> {distopt.role = "param"}, %g: tensor<4xf32> {distopt.role = "grad"}, %lr: f32, %t: i64) -> tensor<4xf32> {
  %r = distopt.all_reduce avg %g on @world : tensor<4xf32>
  %p1 = distopt.sgd_update %p, %r lr(%lr) step(%t) : tensor<4xf32>, f32
  return %p1 : tensor<4xf32>
}

// -----

// Groups of another world than the gradients'.
distopt.process_group @world size 8
distopt.mesh @m shape [2, 2]
// expected-error @+1 {{--distopt-shard-optimizer: @shard is part of a world of 4 ranks, but the gradients are reduced over 8}}
distopt.process_group @shard size 2 over @m axes [1]
distopt.process_group @replicate size 2 over @m axes [0]
func.func @other_world(%p: tensor<4xf32> {distopt.role = "param"}, %g: tensor<4xf32> {distopt.role = "grad"}, %lr: f32, %t: i64) -> tensor<4xf32> {
  %r = distopt.all_reduce avg %g on @world : tensor<4xf32>
  %p1 = distopt.sgd_update %p, %r lr(%lr) step(%t) : tensor<4xf32>, f32
  return %p1 : tensor<4xf32>
}

// -----

distopt.process_group @world size 4
// expected-error @+1 {{--distopt-shard-optimizer: shard-group=shard names no distopt.process_group (run --distopt-hybrid-mesh first)}}
func.func @undeclared(%p: tensor<4xf32> {distopt.role = "param"}, %g: tensor<4xf32> {distopt.role = "grad"}, %lr: f32, %t: i64) -> tensor<4xf32> {
  %r = distopt.all_reduce avg %g on @world : tensor<4xf32>
  %p1 = distopt.sgd_update %p, %r lr(%lr) step(%t) : tensor<4xf32>, f32
  return %p1 : tensor<4xf32>
}
