// A mistake the verifier catches: folding 1/N into an f16 reduction as a
// pre-multiplier that f16 cannot represent (it would round to zero and every
// gradient would vanish silently; compare pytorch #190747).
distopt.process_group @world size 4

func.func @step(%g: tensor<1024xf16>) -> tensor<1024xf16> {
  %0 = distopt.all_reduce premul_sum(1.0e-8) %g on @world : tensor<1024xf16>
  return %0 : tensor<1024xf16>
}
