// A mixed-precision SGD step (NeMo/Apex style) on 4 ranks: the model holds
// bf16 parameters and gradients computed under a dynamic loss scale; the
// optimizer updates fp32 main parameters.
//   1. the bf16 gradient is averaged across ranks, travelling as bf16;
//   2. every rank agrees whether all gradients are finite;
//   3. the fp32 gradient is unscaled; SGD with momentum updates the fp32
//      main parameter; the bf16 model copy is rounded from it;
//   4. on overflow the step is skipped on every rank (state unchanged) and the
//      loss scale backs off; otherwise it grows every 2000 clean steps.

distopt.process_group @world size 4

func.func @step(%model: tensor<4096xbf16>, %grad: tensor<4096xbf16>,
                %main: tensor<4096xf32>, %momentum: tensor<4096xf32>,
                %scale: f32, %tracker: i64, %lr: f32, %step: i64)
    -> (tensor<4096xbf16>, tensor<4096xf32>, tensor<4096xf32>, f32, i64) {
  %reduced = distopt.all_reduce avg %grad on @world : tensor<4096xbf16>
  %finite = distopt.all_finite %reduced on @world : tensor<4096xbf16>

  %g32 = arith.extf %reduced : tensor<4096xbf16> to tensor<4096xf32>
  %g = distopt.unscale %g32 by %scale : tensor<4096xf32>, f32
  %main1, %mom1 = distopt.sgd_update %main, %g state(%momentum) lr(%lr) step(%step)
      {momentum = 0.9, weight_decay = 1.0e-4} : tensor<4096xf32>, f32

  // Skip the step on overflow: every rank took the same decision.
  %main2 = arith.select %finite, %main1, %main : tensor<4096xf32>
  %mom2 = arith.select %finite, %mom1, %momentum : tensor<4096xf32>
  %model1 = arith.truncf %main2 : tensor<4096xf32> to tensor<4096xbf16>

  %scale1, %tracker1 = distopt.loss_scale_update %scale, %tracker, %finite : f32, i64
  return %model1, %main2, %mom2, %scale1, %tracker1
      : tensor<4096xbf16>, tensor<4096xf32>, tensor<4096xf32>, f32, i64
}
