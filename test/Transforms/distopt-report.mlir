// The report of a hand-computable step: 2 ranks, 1024 f32 parameters.
// RUN: distopt-opt %s --distopt-report -o /dev/null | FileCheck %s
// RUN: distopt-opt %s --distopt-report=output=%t.txt | FileCheck %s --check-prefix=IR
// RUN: FileCheck %s < %t.txt
// RUN: not distopt-opt %s --distopt-report=output=/nonexistent/dir/r.txt 2>&1 | FileCheck %s --check-prefix=BADFILE

// A hand-written step (no importer attributes): the world is the largest
// process group, the model its parameter arguments, also once sharded.
// RUN: sed 's/size 1/size 2/' %S/../Tools/Inputs/adamw-step.mlir | distopt-opt --distopt-pipeline=zero-stage=3 --distopt-report -o /dev/null | FileCheck %s --check-prefix=HAND
// HAND: distopt report for @step: world of 2 ranks, 1024 parameters
// HAND: total 8192 8.0000

// Under ZeRO-3 the gradients' flat buffer is the one bucket: the packs of
// parameters that are sharded and gathered are model state, not buckets.
// RUN: distopt-translate --import-param-spec %S/../Runtime/Inputs/adamw-2.json | distopt-opt --distopt-pipeline=zero-stage=3 --distopt-report -o /dev/null | FileCheck %s --check-prefix=ZERO3
// ZERO3: buckets: 1
// ZERO3-NEXT: # tensors elements bytes padding
// ZERO3-NEXT: 0 4 {{[0-9]+}} {{[0-9]+}} {{[0-9]+$}}
// ZERO3-NEXT: all

// IR: distopt.all_reduce avg
// BADFILE: --distopt-report: {{.*}}/nonexistent/dir/r.txt

// CHECK: distopt report for @step: world of 2 ranks, 1024 parameters
// CHECK: buckets: 1
// CHECK-NEXT: # tensors elements bytes padding
// CHECK-NEXT: 0 2 1040 4160 16
// CHECK: communication per rank and step (ring algorithms)
// CHECK-NEXT: collective count payload bytes bytes sent sent/param
// 4160 bytes all-reduced on 2 ranks: 2 * 1/2 * 4160 sent; 512 bf16 on the wire, half of it sent.
// CHECK-NEXT: all_reduce 2 5184 5184 5.0625
// CHECK-NEXT: all_finite 1 4 4 0.0039
// CHECK-NEXT: total 3 5188 5188 5.0664
// No PowerSGD, so no line about its batches.
// CHECK-EMPTY:
// CHECK-NEXT: model state per rank
// params 4096 B; reduced gradients 4160 + 2048; state (m, v) 8192.
// CHECK: parameters 4096 4.0000
// CHECK-NEXT: gradients (after reduction) 6208 6.0625
// CHECK-NEXT: optimizer state (with main params) 8192 8.0000
// CHECK-NEXT: total 18496 18.0625
// compression: (4160 + 2048) / (4160 + 1024)
// CHECK: compression: 1.20x

module attributes {distopt.world_size = 2 : i64, distopt.num_parameters = 1024 : i64} {
  distopt.process_group @world size 2
  func.func @step(%w: tensor<1000xf32> {distopt.role = "param"}, %x: tensor<24xf32> {distopt.role = "param"},
                  %gw: tensor<1000xf32> {distopt.role = "grad"}, %gx: tensor<24xf32> {distopt.role = "grad"},
                  %m: tensor<1024xf32> {distopt.role = "state"}, %v: tensor<1024xf32> {distopt.role = "state"},
                  %e: tensor<512xf32>) -> (tensor<1040xf32>, tensor<512xf32>, i1) {
    %b = distopt.bucket_pack %gw, %gx : tensor<1000xf32>, tensor<24xf32> -> tensor<1040xf32>
    %r = distopt.all_reduce avg %b on @world : tensor<1040xf32>
    %c = distopt.all_reduce sum %e on @world wire bf16 : tensor<512xf32>
    %ok = distopt.all_finite %r on @world : tensor<1040xf32>
    return %r, %c, %ok : tensor<1040xf32>, tensor<512xf32>, i1
  }
}
