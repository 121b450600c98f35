// The same MLP step with ZeRO-2 flat sharding (DeepSpeed/Megatron style) on
// 2 ranks: gradients are flattened into one bucket, reduce-scattered so each
// rank receives the averaged half it owns, the optimizer state exists only
// for that half, and the updated halves are all-gathered into full
// parameters. Clipping combines the partial norms across the group, so each
// element counts once.
//
// Flat layout as in mlp_adamw_step.mlir, in forward order: w1 at 0, b1 at
// 2048, w2 at 2112, b2 at 2752; 2762 elements, padded to 2768 (a multiple of
// the group size, and of 16 elements).

distopt.process_group @world size 2

func.func @step(
    %w1: tensor<64x32xf32>, %b1: tensor<64xf32>, %w2: tensor<10x64xf32>, %b2: tensor<10xf32>,
    %gw1: tensor<64x32xf32>, %gb1: tensor<64xf32>, %gw2: tensor<10x64xf32>, %gb2: tensor<10xf32>,
    %m: tensor<1384xf32>, %v: tensor<1384xf32>, %lr: f32, %step: i64)
    -> (tensor<64x32xf32>, tensor<64xf32>, tensor<10x64xf32>, tensor<10xf32>,
        tensor<1384xf32>, tensor<1384xf32>, f32) {
  %grads = distopt.bucket_pack %gw1, %gb1, %gw2, %gb2
      : tensor<64x32xf32>, tensor<64xf32>, tensor<10x64xf32>, tensor<10xf32> -> tensor<2768xf32>
  %my_grads = distopt.reduce_scatter avg %grads on @world : tensor<2768xf32> -> tensor<1384xf32>
  %clipped, %norm = distopt.clip_grad_norm %my_grads max_norm 1.0 on @world
      : tensor<1384xf32> -> f32

  %params = distopt.bucket_pack %w1, %b1, %w2, %b2
      : tensor<64x32xf32>, tensor<64xf32>, tensor<10x64xf32>, tensor<10xf32> -> tensor<2768xf32>
  %my_params = distopt.shard_slice %params on @world : tensor<2768xf32> -> tensor<1384xf32>
  %p1, %m1, %v1 = distopt.adamw_update %my_params, %clipped state(%m, %v) lr(%lr) step(%step)
      : tensor<1384xf32>, f32

  %all = distopt.all_gather %p1 on @world : tensor<1384xf32> -> tensor<2768xf32>
  %w1n, %b1n, %w2n, %b2n = distopt.bucket_unpack %all
      : tensor<2768xf32> -> tensor<64x32xf32>, tensor<64xf32>, tensor<10x64xf32>, tensor<10xf32>
  return %w1n, %b1n, %w2n, %b2n, %m1, %v1, %norm
      : tensor<64x32xf32>, tensor<64xf32>, tensor<10x64xf32>, tensor<10xf32>,
        tensor<1384xf32>, tensor<1384xf32>, f32
}
