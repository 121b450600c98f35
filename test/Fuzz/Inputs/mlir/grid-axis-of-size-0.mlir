// A shard.grid axis of size 0: upstream's shard collectives divide by it in
// their verifier (SIGFPE), before any distopt code runs; verifyInput rejects
// the grid first (found by distopt-parse-fuzzer).


shard.grid @g(shape = 0)
func.func @all_to_all(%x: tensor<4x4xf32>) -> tensor<1x16xf32> {
  // expected-error @+1 {{'shard.all_to_all' op has no distopt counterpart}}
  %a = shard.all_to_all %x on @g grid_axes = [0] split_axis = 0 concat_axis = 1 : tensor<4x4xf32> -> tensor<1x16xf32>
  return %a : tensor<1x16xf32>
}

