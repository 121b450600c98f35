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

#layout = [{name = "w1", offset = 0 : i64, shape = array<i64: 64, 32>},
           {name = "b1", offset = 2048 : i64, shape = array<i64: 64>},
           {name = "w2", offset = 2112 : i64, shape = array<i64: 10, 64>},
           {name = "b2", offset = 2752 : i64, shape = array<i64: 10>}]

//
// The parameters reach their update through a pack and a shard, so the
// roles cannot be inferred (--distopt-infer-step-roles): they are written
// out, and the sharded state says which parameters it holds, so that a
// checkpoint stores them whole (docs/step-abi.md).

func.func @step(
    %w1: tensor<64x32xf32> {distopt.role = "param", distopt.name = "w1"},
    %b1: tensor<64xf32> {distopt.role = "param", distopt.name = "b1"},
    %w2: tensor<10x64xf32> {distopt.role = "param", distopt.name = "w2"},
    %b2: tensor<10xf32> {distopt.role = "param", distopt.name = "b2"},
    %gw1: tensor<64x32xf32> {distopt.role = "grad", distopt.name = "w1"},
    %gb1: tensor<64xf32> {distopt.role = "grad", distopt.name = "b1"},
    %gw2: tensor<10x64xf32> {distopt.role = "grad", distopt.name = "w2"},
    %gb2: tensor<10xf32> {distopt.role = "grad", distopt.name = "b2"},
    %m: tensor<1384xf32> {distopt.role = "state", distopt.name = "flat0.exp_avg",
                          distopt.shard_of = 2768, distopt.layout = #layout},
    %v: tensor<1384xf32> {distopt.role = "state", distopt.name = "flat0.exp_avg_sq",
                          distopt.shard_of = 2768, distopt.layout = #layout},
    %lr: f32 {distopt.role = "lr"}, %step: i64 {distopt.role = "step"})
    -> (tensor<64x32xf32> {distopt.role = "param", distopt.name = "w1"},
        tensor<64xf32> {distopt.role = "param", distopt.name = "b1"},
        tensor<10x64xf32> {distopt.role = "param", distopt.name = "w2"},
        tensor<10xf32> {distopt.role = "param", distopt.name = "b2"},
        tensor<1384xf32> {distopt.role = "state", distopt.name = "flat0.exp_avg"},
        tensor<1384xf32> {distopt.role = "state", distopt.name = "flat0.exp_avg_sq"},
        f32) {
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
