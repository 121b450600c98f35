// A result named as argument "w" but of half its size: the runtime would
// copy it into w's buffer as if it were w (errors.test).
distopt.process_group @world size 1
func.func @step(%p: tensor<1024xf32> {distopt.role = "param", distopt.name = "w"},
                %g: tensor<1024xf32> {distopt.role = "grad", distopt.name = "w"},
                %lr: f32 {distopt.role = "lr"}, %t: i64 {distopt.role = "step"})
    -> (tensor<512xf32> {distopt.name = "w", distopt.role = "param"}) {
  %avg = distopt.all_reduce avg %g on @world : tensor<1024xf32>
  %p1 = distopt.sgd_update %p, %avg lr(%lr) step(%t) : tensor<1024xf32>, f32
  %half = tensor.extract_slice %p1[0] [512] [1] : tensor<1024xf32> to tensor<512xf32>
  return %half : tensor<512xf32>
}
