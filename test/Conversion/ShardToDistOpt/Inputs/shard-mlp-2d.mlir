// The input of test/Integration/shard-to-distopt.test: a tensor-parallel MLP
// layer and its data-parallel gradient on a 2x2 grid (axis 0: data, axis 1:
// tensor), for upstream's --sharding-propagation and --shard-partition.
shard.grid @grid(shape = 2x2)
func.func @mlp(%x: tensor<8x16xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<16x8xf32>) {
  %sx = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %x1 = shard.shard %x to %sx : tensor<8x16xf32>
  %sw1 = shard.sharding @grid split_axes = [[], [1]] : !shard.sharding
  %w11 = shard.shard %w1 to %sw1 : tensor<16x8xf32>
  %sw2 = shard.sharding @grid split_axes = [[1]] : !shard.sharding
  %w21 = shard.shard %w2 to %sw2 : tensor<8x16xf32>
  %c0 = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<8x8xf32>
  %f0 = linalg.fill ins(%c0 : f32) outs(%e0 : tensor<8x8xf32>) -> tensor<8x8xf32>
  %h = linalg.matmul ins(%x1, %w11 : tensor<8x16xf32>, tensor<16x8xf32>) outs(%f0 : tensor<8x8xf32>) -> tensor<8x8xf32>
  %e1 = tensor.empty() : tensor<8x16xf32>
  %f1 = linalg.fill ins(%c0 : f32) outs(%e1 : tensor<8x16xf32>) -> tensor<8x16xf32>
  %z = linalg.matmul ins(%h, %w21 : tensor<8x8xf32>, tensor<8x16xf32>) outs(%f1 : tensor<8x16xf32>) -> tensor<8x16xf32>
  %sz = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %z1 = shard.shard %z to %sz : tensor<8x16xf32>
  // The gradient of W1 (X^T H, a stand-in): the batch is split over the
  // data axis, so its contraction is a data-parallel reduction.
  %e2 = tensor.empty() : tensor<16x8xf32>
  %f2 = linalg.fill ins(%c0 : f32) outs(%e2 : tensor<16x8xf32>) -> tensor<16x8xf32>
  %e3 = tensor.empty() : tensor<16x8xf32>
  %xt = linalg.transpose ins(%x1 : tensor<8x16xf32>) outs(%e3 : tensor<16x8xf32>) permutation = [1, 0]
  %g = linalg.matmul ins(%xt, %h : tensor<16x8xf32>, tensor<8x8xf32>) outs(%f2 : tensor<16x8xf32>) -> tensor<16x8xf32>
  %sg = shard.sharding @grid split_axes = [[], [1]] : !shard.sharding
  %g1 = shard.shard %g to %sg : tensor<16x8xf32>
  return %z1, %g1 : tensor<8x16xf32>, tensor<16x8xf32>
}
