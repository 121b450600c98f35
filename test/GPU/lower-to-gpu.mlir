// The GPU lowering of a bucketed AdamW step with gradient clipping: every
// buffer in device memory (gpu.alloc), element-wise work in launches of
// 256-thread blocks over tiles, the clipping norms as a many-thread
// reduction combined by one thread, whose result reaches the host by a
// device-to-host copy, the all-reduce a
// runtime call after the compute stream is waited for, and the kernels
// embedded as PTX for sm_90.
// RUN: not distopt-opt %examples/mlp_adamw_step.mlir --pass-pipeline="builtin.module(func.func(distopt-offload-to-gpu))" 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: error: 'distopt.bucket_pack' op works on tensors

// RUN: distopt-opt %examples/mlp_adamw_step.mlir --distopt-lower-to-gpu --mlir-print-ir-after=gpu-async-region -o %t.mlir 2>&1 | FileCheck %s --check-prefix=SPLIT
// RUN: FileCheck %s --check-prefix=PTX < %t.mlir

// The bucket is packed by kernels, then the host waits and communicates.
// SPLIT: gpu.alloc async {{.*}} : memref<2768xf32>
// SPLIT: gpu.launch_func async {{.*}} threads in (%c256,
// SPLIT: gpu.wait [
// SPLIT-NOT: gpu.launch_func
// SPLIT: call @distopt_rt_all_reduce
// A norm: 128 x 256 threads each combine a strided share of the elements,
// one thread combines their results in order, and the value is copied to
// the host and waited for.
// SPLIT: gpu.launch_func async {{.*}} blocks in (%c128, %c1, %c1) threads in (%c256, %c1, %c1)
// SPLIT-NEXT: gpu.alloc async
// SPLIT-NEXT: gpu.launch_func async {{.*}} blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
// SPLIT-NEXT: gpu.memcpy async {{.*}} : memref<1xf64>, memref<1xf64>
// SPLIT-NEXT: gpu.wait [
// SPLIT-NEXT: memref.load %alloca
// The four AdamW updates, each reading its gradient times the clipping
// factor (the clipping is fused into the update), are one launch of
// 8 + 1 + 3 + 1 blocks (a multi-tensor kernel), the last of the step.
// SPLIT: gpu.launch_func async {{.*}} blocks in (%c13, %c1, %c1) threads in (%c256, %c1, %c1)
// SPLIT-NOT: gpu.launch_func
// No constant needs a device copy (the bucket's padding is a fill); the
// temporaries are freed, and all the work is waited for before the step
// returns.
// SPLIT-NOT: gpu.memcpy {{.*}}memref<6xf32>
// SPLIT: gpu.dealloc async {{.*}} : memref<2768xf32>
// SPLIT-NOT: gpu.launch_func
// SPLIT: gpu.wait [%{{[0-9]+}}]
// SPLIT-NEXT: return

// Host code has no host allocation left, and launches embedded PTX.
// PTX-NOT: memref.alloc
// PTX: gpu.launch_func <%{{.*}} : !llvm.ptr> @step_kernel::@step_kernel
// PTX: gpu.binary @step_kernel [#gpu.object<#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">
// PTX-SAME: .target sm_90
