// RUN: distopt-opt %s -split-input-file --distopt-verify-collectives -verify-diagnostics

// A correct step passes and is unchanged.
module attributes {distopt.world_size = 4 : i64} {
  distopt.process_group @dp size 4
  func.func @ok(%p: tensor<8xf32> {distopt.role = "param"}, %g: tensor<8xf32> {distopt.role = "grad", distopt.name = "w"},
                %h: tensor<4xf32> {distopt.role = "grad", distopt.name = "b"}, %lr: f32, %t: i64) -> (tensor<8xf32>, tensor<4xf32>) {
    %b = distopt.bucket_pack %g, %h : tensor<8xf32>, tensor<4xf32> -> tensor<20xf32>
    %tok = distopt.all_reduce_start avg %b on @dp : tensor<20xf32> -> !distopt.token<tensor<20xf32>>
    %r = distopt.wait %tok : !distopt.token<tensor<20xf32>>
    %rg, %rh = distopt.bucket_unpack %r : tensor<20xf32> -> tensor<8xf32>, tensor<4xf32>
    %p1 = distopt.sgd_update %p, %rg lr(%lr) step(%t) : tensor<8xf32>, f32
    %h1 = distopt.sgd_update %rh, %rh lr(%lr) step(%t) : tensor<4xf32>, f32
    return %p1, %h1 : tensor<8xf32>, tensor<4xf32>
  }
}

// -----

distopt.process_group @dp size 4
func.func @rank_dependent_if(%g: tensor<8xf32>) -> tensor<8xf32> {
  // expected-note @+1 {{the rank it depends on}}
  %r = distopt.rank @dp : index
  %c0 = arith.constant 0 : index
  %is0 = arith.cmpi eq, %r, %c0 : index
  // expected-note @+1 {{the control flow}}
  %out = scf.if %is0 -> tensor<8xf32> {
    // expected-error @+1 {{'distopt.all_reduce' communicates under control flow that depends on the rank: ranks would disagree on whether it runs}}
    %s = distopt.all_reduce sum %g on @dp : tensor<8xf32>
    scf.yield %s : tensor<8xf32>
  } else {
    scf.yield %g : tensor<8xf32>
  }
  return %out : tensor<8xf32>
}

// -----

distopt.process_group @dp size 4
func.func @rank_dependent_loop(%g: tensor<8xf32>) -> tensor<8xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // expected-note @+1 {{the rank it depends on}}
  %r = distopt.rank @dp : index
  // expected-note @+1 {{the control flow}}
  %out = scf.for %i = %c0 to %r step %c1 iter_args(%acc = %g) -> tensor<8xf32> {
    // expected-error @+1 {{communicates under control flow that depends on the rank}}
    %s = distopt.all_reduce sum %acc on @dp : tensor<8xf32>
    scf.yield %s : tensor<8xf32>
  }
  return %out : tensor<8xf32>
}

// -----

// A loop whose trip count does not depend on the rank is fine, even if the
// data does.
distopt.process_group @dp size 4
func.func @rank_dependent_data(%g: tensor<8xf32>) -> tensor<8xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %out = scf.for %i = %c0 to %c3 step %c1 iter_args(%acc = %g) -> tensor<8xf32> {
    %s = distopt.all_reduce sum %acc on @dp : tensor<8xf32>
    scf.yield %s : tensor<8xf32>
  }
  return %out : tensor<8xf32>
}

// -----

distopt.process_group @dp size 4
func.func @inside_owned_by(%g: tensor<8xf32>) -> tensor<8xf32> {
  %out = distopt.owned_by @dp rank 1 otherwise(%g) : tensor<8xf32> {
    // expected-error @+1 {{'distopt.broadcast' communicates inside distopt.owned_by: only rank 1 runs it and the other ranks never join}}
    %s = distopt.broadcast %g on @dp root 1 : tensor<8xf32>
    distopt.yield %s : tensor<8xf32>
  }
  return %out : tensor<8xf32>
}

// -----

distopt.process_group @dp size 4
func.func @unstructured(%g: tensor<8xf32>) -> tensor<8xf32> {
  %r = distopt.rank @dp : index
  %c0 = arith.constant 0 : index
  %is0 = arith.cmpi eq, %r, %c0 : index
  cf.cond_br %is0, ^reduce, ^done(%g : tensor<8xf32>)
^reduce:
  // expected-error @+1 {{'distopt.all_reduce' communicates after a branch that depends on the rank}}
  %s = distopt.all_reduce sum %g on @dp : tensor<8xf32>
  cf.br ^done(%s : tensor<8xf32>)
^done(%out: tensor<8xf32>):
  return %out : tensor<8xf32>
}

// -----

distopt.process_group @dp size 4
// expected-error @+1 {{gradient 'w' (argument #1) is never reduced across ranks}}
func.func @never_reduced(%p: tensor<8xf32>, %g: tensor<8xf32> {distopt.role = "grad", distopt.name = "w"}) -> tensor<8xf32> {
  return %g : tensor<8xf32>
}

// -----

distopt.process_group @dp size 4
func.func @unreduced_update(%p: tensor<8xf32>, %g: tensor<8xf32> {distopt.role = "grad", distopt.name = "w"},
                            %h: tensor<8xf32> {distopt.role = "grad", distopt.name = "b"}, %lr: f32, %t: i64) -> (tensor<8xf32>, tensor<8xf32>) {
  %r = distopt.all_reduce avg %h on @dp : tensor<8xf32>
  // expected-error @+1 {{gradient 'w' reaches the optimizer without being reduced across ranks: replicas would diverge}}
  %p1 = distopt.sgd_update %p, %g lr(%lr) step(%t) : tensor<8xf32>, f32
  %p2 = distopt.sgd_update %p, %r lr(%lr) step(%t) : tensor<8xf32>, f32
  return %p1, %p2 : tensor<8xf32>, tensor<8xf32>
}

// -----

distopt.process_group @dp size 4
func.func @reduced_twice(%p: tensor<8xf32>, %g: tensor<8xf32> {distopt.role = "grad", distopt.name = "w"},
                         %h: tensor<4xf32> {distopt.role = "grad", distopt.name = "b"}, %lr: f32, %t: i64) -> (tensor<8xf32>, tensor<4xf32>) {
  %b = distopt.bucket_pack %g, %h : tensor<8xf32>, tensor<4xf32> -> tensor<20xf32>
  %r = distopt.all_reduce avg %b on @dp : tensor<20xf32>
  %rg, %rh = distopt.bucket_unpack %r : tensor<20xf32> -> tensor<8xf32>, tensor<4xf32>
  %again = distopt.all_reduce avg %rg on @dp : tensor<8xf32>
  // expected-error @+1 {{gradient 'w' is reduced 2 times before the optimizer}}
  %p1 = distopt.sgd_update %p, %again lr(%lr) step(%t) : tensor<8xf32>, f32
  // Its bucket neighbour is reduced once: no error for 'b'.
  %h1 = distopt.sgd_update %rh, %rh lr(%lr) step(%t) : tensor<4xf32>, f32
  return %p1, %h1 : tensor<8xf32>, tensor<4xf32>
}

// -----

// On one rank the reductions fold away and nothing can diverge.
module attributes {distopt.world_size = 1 : i64} {
  distopt.process_group @single size 1
  func.func @single_rank(%p: tensor<8xf32>, %g: tensor<8xf32> {distopt.role = "grad", distopt.name = "w"}, %lr: f32, %t: i64) -> tensor<8xf32> {
    %p1 = distopt.sgd_update %p, %g lr(%lr) step(%t) : tensor<8xf32>, f32
    return %p1 : tensor<8xf32>
  }
}

// -----

distopt.process_group @dp size 4
func.func @token_not_waited(%g: tensor<8xf32>) {
  // expected-error @+1 {{the token of 'distopt.all_reduce_start' must be waited on exactly once, found 0 distopt.wait and 0 uses}}
  %t = distopt.all_reduce_start sum %g on @dp : tensor<8xf32> -> !distopt.token<tensor<8xf32>>
  return
}

// -----

distopt.process_group @dp size 4
func.func @token_waited_twice(%g: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  // expected-error @+1 {{must be waited on exactly once, found 2 distopt.wait and 2 uses}}
  %t = distopt.all_reduce_start sum %g on @dp : tensor<8xf32> -> !distopt.token<tensor<8xf32>>
  %a = distopt.wait %t : !distopt.token<tensor<8xf32>>
  %b = distopt.wait %t : !distopt.token<tensor<8xf32>>
  return %a, %b : tensor<8xf32>, tensor<8xf32>
}

// -----

// Every group spans the step's world: a plain group is a world of its own
// size; a smaller one is declared over a mesh or with its ranks.
module attributes {distopt.world_size = 4 : i64} {
  // expected-error @+1 {{process group @dp spans a world of 8 ranks but this step is compiled for 4}}
  distopt.process_group @dp size 8
  // expected-error @+1 {{process group @half spans a world of 2 ranks but this step is compiled for 4}}
  distopt.process_group @half size 2
  distopt.mesh @m shape [2, 2]
  distopt.process_group @rows size 2 over @m axes [1]
  distopt.process_group @pairs size 2 ranks dense<[[0, 3], [1, 2]]> : tensor<2x2xi64>
  distopt.mesh @big shape [2, 4]
  // expected-error @+1 {{process group @wide spans a world of 8 ranks but this step is compiled for 4}}
  distopt.process_group @wide size 2 over @big axes [0]
}

// -----

// Reductions over process groups count by the ranks they cover: inside each
// node, then across nodes, is one reduction of the world
// (--distopt-hierarchical-all-reduce); inside the node alone, or twice, is
// not.
distopt.mesh @nodes shape [2, 2]
distopt.process_group @intra size 2 over @nodes axes [1]
distopt.process_group @inter size 2 over @nodes axes [0]
func.func @hierarchical(%p: tensor<8xf32>, %g: tensor<8xf32> {distopt.role = "grad", distopt.name = "w"},
                        %h: tensor<8xf32> {distopt.role = "grad", distopt.name = "b"},
                        %k: tensor<8xf32> {distopt.role = "grad", distopt.name = "c"}, %lr: f32, %t: i64)
    -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %c = distopt.reduce_scatter sum %g on @intra : tensor<8xf32> -> tensor<4xf32>
  %a = distopt.all_reduce sum %c on @inter : tensor<4xf32>
  %w = distopt.all_gather %a on @intra : tensor<4xf32> -> tensor<8xf32>
  %p1 = distopt.sgd_update %p, %w lr(%lr) step(%t) : tensor<8xf32>, f32
  %half = distopt.all_reduce sum %h on @intra : tensor<8xf32>
  // expected-error @+1 {{gradient 'b' is reduced over only part of the world (@intra) before the optimizer: replicas would diverge}}
  %p2 = distopt.sgd_update %p, %half lr(%lr) step(%t) : tensor<8xf32>, f32
  %once = distopt.all_reduce sum %k on @intra : tensor<8xf32>
  %twice = distopt.all_reduce sum %once on @intra : tensor<8xf32>
  // expected-error @+1 {{gradient 'c' is reduced 2 times before the optimizer}}
  %p3 = distopt.sgd_update %p, %twice lr(%lr) step(%t) : tensor<8xf32>, f32
  return %p1, %p2, %p3 : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}
