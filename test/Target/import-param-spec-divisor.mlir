// The mean of an imported step divides by the world size (and by the
// micro-batches of grad_accumulation) exactly: in the gradient's own type
// where the divisor is exact there, else in f32 (f64 beyond 2^24) and
// rounded once to the gradient's type. bf16 holds every integer up to 256,
// f16 up to 2048, f32 up to 2^24; 257 in bf16 would be 256 (a mean 0.39%
// too large), 2^20 in f16 infinity (a zero gradient).
// RUN: sed s/WORLD/257/ %S/Inputs/divisor.json > %t.257.json
// RUN: sed s/WORLD/2049/ %S/Inputs/divisor.json > %t.2049.json
// RUN: sed s/WORLD/1048576/ %S/Inputs/divisor.json > %t.1048576.json
// RUN: distopt-translate --import-param-spec %t.257.json | FileCheck %s --check-prefix=W257
// RUN: distopt-translate --import-param-spec %t.2049.json | FileCheck %s --check-prefix=W2049
// RUN: distopt-translate --import-param-spec %t.1048576.json | FileCheck %s --check-prefix=W2P20
// RUN: distopt-translate --import-param-spec %S/Inputs/accumulation-divisor.json | FileCheck %s --check-prefix=ACCUM
// The pipeline folds each of these divisions into the reduction as the
// average (f16's split against overflow at 2^20), none as a premul_sum of
// an inexact 1/N.
// RUN: distopt-translate --import-param-spec %t.257.json | distopt-opt --distopt-pipeline=overlap=false | FileCheck %s --check-prefix=FUSED257
// RUN: distopt-translate --import-param-spec %t.2049.json | distopt-opt --distopt-pipeline=overlap=false | FileCheck %s --check-prefix=FUSED2049
// RUN: distopt-translate --import-param-spec %t.1048576.json | distopt-opt --distopt-pipeline=overlap=false | FileCheck %s --check-prefix=FUSED2P20
// RUN: distopt-translate --import-param-spec %S/Inputs/accumulation-divisor.json | distopt-opt --distopt-pipeline=overlap=false | FileCheck %s --check-prefix=FUSEDACCUM

// W257-LABEL: func.func @step
// W257-SAME: %[[GB:[^:]*]]: tensor<4xbf16> {distopt.name = "b", distopt.role = "grad"}
// W257-SAME: %[[GH:[^:]*]]: tensor<4xf16> {distopt.name = "h", distopt.role = "grad"}
// W257-SAME: %[[GF:[^:]*]]: tensor<4xf32> {distopt.name = "f", distopt.role = "grad"}
// W257: %[[SB:.*]] = distopt.all_reduce sum %[[GB]] on @world : tensor<4xbf16>
// W257-NEXT: %[[SH:.*]] = distopt.all_reduce sum %[[GH]] on @world : tensor<4xf16>
// W257-NEXT: %[[SF:.*]] = distopt.all_reduce sum %[[GF]] on @world : tensor<4xf32>
// W257-NEXT: %[[EB:.*]] = arith.extf %[[SB]] : tensor<4xbf16> to tensor<4xf32>
// W257-NEXT: %[[NB:.*]] = arith.constant dense<2.570000e+02> : tensor<4xf32>
// W257-NEXT: %[[DB:.*]] = arith.divf %[[EB]], %[[NB]] : tensor<4xf32>
// W257-NEXT: %[[MB:.*]] = arith.truncf %[[DB]] : tensor<4xf32> to tensor<4xbf16>
// W257-NEXT: %[[NH:.*]] = arith.constant dense<2.570000e+02> : tensor<4xf16>
// W257-NEXT: %[[MH:.*]] = arith.divf %[[SH]], %[[NH]] : tensor<4xf16>
// W257-NEXT: %[[NF:.*]] = arith.constant dense<2.570000e+02> : tensor<4xf32>
// W257-NEXT: %[[MF:.*]] = arith.divf %[[SF]], %[[NF]] : tensor<4xf32>
// W257: distopt.sgd_update %{{.*}}, %[[MB]]
// W257: distopt.sgd_update %{{.*}}, %[[MH]]
// W257: distopt.sgd_update %{{.*}}, %[[MF]]

// W2049-LABEL: func.func @step
// W2049: %[[SB:.*]] = distopt.all_reduce sum %{{.*}} : tensor<4xbf16>
// W2049-NEXT: %[[SH:.*]] = distopt.all_reduce sum %{{.*}} : tensor<4xf16>
// W2049-NEXT: %[[SF:.*]] = distopt.all_reduce sum %{{.*}} : tensor<4xf32>
// W2049-NEXT: %[[EB:.*]] = arith.extf %[[SB]] : tensor<4xbf16> to tensor<4xf32>
// W2049-NEXT: %[[NB:.*]] = arith.constant dense<2.049000e+03> : tensor<4xf32>
// W2049-NEXT: %[[DB:.*]] = arith.divf %[[EB]], %[[NB]] : tensor<4xf32>
// W2049-NEXT: arith.truncf %[[DB]] : tensor<4xf32> to tensor<4xbf16>
// W2049-NEXT: %[[EH:.*]] = arith.extf %[[SH]] : tensor<4xf16> to tensor<4xf32>
// W2049-NEXT: %[[NH:.*]] = arith.constant dense<2.049000e+03> : tensor<4xf32>
// W2049-NEXT: %[[DH:.*]] = arith.divf %[[EH]], %[[NH]] : tensor<4xf32>
// W2049-NEXT: arith.truncf %[[DH]] : tensor<4xf32> to tensor<4xf16>
// W2049-NEXT: %[[NF:.*]] = arith.constant dense<2.049000e+03> : tensor<4xf32>
// W2049-NEXT: arith.divf %[[SF]], %[[NF]] : tensor<4xf32>

// 2^20 is exact in bf16 (printed as 1.048580e+06, which reads back as
// 2^20) and in f32 (0x49800000), not in f16.
// W2P20-LABEL: func.func @step
// W2P20: %[[SB:.*]] = distopt.all_reduce sum %{{.*}} : tensor<4xbf16>
// W2P20-NEXT: %[[SH:.*]] = distopt.all_reduce sum %{{.*}} : tensor<4xf16>
// W2P20-NEXT: %[[SF:.*]] = distopt.all_reduce sum %{{.*}} : tensor<4xf32>
// W2P20-NEXT: %[[NB:.*]] = arith.constant dense<1.048580e+06> : tensor<4xbf16>
// W2P20-NEXT: arith.divf %[[SB]], %[[NB]] : tensor<4xbf16>
// W2P20-NEXT: %[[EH:.*]] = arith.extf %[[SH]] : tensor<4xf16> to tensor<4xf32>
// W2P20-NEXT: %[[NH:.*]] = arith.constant dense<0x49800000> : tensor<4xf32>
// W2P20-NEXT: %[[DH:.*]] = arith.divf %[[EH]], %[[NH]] : tensor<4xf32>
// W2P20-NEXT: arith.truncf %[[DH]] : tensor<4xf32> to tensor<4xf16>
// W2P20-NEXT: %[[NF:.*]] = arith.constant dense<0x49800000> : tensor<4xf32>
// W2P20-NEXT: arith.divf %[[SF]], %[[NF]] : tensor<4xf32>

// K = 2^24 + 1 micro-batches on 3 ranks: the f32 sum of the micro-batches
// is divided by 3 in f32, then by K in f64 (0x4170000010000000; f32 would
// divide by 2^24).
// ACCUM-LABEL: func.func @step
// ACCUM: %[[SB:.*]] = distopt.all_reduce sum %{{.*}} : tensor<4xf32>
// ACCUM-NEXT: distopt.all_reduce sum %{{.*}} : tensor<4xf32>
// ACCUM-NEXT: %[[THREE:.*]] = arith.constant dense<3.000000e+00> : tensor<4xf32>
// ACCUM-NEXT: %[[DB:.*]] = arith.divf %[[SB]], %[[THREE]] : tensor<4xf32>
// ACCUM-NEXT: %[[EB:.*]] = arith.extf %[[DB]] : tensor<4xf32> to tensor<4xf64>
// ACCUM-NEXT: %[[K:.*]] = arith.constant dense<0x4170000010000000> : tensor<4xf64>
// ACCUM-NEXT: %[[QB:.*]] = arith.divf %[[EB]], %[[K]] : tensor<4xf64>
// ACCUM-NEXT: arith.truncf %[[QB]] : tensor<4xf64> to tensor<4xf32>

// FUSED257-LABEL: func.func @step
// FUSED257: distopt.all_reduce avg %{{.*}} on @world : tensor<4xbf16>
// FUSED257-NEXT: distopt.all_reduce avg %{{.*}} on @world : tensor<4xf16>
// FUSED257-NEXT: distopt.all_reduce avg %{{.*}} on @world : tensor<4xf32>
// FUSED257-NOT: arith.divf
// FUSED257-NOT: premul_sum

// FUSED2049-LABEL: func.func @step
// FUSED2049: distopt.all_reduce avg %{{.*}} on @world : tensor<4xbf16>
// FUSED2049-NEXT: distopt.all_reduce avg %{{.*}} on @world : tensor<4xf16>
// FUSED2049-NEXT: distopt.all_reduce avg %{{.*}} on @world : tensor<4xf32>
// FUSED2049-NOT: arith.divf

// 2^20 = 1024 x 1024: the f16 sum is pre-divided by 1024, then divided by
// 1024 in f16.
// FUSED2P20-LABEL: func.func @step
// FUSED2P20: distopt.all_reduce avg %{{.*}} on @world : tensor<4xbf16>
// FUSED2P20-NEXT: %[[H:.*]] = distopt.all_reduce premul_sum(9.765625E-4) %{{.*}} on @world : tensor<4xf16>
// FUSED2P20-NEXT: %[[N:.*]] = arith.constant dense<1.024000e+03> : tensor<4xf16>
// FUSED2P20-NEXT: arith.divf %[[H]], %[[N]] : tensor<4xf16>
// FUSED2P20-NEXT: distopt.all_reduce avg %{{.*}} on @world : tensor<4xf32>

// FUSEDACCUM-LABEL: func.func @step
// FUSEDACCUM: %[[K:.*]] = arith.constant dense<0x4170000010000000> : tensor<4xf64>
// The two sums are bucketed (the reductions come after both sums).
// FUSEDACCUM: %[[A:.*]] = distopt.all_reduce avg %{{.*}} on @world : tensor<20xf32>
// FUSEDACCUM-NEXT: %[[U:.*]]:2 = distopt.bucket_unpack %[[A]]
// FUSEDACCUM-NEXT: %[[E:.*]] = arith.extf %[[U]]#1 : tensor<4xf32> to tensor<4xf64>
// FUSEDACCUM-NEXT: %[[Q:.*]] = arith.divf %[[E]], %[[K]] : tensor<4xf64>
// FUSEDACCUM-NEXT: arith.truncf %[[Q]] : tensor<4xf64> to tensor<4xf32>
