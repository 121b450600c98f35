// The input of test/Conversion/ShardToDistOpt/convert-shard-to-distopt.mlir: a matmul with
// its contraction dimension split over a 1-D grid of 4 (upstream syntax).
shard.grid @grid(shape = 4)
func.func @matmul(%a: tensor<8x16xf32>, %b: tensor<16x8xf32>) -> tensor<8x8xf32> {
  %s0 = shard.sharding @grid split_axes = [[], [0]] : !shard.sharding
  %a1 = shard.shard %a to %s0 : tensor<8x16xf32>
  %s1 = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %b1 = shard.shard %b to %s1 : tensor<16x8xf32>
  %z = tensor.empty() : tensor<8x8xf32>
  %c0 = arith.constant 0.0 : f32
  %f = linalg.fill ins(%c0 : f32) outs(%z : tensor<8x8xf32>) -> tensor<8x8xf32>
  %m = linalg.matmul ins(%a1, %b1 : tensor<8x16xf32>, tensor<16x8xf32>) outs(%f : tensor<8x8xf32>) -> tensor<8x8xf32>
  %s2 = shard.sharding @grid split_axes = [[]] : !shard.sharding
  %r = shard.shard %m to %s2 : tensor<8x8xf32>
  return %r : tensor<8x8xf32>
}
