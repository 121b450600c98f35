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

//
// The roles say what a driver passes and feeds back (docs/step-abi.md); the
// loss scale and its growth tracker are scalar state, starting from 2^16
// and 0 (distopt.value) and saved in checkpoints.

func.func @step(%model: tensor<4096xbf16> {distopt.role = "param", distopt.name = "model"},
                %grad: tensor<4096xbf16> {distopt.role = "grad", distopt.name = "model"},
                %main: tensor<4096xf32> {distopt.role = "main_param", distopt.name = "model"},
                %momentum: tensor<4096xf32> {distopt.role = "state", distopt.name = "model.momentum_buffer"},
                %scale: f32 {distopt.role = "state", distopt.name = "loss_scale", distopt.value = 65536.0 : f64},
                %tracker: i64 {distopt.role = "state", distopt.name = "loss_scale_growth_tracker"},
                %lr: f32 {distopt.role = "lr"}, %step: i64 {distopt.role = "step"})
    -> (tensor<4096xbf16> {distopt.role = "param", distopt.name = "model"},
        tensor<4096xf32> {distopt.role = "main_param", distopt.name = "model"},
        tensor<4096xf32> {distopt.role = "state", distopt.name = "model.momentum_buffer"},
        f32 {distopt.role = "state", distopt.name = "loss_scale"},
        i64 {distopt.role = "state", distopt.name = "loss_scale_growth_tracker"}) {
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
