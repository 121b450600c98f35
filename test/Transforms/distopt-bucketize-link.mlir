// Bucket caps from a link model (distopt-calibrate's latency and bandwidth).
// The f32 gradients are S = 8 x 64 KiB = 524288 bytes. At 32.768 us and
// 1 GB/s, latency x bandwidth = 32768 bytes: n = sqrt(524288 / 32768) = 4
// buckets of 128 KiB. The bf16 ones are another kind of bucket, with their
// own S = 65536 bytes: n = round(sqrt(2)) = 1.
// RUN: distopt-opt %s --distopt-bucketize="latency-us=32.768 bandwidth-gb-per-s=1" | FileCheck %s --check-prefix=FOUR
// RUN: distopt-opt %s --distopt-pipeline="bucket-latency-us=32.768 bucket-bandwidth-gb-per-s=1 overlap=false" | FileCheck %s --check-prefix=FOUR
// A slower start (1 ms): one bucket each; a faster one (1 us): n = 23, more
// buckets than tensors, so every collective stays as it was.
// RUN: distopt-opt %s --distopt-bucketize="latency-us=1000 bandwidth-gb-per-s=1" | FileCheck %s --check-prefix=ONE
// RUN: distopt-opt %s --distopt-bucketize="latency-us=1 bandwidth-gb-per-s=1" | FileCheck %s --check-prefix=NONE
// RUN: not distopt-opt %s --distopt-bucketize="latency-us=1" 2>&1 | FileCheck %s --check-prefix=ALONE
// RUN: not distopt-opt %s --distopt-bucketize="latency-us=-1 bandwidth-gb-per-s=1" 2>&1 | FileCheck %s --check-prefix=NEG
// RUN: not distopt-opt %s --distopt-bucketize="latency-us=1 bandwidth-gb-per-s=inf" 2>&1 | FileCheck %s --check-prefix=NEG
// RUN: not distopt-opt %s --distopt-pipeline="bucket-latency-us=nan bucket-bandwidth-gb-per-s=1" 2>&1 | FileCheck %s --check-prefix=NEG
// RUN: not distopt-opt %s --distopt-bucketize="latency-us=1 bandwidth-gb-per-s=1 cap-mb=3" 2>&1 | FileCheck %s --check-prefix=BOTH
// RUN: not distopt-opt %s --distopt-bucketize="latency-us=1 bandwidth-gb-per-s=1 first-bucket-cap-mb=3" 2>&1 | FileCheck %s --check-prefix=BOTH
// RUN: not distopt-opt %s --distopt-pipeline="bucket-latency-us=1 bucket-bandwidth-gb-per-s=1 bucket-cap-mb=3" 2>&1 | FileCheck %s --check-prefix=BOTH

// ALONE: --distopt-bucketize: latency-us and bandwidth-gb-per-s go together
// NEG: --distopt-bucketize: latency-us and bandwidth-gb-per-s must be finite and not negative
// BOTH: --distopt-bucketize: give cap-mb and first-bucket-cap-mb, or latency-us and bandwidth-gb-per-s, not both

distopt.process_group @dp size 2

// FOUR-LABEL: func.func @step
// FOUR: distopt.bucket_pack %{{[^,]*}}, %{{[^,]*}} : tensor<16384xbf16>, tensor<16384xbf16> -> tensor<32768xbf16>
// FOUR-COUNT-4: distopt.bucket_pack %{{[^,]*}}, %{{[^,]*}} : tensor<16384xf32>, tensor<16384xf32> -> tensor<32768xf32>
// FOUR-NOT: distopt.bucket_pack
// ONE-LABEL: func.func @step
// ONE: distopt.bucket_pack {{.*}} -> tensor<32768xbf16>
// ONE: distopt.bucket_pack {{.*}} -> tensor<131072xf32>
// ONE-NOT: distopt.bucket_pack
// NONE-LABEL: func.func @step
// NONE-NOT: distopt.bucket_pack
// NONE-COUNT-10: distopt.all_reduce avg
func.func @step(%g0: tensor<16384xf32>, %g1: tensor<16384xf32>, %g2: tensor<16384xf32>, %g3: tensor<16384xf32>, %g4: tensor<16384xf32>, %g5: tensor<16384xf32>, %g6: tensor<16384xf32>, %g7: tensor<16384xf32>, %h0: tensor<16384xbf16>, %h1: tensor<16384xbf16>) -> (tensor<16384xf32>, tensor<16384xf32>, tensor<16384xf32>, tensor<16384xf32>, tensor<16384xf32>, tensor<16384xf32>, tensor<16384xf32>, tensor<16384xf32>, tensor<16384xbf16>, tensor<16384xbf16>) {
  %r0 = distopt.all_reduce avg %g0 on @dp : tensor<16384xf32>
  %r1 = distopt.all_reduce avg %g1 on @dp : tensor<16384xf32>
  %r2 = distopt.all_reduce avg %g2 on @dp : tensor<16384xf32>
  %r3 = distopt.all_reduce avg %g3 on @dp : tensor<16384xf32>
  %r4 = distopt.all_reduce avg %g4 on @dp : tensor<16384xf32>
  %r5 = distopt.all_reduce avg %g5 on @dp : tensor<16384xf32>
  %r6 = distopt.all_reduce avg %g6 on @dp : tensor<16384xf32>
  %r7 = distopt.all_reduce avg %g7 on @dp : tensor<16384xf32>
  %s0 = distopt.all_reduce avg %h0 on @dp : tensor<16384xbf16>
  %s1 = distopt.all_reduce avg %h1 on @dp : tensor<16384xbf16>
  return %r0, %r1, %r2, %r3, %r4, %r5, %r6, %r7, %s0, %s1 : tensor<16384xf32>, tensor<16384xf32>, tensor<16384xf32>, tensor<16384xf32>, tensor<16384xf32>, tensor<16384xf32>, tensor<16384xf32>, tensor<16384xf32>, tensor<16384xbf16>, tensor<16384xbf16>
}
