// Averages one conv gradient across 2 ranks: what PowerSGD compresses.
module attributes {distopt.world_size = 2 : i64} {
distopt.process_group @world size 2
func.func @step(%g: tensor<16x8x3x3xf32> {distopt.name = "conv.weight", distopt.role = "grad"})
    -> (tensor<16x8x3x3xf32> {distopt.name = "conv.weight", distopt.role = "grad"}) {
  %r = distopt.all_reduce avg %g on @world : tensor<16x8x3x3xf32>
  return %r : tensor<16x8x3x3xf32>
}
}
