// The end of a data-parallel training step for a two-layer MLP
// (784 -> 64 -> 10 is scaled down here to 32 -> 64 -> 10) on 2 ranks, written
// by hand the way PyTorch DDP + AdamW runs it:
//   1. gradients packed into one bucket, in reverse parameter order (DDP);
//   2. one all_reduce that averages (the 1/N folded into the reduction);
//   3. the bucket unpacked, the global gradient norm clipped to 1.0;
//   4. torch.optim.AdamW(lr, betas=(0.9, 0.999), weight_decay=0.01) per tensor.
//
// Bucket layout (alignment 64 bytes = 16 f32): b2 at 0, w2 at 16, b1 at 656,
// w1 at 720; 2768 elements in all.

distopt.process_group @world size 2

func.func @step(
    %w1: tensor<64x32xf32>, %b1: tensor<64xf32>, %w2: tensor<10x64xf32>, %b2: tensor<10xf32>,
    %gw1: tensor<64x32xf32>, %gb1: tensor<64xf32>, %gw2: tensor<10x64xf32>, %gb2: tensor<10xf32>,
    %mw1: tensor<64x32xf32>, %mb1: tensor<64xf32>, %mw2: tensor<10x64xf32>, %mb2: tensor<10xf32>,
    %vw1: tensor<64x32xf32>, %vb1: tensor<64xf32>, %vw2: tensor<10x64xf32>, %vb2: tensor<10xf32>,
    %lr: f32, %step: i64)
    -> (tensor<64x32xf32>, tensor<64xf32>, tensor<10x64xf32>, tensor<10xf32>,
        tensor<64x32xf32>, tensor<64xf32>, tensor<10x64xf32>, tensor<10xf32>,
        tensor<64x32xf32>, tensor<64xf32>, tensor<10x64xf32>, tensor<10xf32>, f32) {
  %bucket = distopt.bucket_pack %gb2, %gw2, %gb1, %gw1
      : tensor<10xf32>, tensor<10x64xf32>, tensor<64xf32>, tensor<64x32xf32> -> tensor<2768xf32>
  %reduced = distopt.all_reduce avg %bucket on @world : tensor<2768xf32>
  %rb2, %rw2, %rb1, %rw1 = distopt.bucket_unpack %reduced
      : tensor<2768xf32> -> tensor<10xf32>, tensor<10x64xf32>, tensor<64xf32>, tensor<64x32xf32>

  // Every rank holds the whole reduced gradient, so the norm is local.
  %cw1, %cb1, %cw2, %cb2, %norm = distopt.clip_grad_norm %rw1, %rb1, %rw2, %rb2 max_norm 1.0
      : tensor<64x32xf32>, tensor<64xf32>, tensor<10x64xf32>, tensor<10xf32> -> f32

  %w1n, %mw1n, %vw1n = distopt.adamw_update %w1, %cw1 state(%mw1, %vw1) lr(%lr) step(%step)
      : tensor<64x32xf32>, f32
  %b1n, %mb1n, %vb1n = distopt.adamw_update %b1, %cb1 state(%mb1, %vb1) lr(%lr) step(%step)
      : tensor<64xf32>, f32
  %w2n, %mw2n, %vw2n = distopt.adamw_update %w2, %cw2 state(%mw2, %vw2) lr(%lr) step(%step)
      : tensor<10x64xf32>, f32
  %b2n, %mb2n, %vb2n = distopt.adamw_update %b2, %cb2 state(%mb2, %vb2) lr(%lr) step(%step)
      : tensor<10xf32>, f32
  return %w1n, %b1n, %w2n, %b2n, %mw1n, %mb1n, %mw2n, %mb2n, %vw1n, %vb1n, %vw2n, %vb2n, %norm
      : tensor<64x32xf32>, tensor<64xf32>, tensor<10x64xf32>, tensor<10xf32>,
        tensor<64x32xf32>, tensor<64xf32>, tensor<10x64xf32>, tensor<10xf32>,
        tensor<64x32xf32>, tensor<64xf32>, tensor<10x64xf32>, tensor<10xf32>, f32
}
