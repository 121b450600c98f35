// Top-K compressed averaging with error feedback, then SGD with momentum: a
// one-rank step for scripts/gpu-check (the importer makes no top-K steps).
module attributes {distopt.lr = 1.000000e-02 : f64, distopt.model = "topk", distopt.world_size = 1 : i64} {
  distopt.process_group @world size 1
  func.func @step(%w: tensor<96x80xf32> {distopt.name = "w", distopt.role = "param"},
                  %gw: tensor<96x80xf32> {distopt.name = "w", distopt.role = "grad"},
                  %ew: tensor<96x80xf32> {distopt.name = "w.topk_error", distopt.role = "state"},
                  %mw: tensor<96x80xf32> {distopt.name = "w.momentum_buffer", distopt.role = "state"},
                  %lr: f64 {distopt.role = "lr"}, %t: i64 {distopt.role = "step"})
      -> (tensor<96x80xf32> {distopt.name = "w", distopt.role = "param"},
          tensor<96x80xf32> {distopt.name = "w.topk_error", distopt.role = "state"},
          tensor<96x80xf32> {distopt.name = "w.momentum_buffer", distopt.role = "state"}) {
    %sum, %err = distopt.topk_all_reduce avg %gw, %ew on @world density 5.000000e-02 : tensor<96x80xf32>
    %p, %m = distopt.sgd_update %w, %sum state(%mw) lr(%lr) step(%t) {momentum = 0.9} : tensor<96x80xf32>, f64
    return %p, %err, %m : tensor<96x80xf32>, tensor<96x80xf32>, tensor<96x80xf32>
  }
}
