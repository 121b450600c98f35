// RUN: distopt-opt %s -split-input-file -verify-diagnostics --convert-shard-to-distopt

// expected-error @+1 {{'shard.grid' op has a dynamic size (2x?): a distopt process group has a static size}}
shard.grid @g(shape = 2x?)

// -----

// A grid axis of size 0, which upstream's verifier would divide by: refused
// before it runs (distopt-opt verifies its input with verifyInput).
// expected-error @+1 {{'shard.grid' op has an axis of size 0: a grid needs at least one process along every axis}}
shard.grid @g(shape = 0)
func.func @empty_axis(%x: tensor<4x4xf32>) -> tensor<1x16xf32> {
  %a = shard.all_to_all %x on @g grid_axes = [0] split_axis = 0 concat_axis = 1 : tensor<4x4xf32> -> tensor<1x16xf32>
  return %a : tensor<1x16xf32>
}

// -----

shard.grid @g(shape = 4)
func.func @dynamic_tensor(%x: tensor<?xf32>) -> tensor<?xf32> {
  // expected-error @+1 {{'shard.all_reduce' op has an operand of dynamic shape 'tensor<?xf32>': distopt's collectives need static shapes}}
  %a = shard.all_reduce %x on @g grid_axes = [0] : tensor<?xf32> -> tensor<?xf32>
  return %a : tensor<?xf32>
}

// -----

shard.grid @g(shape = 4)
func.func @memref(%x: memref<8xf32>) -> memref<8xf32> {
  // expected-error @+1 {{'shard.all_reduce' op has an operand of type 'memref<8xf32>': distopt converts collectives on tensors (before bufferization)}}
  %a = shard.all_reduce %x on @g grid_axes = [0] : memref<8xf32> -> memref<8xf32>
  return %a : memref<8xf32>
}

// -----

shard.grid @g(shape = 4)
func.func @bitwise(%x: tensor<8xi32>) -> tensor<8xi32> {
  // expected-error @+1 {{'shard.all_reduce' op has reduction 'bitwise_or', which distopt does not have (sum, average, min, max, product)}}
  %a = shard.all_reduce %x on @g grid_axes = [0] reduction = bitwise_or : tensor<8xi32> -> tensor<8xi32>
  return %a : tensor<8xi32>
}

// -----

shard.grid @g(shape = 4)
func.func @float_to_int(%x: tensor<8xf32>) -> tensor<8xi32> {
  // expected-error @+1 {{'shard.all_reduce' op accumulates 'f32' in 'i32': distopt converts between float types or between integer types only}}
  %a = shard.all_reduce %x on @g grid_axes = [0] : tensor<8xf32> -> tensor<8xi32>
  return %a : tensor<8xi32>
}

// -----

shard.grid @g(shape = 4)
func.func @dynamic_root(%x: tensor<2xf32>, %r: index) -> tensor<2xf32> {
  // expected-error @+1 {{'shard.broadcast' op has a root computed at run time: distopt's broadcast root is a constant}}
  %a = shard.broadcast %x on @g grid_axes = [0] root = [%r] : (tensor<2xf32>, index) -> tensor<2xf32>
  return %a : tensor<2xf32>
}

// -----

shard.grid @g(shape = 4)
func.func @all_to_all(%x: tensor<4x4xf32>) -> tensor<1x16xf32> {
  // expected-error @+1 {{'shard.all_to_all' op has no distopt counterpart}}
  %a = shard.all_to_all %x on @g grid_axes = [0] split_axis = 0 concat_axis = 1 : tensor<4x4xf32> -> tensor<1x16xf32>
  return %a : tensor<1x16xf32>
}

// -----

// Every error is reported, not only the first.
shard.grid @g(shape = 4)
func.func @unpartitioned(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'shard.sharding' op has no distopt counterpart: run --shard-partition first}}
  %s = shard.sharding @g split_axes = [[0]] : !shard.sharding
  // expected-error @+1 {{'shard.shard' op has no distopt counterpart: run --shard-partition first}}
  %y = shard.shard %x to %s : tensor<8xf32>
  return %y : tensor<8xf32>
}

// -----

// expected-error @+1 {{'shard.grid' op has more than 2^20 processes (2048x1024), the most a distopt step may be compiled for}}
shard.grid @g(shape = 2048x1024)
