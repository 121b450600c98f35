// The step of docs/getting-started.md: one parameter, AdamW. Size 1 here;
// tests change it with sed.
distopt.process_group @world size 1
func.func @step(%p: tensor<1024xf32> {distopt.role = "param", distopt.name = "w"},
                %g: tensor<1024xf32> {distopt.role = "grad", distopt.name = "w"},
                %m: tensor<1024xf32> {distopt.role = "state", distopt.name = "w.exp_avg"},
                %v: tensor<1024xf32> {distopt.role = "state", distopt.name = "w.exp_avg_sq"},
                %lr: f32 {distopt.role = "lr"}, %t: i64 {distopt.role = "step"})
    -> (tensor<1024xf32> {distopt.name = "w", distopt.role = "param"},
        tensor<1024xf32> {distopt.name = "w.exp_avg", distopt.role = "state"},
        tensor<1024xf32> {distopt.name = "w.exp_avg_sq", distopt.role = "state"}) {
  %avg = distopt.all_reduce avg %g on @world : tensor<1024xf32>
  %p1, %m1, %v1 = distopt.adamw_update %p, %avg state(%m, %v) lr(%lr) step(%t) : tensor<1024xf32>, f32
  return %p1, %m1, %v1 : tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>
}
