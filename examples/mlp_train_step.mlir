// A whole data-parallel training step on 2 ranks, forward and backward
// included: a two-layer MLP (8 -> 16 -> 4, tanh) learns a fixed "teacher"
// function y = cos-matrix * x by mean squared error, with AdamW.
//
// Each rank draws its own batch of 32 inputs from a formula of (rank, step,
// row, column), so the ranks see different data, as in data parallelism;
// the gradients are averaged across ranks (all_reduce sum, then / 2), the
// parameters updated, and the loss averaged across ranks and returned.
//
// scripts/demo compiles it with several pipelines (plain, ZeRO-1/2/3) and
// runs it with distopt-run; the loss falls the same way in every variant.

#map_x = affine_map<(b, i) -> (b, i)>
#map_bi_h = affine_map<(b, h, i) -> (b, i)>
#map_hi = affine_map<(b, h, i) -> (h, i)>
#map_bh_i = affine_map<(b, h, i) -> (b, h)>
#map_bh = affine_map<(b, h) -> (b, h)>
#map_h = affine_map<(b, h) -> (h)>
#map_scalar = affine_map<(b, h) -> (0)>
#map_bo_h = affine_map<(b, o, h) -> (b, h)>
#map_oh = affine_map<(b, o, h) -> (o, h)>
#map_bo = affine_map<(b, o, h) -> (b, o)>
#map_w_bo = affine_map<(o, h, b) -> (b, o)>
#map_w_bh = affine_map<(o, h, b) -> (b, h)>
#map_w_oh = affine_map<(o, h, b) -> (o, h)>
#map_col_bo = affine_map<(o, b) -> (b, o)>
#map_col_o = affine_map<(o, b) -> (o)>
#map_dh_bo = affine_map<(b, h, o) -> (b, o)>
#map_dh_oh = affine_map<(b, h, o) -> (o, h)>
#map_dh_bh = affine_map<(b, h, o) -> (b, h)>

module attributes {distopt.world_size = 2 : i64, distopt.lr = 1.0e-2 : f64,
                   distopt.model = "mlp-teacher", distopt.num_parameters = 212 : i64} {
  distopt.process_group @world size 2

  func.func @step(
      %w1: tensor<16x8xf32> {distopt.name = "fc1.weight", distopt.role = "param"},
      %b1: tensor<16xf32> {distopt.name = "fc1.bias", distopt.role = "param"},
      %w2: tensor<4x16xf32> {distopt.name = "fc2.weight", distopt.role = "param"},
      %b2: tensor<4xf32> {distopt.name = "fc2.bias", distopt.role = "param"},
      %mw1: tensor<16x8xf32> {distopt.name = "fc1.weight.exp_avg", distopt.role = "state"},
      %vw1: tensor<16x8xf32> {distopt.name = "fc1.weight.exp_avg_sq", distopt.role = "state"},
      %mb1: tensor<16xf32> {distopt.name = "fc1.bias.exp_avg", distopt.role = "state"},
      %vb1: tensor<16xf32> {distopt.name = "fc1.bias.exp_avg_sq", distopt.role = "state"},
      %mw2: tensor<4x16xf32> {distopt.name = "fc2.weight.exp_avg", distopt.role = "state"},
      %vw2: tensor<4x16xf32> {distopt.name = "fc2.weight.exp_avg_sq", distopt.role = "state"},
      %mb2: tensor<4xf32> {distopt.name = "fc2.bias.exp_avg", distopt.role = "state"},
      %vb2: tensor<4xf32> {distopt.name = "fc2.bias.exp_avg_sq", distopt.role = "state"},
      %lr: f32 {distopt.role = "lr"}, %t: i64 {distopt.role = "step"})
      -> (tensor<16x8xf32> {distopt.name = "fc1.weight", distopt.role = "param"},
          tensor<16xf32> {distopt.name = "fc1.bias", distopt.role = "param"},
          tensor<4x16xf32> {distopt.name = "fc2.weight", distopt.role = "param"},
          tensor<4xf32> {distopt.name = "fc2.bias", distopt.role = "param"},
          tensor<16x8xf32> {distopt.name = "fc1.weight.exp_avg", distopt.role = "state"},
          tensor<16x8xf32> {distopt.name = "fc1.weight.exp_avg_sq", distopt.role = "state"},
          tensor<16xf32> {distopt.name = "fc1.bias.exp_avg", distopt.role = "state"},
          tensor<16xf32> {distopt.name = "fc1.bias.exp_avg_sq", distopt.role = "state"},
          tensor<4x16xf32> {distopt.name = "fc2.weight.exp_avg", distopt.role = "state"},
          tensor<4x16xf32> {distopt.name = "fc2.weight.exp_avg_sq", distopt.role = "state"},
          tensor<4xf32> {distopt.name = "fc2.bias.exp_avg", distopt.role = "state"},
          tensor<4xf32> {distopt.name = "fc2.bias.exp_avg_sq", distopt.role = "state"},
          tensor<1xf32> {distopt.name = "loss", distopt.role = "loss"}) {
    %zero = arith.constant 0.0 : f32
    %rank = distopt.rank @world : index
    %rank_i = arith.index_cast %rank : index to i64
    %rank_f = arith.sitofp %rank_i : i64 to f32
    %t_f = arith.sitofp %t : i64 to f32

    // This rank's batch: x[b, i] = sin(0.37 (b + 32 rank) + 0.91 i + 0.13 t).
    %xe = tensor.empty() : tensor<32x8xf32>
    %x = linalg.generic {indexing_maps = [#map_x], iterator_types = ["parallel", "parallel"]}
        outs(%xe : tensor<32x8xf32>) {
    ^bb0(%out: f32):
      %b = linalg.index 0 : index
      %i = linalg.index 1 : index
      %bi = arith.index_cast %b : index to i64
      %ii = arith.index_cast %i : index to i64
      %bf = arith.sitofp %bi : i64 to f32
      %if = arith.sitofp %ii : i64 to f32
      %c32 = arith.constant 32.0 : f32
      %c037 = arith.constant 0.37 : f32
      %c091 = arith.constant 0.91 : f32
      %c013 = arith.constant 0.13 : f32
      %row32 = arith.mulf %rank_f, %c32 : f32
      %rowg = arith.addf %bf, %row32 : f32
      %a0 = arith.mulf %rowg, %c037 : f32
      %a1 = arith.mulf %if, %c091 : f32
      %a2 = arith.mulf %t_f, %c013 : f32
      %a01 = arith.addf %a0, %a1 : f32
      %arg = arith.addf %a01, %a2 : f32
      %v = math.sin %arg : f32
      linalg.yield %v : f32
    } -> tensor<32x8xf32>

    // The teacher: y[b, o] = sum_i cos(1.3 o + 0.7 i) x[b, i] / 4.
    %tw_e = tensor.empty() : tensor<4x8xf32>
    %tw = linalg.generic {indexing_maps = [#map_x], iterator_types = ["parallel", "parallel"]}
        outs(%tw_e : tensor<4x8xf32>) {
    ^bb0(%out: f32):
      %o = linalg.index 0 : index
      %i = linalg.index 1 : index
      %oi = arith.index_cast %o : index to i64
      %ii = arith.index_cast %i : index to i64
      %of = arith.sitofp %oi : i64 to f32
      %if = arith.sitofp %ii : i64 to f32
      %c13 = arith.constant 1.3 : f32
      %c07 = arith.constant 0.7 : f32
      %c025 = arith.constant 0.25 : f32
      %p = arith.mulf %of, %c13 : f32
      %q = arith.mulf %if, %c07 : f32
      %s = arith.addf %p, %q : f32
      %c = math.cos %s : f32
      %v = arith.mulf %c, %c025 : f32
      linalg.yield %v : f32
    } -> tensor<4x8xf32>
    %ye = tensor.empty() : tensor<32x4xf32>
    %y0 = linalg.fill ins(%zero : f32) outs(%ye : tensor<32x4xf32>) -> tensor<32x4xf32>
    %y = linalg.generic {indexing_maps = [#map_bi_h, #map_hi, #map_bh_i],
                         iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%x, %tw : tensor<32x8xf32>, tensor<4x8xf32>) outs(%y0 : tensor<32x4xf32>) {
    ^bb0(%a: f32, %w: f32, %acc: f32):
      %m = arith.mulf %a, %w : f32
      %s = arith.addf %acc, %m : f32
      linalg.yield %s : f32
    } -> tensor<32x4xf32>

    // Forward: h = tanh(x w1^T + b1); out = h w2^T + b2.
    %he = tensor.empty() : tensor<32x16xf32>
    %hb = linalg.generic {indexing_maps = [#map_h, #map_bh], iterator_types = ["parallel", "parallel"]}
        ins(%b1 : tensor<16xf32>) outs(%he : tensor<32x16xf32>) {
    ^bb0(%bias: f32, %out: f32):
      linalg.yield %bias : f32
    } -> tensor<32x16xf32>
    %pre1 = linalg.generic {indexing_maps = [#map_bi_h, #map_hi, #map_bh_i],
                            iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%x, %w1 : tensor<32x8xf32>, tensor<16x8xf32>) outs(%hb : tensor<32x16xf32>) {
    ^bb0(%a: f32, %w: f32, %acc: f32):
      %m = arith.mulf %a, %w : f32
      %s = arith.addf %acc, %m : f32
      linalg.yield %s : f32
    } -> tensor<32x16xf32>
    %h = math.tanh %pre1 : tensor<32x16xf32>
    %oe = tensor.empty() : tensor<32x4xf32>
    %ob = linalg.generic {indexing_maps = [#map_h, #map_bh], iterator_types = ["parallel", "parallel"]}
        ins(%b2 : tensor<4xf32>) outs(%oe : tensor<32x4xf32>) {
    ^bb0(%bias: f32, %out: f32):
      linalg.yield %bias : f32
    } -> tensor<32x4xf32>
    %out = linalg.generic {indexing_maps = [#map_bo_h, #map_oh, #map_bo],
                           iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%h, %w2 : tensor<32x16xf32>, tensor<4x16xf32>) outs(%ob : tensor<32x4xf32>) {
    ^bb0(%a: f32, %w: f32, %acc: f32):
      %m = arith.mulf %a, %w : f32
      %s = arith.addf %acc, %m : f32
      linalg.yield %s : f32
    } -> tensor<32x4xf32>

    // Loss: mean squared error over the 32 x 4 outputs of this rank.
    %diff = arith.subf %out, %y : tensor<32x4xf32>
    %le = tensor.empty() : tensor<1xf32>
    %l0 = linalg.fill ins(%zero : f32) outs(%le : tensor<1xf32>) -> tensor<1xf32>
    %lsum = linalg.generic {indexing_maps = [#map_bh, #map_scalar],
                            iterator_types = ["reduction", "reduction"]}
        ins(%diff : tensor<32x4xf32>) outs(%l0 : tensor<1xf32>) {
    ^bb0(%d: f32, %acc: f32):
      %sq = arith.mulf %d, %d : f32
      %s = arith.addf %acc, %sq : f32
      linalg.yield %s : f32
    } -> tensor<1xf32>
    %count = arith.constant dense<128.0> : tensor<1xf32>
    %loss_local = arith.divf %lsum, %count : tensor<1xf32>

    // Backward. dout = 2 (out - y) / 128.
    %two_over = arith.constant dense<0.015625> : tensor<32x4xf32>
    %dout = arith.mulf %diff, %two_over : tensor<32x4xf32>
    // dw2[o, h] = sum_b dout[b, o] h[b, h]; db2[o] = sum_b dout[b, o].
    %dw2e = tensor.empty() : tensor<4x16xf32>
    %dw20 = linalg.fill ins(%zero : f32) outs(%dw2e : tensor<4x16xf32>) -> tensor<4x16xf32>
    %dw2 = linalg.generic {indexing_maps = [#map_w_bo, #map_w_bh, #map_w_oh],
                           iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%dout, %h : tensor<32x4xf32>, tensor<32x16xf32>) outs(%dw20 : tensor<4x16xf32>) {
    ^bb0(%d: f32, %a: f32, %acc: f32):
      %m = arith.mulf %d, %a : f32
      %s = arith.addf %acc, %m : f32
      linalg.yield %s : f32
    } -> tensor<4x16xf32>
    %db2e = tensor.empty() : tensor<4xf32>
    %db20 = linalg.fill ins(%zero : f32) outs(%db2e : tensor<4xf32>) -> tensor<4xf32>
    %db2 = linalg.generic {indexing_maps = [#map_col_bo, #map_col_o],
                           iterator_types = ["parallel", "reduction"]}
        ins(%dout : tensor<32x4xf32>) outs(%db20 : tensor<4xf32>) {
    ^bb0(%d: f32, %acc: f32):
      %s = arith.addf %acc, %d : f32
      linalg.yield %s : f32
    } -> tensor<4xf32>
    // dpre[b, h] = (sum_o dout[b, o] w2[o, h]) (1 - h[b, h]^2).
    %dhe = tensor.empty() : tensor<32x16xf32>
    %dh0 = linalg.fill ins(%zero : f32) outs(%dhe : tensor<32x16xf32>) -> tensor<32x16xf32>
    %dh = linalg.generic {indexing_maps = [#map_dh_bo, #map_dh_oh, #map_dh_bh],
                          iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%dout, %w2 : tensor<32x4xf32>, tensor<4x16xf32>) outs(%dh0 : tensor<32x16xf32>) {
    ^bb0(%d: f32, %w: f32, %acc: f32):
      %m = arith.mulf %d, %w : f32
      %s = arith.addf %acc, %m : f32
      linalg.yield %s : f32
    } -> tensor<32x16xf32>
    %one = arith.constant dense<1.0> : tensor<32x16xf32>
    %hh = arith.mulf %h, %h : tensor<32x16xf32>
    %dtanh = arith.subf %one, %hh : tensor<32x16xf32>
    %dpre = arith.mulf %dh, %dtanh : tensor<32x16xf32>
    // dw1[h, i] = sum_b dpre[b, h] x[b, i]; db1[h] = sum_b dpre[b, h].
    %dw1e = tensor.empty() : tensor<16x8xf32>
    %dw10 = linalg.fill ins(%zero : f32) outs(%dw1e : tensor<16x8xf32>) -> tensor<16x8xf32>
    %dw1 = linalg.generic {indexing_maps = [#map_w_bo, #map_w_bh, #map_w_oh],
                           iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%dpre, %x : tensor<32x16xf32>, tensor<32x8xf32>) outs(%dw10 : tensor<16x8xf32>) {
    ^bb0(%d: f32, %a: f32, %acc: f32):
      %m = arith.mulf %d, %a : f32
      %s = arith.addf %acc, %m : f32
      linalg.yield %s : f32
    } -> tensor<16x8xf32>
    %db1e = tensor.empty() : tensor<16xf32>
    %db10 = linalg.fill ins(%zero : f32) outs(%db1e : tensor<16xf32>) -> tensor<16xf32>
    %db1 = linalg.generic {indexing_maps = [#map_col_bo, #map_col_o],
                           iterator_types = ["parallel", "reduction"]}
        ins(%dpre : tensor<32x16xf32>) outs(%db10 : tensor<16xf32>) {
    ^bb0(%d: f32, %acc: f32):
      %s = arith.addf %acc, %d : f32
      linalg.yield %s : f32
    } -> tensor<16xf32>

    // Data parallelism: average the gradients (and the loss) over the ranks.
    %sw1 = distopt.all_reduce sum %dw1 on @world : tensor<16x8xf32>
    %nw1 = arith.constant dense<2.0> : tensor<16x8xf32>
    %gw1 = arith.divf %sw1, %nw1 : tensor<16x8xf32>
    %sb1 = distopt.all_reduce sum %db1 on @world : tensor<16xf32>
    %nb1 = arith.constant dense<2.0> : tensor<16xf32>
    %gb1 = arith.divf %sb1, %nb1 : tensor<16xf32>
    %sw2 = distopt.all_reduce sum %dw2 on @world : tensor<4x16xf32>
    %nw2 = arith.constant dense<2.0> : tensor<4x16xf32>
    %gw2 = arith.divf %sw2, %nw2 : tensor<4x16xf32>
    %sb2 = distopt.all_reduce sum %db2 on @world : tensor<4xf32>
    %nb2 = arith.constant dense<2.0> : tensor<4xf32>
    %gb2 = arith.divf %sb2, %nb2 : tensor<4xf32>
    %loss = distopt.all_reduce avg %loss_local on @world : tensor<1xf32>

    %w1n, %mw1n, %vw1n = distopt.adamw_update %w1, %gw1 state(%mw1, %vw1) lr(%lr) step(%t) : tensor<16x8xf32>, f32
    %b1n, %mb1n, %vb1n = distopt.adamw_update %b1, %gb1 state(%mb1, %vb1) lr(%lr) step(%t) : tensor<16xf32>, f32
    %w2n, %mw2n, %vw2n = distopt.adamw_update %w2, %gw2 state(%mw2, %vw2) lr(%lr) step(%t) : tensor<4x16xf32>, f32
    %b2n, %mb2n, %vb2n = distopt.adamw_update %b2, %gb2 state(%mb2, %vb2) lr(%lr) step(%t) : tensor<4xf32>, f32
    return %w1n, %b1n, %w2n, %b2n, %mw1n, %vw1n, %mb1n, %vb1n, %mw2n, %vw2n, %mb2n, %vb2n, %loss
        : tensor<16x8xf32>, tensor<16xf32>, tensor<4x16xf32>, tensor<4xf32>,
          tensor<16x8xf32>, tensor<16x8xf32>, tensor<16xf32>, tensor<16xf32>,
          tensor<4x16xf32>, tensor<4x16xf32>, tensor<4xf32>, tensor<4xf32>, tensor<1xf32>
  }
}
