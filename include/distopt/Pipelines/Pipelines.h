//===- Pipelines.h - the distopt pass pipeline ------------------*- C++ -*-===//
//
// `distopt-pipeline`: the transformation passes in the order they compose.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_PIPELINES_PIPELINES_H
#define DISTOPT_PIPELINES_PIPELINES_H

#include "distopt/Transforms/PassOptions.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

namespace mlir::distopt {

struct DistOptPipelineOptions
    : public PassPipelineOptions<DistOptPipelineOptions> {
  Option<CollectiveBackend> backend{
      *this, "backend",
      llvm::cl::desc("Collective backend: nccl, mpi or sum-only"),
      llvm::cl::init(CollectiveBackend::Nccl), collectiveBackendChoices()};
  Option<ReduceDtype> reduceDtype{
      *this, "reduce-dtype",
      llvm::cl::desc("Reduce bf16/f16 gradients in this type (none, f32 or "
                     "f64)"),
      llvm::cl::init(ReduceDtype::None), pipelineReduceDtypeChoices()};
  Option<int64_t> zeroStage{
      *this, "zero-stage",
      llvm::cl::desc("ZeRO stage: 0 (no sharding), 1, 2 or 3"),
      llvm::cl::init(0)};
  Option<ZeroStrategy> zeroStrategy{
      *this, "zero-strategy", llvm::cl::desc("flat or greedy"),
      llvm::cl::init(ZeroStrategy::Flat), zeroStrategyChoices()};
  Option<OwnerBalance> zeroOwnerBalance{
      *this, "zero-owner-balance",
      llvm::cl::desc("ZeRO: what owners of updates that read whole matrices "
                     "(Muon, Dion) balance: flops or elements"),
      llvm::cl::init(OwnerBalance::Flops), ownerBalanceChoices()};
  Option<MatrixPlan> zeroMatrixPlan{
      *this, "zero-matrix-plan",
      llvm::cl::desc("ZeRO: how updates that read whole matrices (Muon, "
                     "Dion) run: auto (owners where they can, else gathered "
                     "or, Dion, in blocks of rows), owner, gather or lowrank "
                     "(Dion)"),
      llvm::cl::init(MatrixPlan::Auto), matrixPlanChoices()};
  Option<double> zeroUpdateGflops{
      *this, "zero-update-gflops",
      llvm::cl::desc("ZeRO, zero-matrix-plan=auto: the rate (GFLOP/s) one "
                     "rank runs updates of whole matrices at; with "
                     "zero-latency-us and zero-bandwidth-gb-per-s, the plan "
                     "is chosen per matrix"),
      llvm::cl::init(0.0)};
  Option<double> zeroLatencyUs{
      *this, "zero-latency-us",
      llvm::cl::desc("ZeRO, zero-matrix-plan=auto: a collective's latency in "
                     "microseconds (distopt-calibrate)"),
      llvm::cl::init(0.0)};
  Option<double> zeroBandwidthGbPerS{
      *this, "zero-bandwidth-gb-per-s",
      llvm::cl::desc("ZeRO, zero-matrix-plan=auto: the link's bandwidth in "
                     "GB/s (distopt-calibrate)"),
      llvm::cl::init(0.0)};
  Option<int64_t> hybridShardSize{
      *this, "hybrid-shard-size",
      llvm::cl::desc("Hybrid sharding: ZeRO inside groups of this many "
                     "consecutive ranks, replicated across them "
                     "(--distopt-hybrid-mesh; 0: shard over the world)"),
      llvm::cl::init(0)};
  Option<bool> dionLowRankSync{
      *this, "dion-low-rank-sync",
      llvm::cl::desc("Dion's updates average their low-rank factors instead "
                     "of their gradients (--distopt-dion-low-rank-sync)"),
      llvm::cl::init(false)};
  Option<double> dionBatchMb{
      *this, "dion-batch-mb",
      llvm::cl::desc("Dion's low-rank sync: MiB of gradients whose factors "
                     "share two all_reduces (0: two per matrix)"),
      llvm::cl::init(0)};
  Option<int64_t> powersgdRank{
      *this, "powersgd-rank",
      llvm::cl::desc("PowerSGD rank; 0 leaves gradients uncompressed"),
      llvm::cl::init(0)};
  Option<double> minCompressionRate{
      *this, "min-compression-rate",
      llvm::cl::desc("PowerSGD: compress only above this rate"),
      llvm::cl::init(2.0)};
  Option<bool> errorFeedback{*this, "error-feedback",
                             llvm::cl::desc("PowerSGD error feedback"),
                             llvm::cl::init(true)};
  Option<bool> warmStart{*this, "warm-start",
                         llvm::cl::desc("PowerSGD warm start"),
                         llvm::cl::init(true)};
  Option<int64_t> powersgdSeed{
      *this, "powersgd-seed",
      llvm::cl::desc("PowerSGD: seed of Q's first draw (-1: the runtime's "
                     "default)"),
      llvm::cl::init(-1)};
  Option<int64_t> powersgdStartIter{
      *this, "powersgd-start-iter",
      llvm::cl::desc("PowerSGD: plain averaging for the first N steps (the "
                     "hook's start_powerSGD_iter)"),
      llvm::cl::init(0)};
  Option<double> powersgdOrthogonalizationEpsilon{
      *this, "powersgd-orthogonalization-epsilon",
      llvm::cl::desc("PowerSGD: added to each column's norm when P is "
                     "orthogonalized (the hook's orthogonalization_epsilon)"),
      llvm::cl::init(0)};
  Option<double> powersgdBatchMb{
      *this, "powersgd-batch-mb",
      llvm::cl::desc("PowerSGD: MiB of compressed gradients whose factors "
                     "share two all_reduces (0: two per tensor)"),
      llvm::cl::init(0)};
  Option<bool> bucketize{*this, "bucketize",
                         llvm::cl::desc("Bucket the remaining all_reduces"),
                         llvm::cl::init(true)};
  Option<double> bucketCapMb{*this, "bucket-cap-mb",
                             llvm::cl::desc("Bucket capacity in MB"),
                             llvm::cl::init(25.0)};
  Option<double> firstBucketCapMb{
      *this, "first-bucket-cap-mb",
      llvm::cl::desc("Capacity of the first bucket in MB"),
      llvm::cl::init(1.0)};
  Option<double> bucketLatencyUs{
      *this, "bucket-latency-us",
      llvm::cl::desc("All-reduce latency in microseconds (distopt-calibrate); "
                     "with bucket-bandwidth-gb-per-s, bucket caps come from "
                     "the link model instead of the two caps"),
      llvm::cl::init(0.0)};
  Option<double> bucketBandwidthGbPerS{
      *this, "bucket-bandwidth-gb-per-s",
      llvm::cl::desc("All-reduce bandwidth in GB/s (distopt-calibrate)"),
      llvm::cl::init(0.0)};
  Option<bool> gradAsBucketView{
      *this, "grad-as-bucket-view",
      llvm::cl::desc("Gradients as views of flat bucket arguments (changes "
                     "the step's interface, as DDP's gradient_as_bucket_view)"),
      llvm::cl::init(false)};
  Option<bool> paramAsBucketView{
      *this, "param-as-bucket-view",
      llvm::cl::desc("Parameters as views of the flat buffer ZeRO-1/2 shard "
                     "and gather them in (changes the step's interface, as "
                     "FSDP's FlatParameter)"),
      llvm::cl::init(false)};
  Option<int64_t> hierarchicalNodeSize{
      *this, "hierarchical-node-size",
      llvm::cl::desc("Ranks per node, dividing the world: all-reduces of "
                     "at least hierarchical-min-bytes run inside each node, "
                     "then across nodes (--distopt-hierarchical-all-reduce; "
                     "0: flat)"),
      llvm::cl::init(0)};
  Option<int64_t> hierarchicalMinBytes{
      *this, "hierarchical-min-bytes",
      llvm::cl::desc("Smallest all-reduce made hierarchical, in bytes"),
      llvm::cl::init(1 << 20)};
  Option<bool> overlap{*this, "overlap",
                       llvm::cl::desc("Make collectives asynchronous"),
                       llvm::cl::init(true)};
  Option<bool> verify{*this, "verify",
                      llvm::cl::desc("Run --distopt-verify-collectives last"),
                      llvm::cl::init(true)};
  Option<bool> splitStep{
      *this, "split-step",
      llvm::cl::desc("Also export each gradient bucket's reduction and the "
                     "update as entry points of their own "
                     "(--distopt-split-step: a driver reduces buckets "
                     "during backward, as DDP does)"),
      llvm::cl::init(false)};
  Option<bool> gatherParams{
      *this, "gather-params",
      llvm::cl::desc("With split-step, also export a gather entry per ZeRO-3 "
                     "flat parameter shard (FSDP's all-gather of a unit "
                     "before its forward and backward)"),
      llvm::cl::init(false)};
};

/// Adds canonicalization, division fusion, wider reductions, ZeRO sharding,
/// PowerSGD,
/// bucketing, gradients and parameters as bucket views,
/// overlap and the cross-rank checks to
/// `pm` (a module pass manager), as `options` asks.
void buildDistOptPipeline(OpPassManager &pm,
                          const DistOptPipelineOptions &options);

/// The vector width, in bits, of the CPU lowering's element-wise loops
/// unless told otherwise (--distopt-annotate-vector-width).
constexpr unsigned kDefaultElementwiseVectorBits = 256;

/// Options of the CPU lowering.
struct DistOptLowerToCPUOptions
    : public PassPipelineOptions<DistOptLowerToCPUOptions> {
  Option<unsigned> elementwiseVectorBits{
      *this, "elementwise-vector-bits",
      llvm::cl::desc("Vector width, in bits, that element-wise loops ask "
                     "LLVM for (--distopt-annotate-vector-width): a power of "
                     "two, or 0 for the target's choice"),
      llvm::cl::init(kDefaultElementwiseVectorBits)};
};

/// Adds the lowering of a (transformed) step to LLVM-dialect code for CPUs
/// that calls the runtime for communication: optimizer updates to fused
/// loops, local ops to tensors, one-shot bufferization (collectives become
/// runtime calls, in place where legal), loops, LLVM. With
/// `runtimeAllocator`, allocations call the runtime's caching allocator
/// (_mlir_memref_to_llvm_alloc and _free, which the process must provide, as
/// distopt-run does) instead of malloc and free (what mlir-runner provides).
void buildDistOptLowerToCPUPipeline(
    OpPassManager &pm,
    const DistOptLowerToCPUOptions &options = DistOptLowerToCPUOptions(),
    bool runtimeAllocator = false);

/// Options of the GPU lowering.
struct DistOptLowerToGPUOptions
    : public PassPipelineOptions<DistOptLowerToGPUOptions> {
  Option<std::string> chip{*this, "chip",
                           llvm::cl::desc("GPU architecture of the kernels"),
                           llvm::cl::init("sm_90")};
  Option<std::string> features{
      *this, "features", llvm::cl::desc("PTX version and target features"),
      llvm::cl::init("+ptx80")};
  Option<std::string> format{
      *this, "format",
      llvm::cl::desc("What the step embeds: `fatbin` (cubin for `chip` and "
                     "its PTX, needs the CUDA toolkit's ptxas and fatbinary) "
                     "or `isa` (PTX only, compiled by the driver at load)"),
      llvm::cl::init("isa")};
  Option<std::string> toolkit{
      *this, "toolkit",
      llvm::cl::desc("CUDA toolkit for `fatbin` (default: $CUDA_ROOT, then "
                     "MLIR's configured path)"),
      llvm::cl::init("")};
  Option<int64_t> blockSize{
      *this, "block-size",
      llvm::cl::desc("Threads per block of the element-wise kernels"),
      llvm::cl::init(256)};
  Option<int> optLevel{*this, "opt-level",
                       llvm::cl::desc("Optimization level of device code"),
                       llvm::cl::init(3)};
};
/// Adds the lowering of a (transformed) step to LLVM-dialect host code with
/// embedded GPU kernels: the CPU lowering's bufferization, then
/// --distopt-offload-to-gpu (buffers in device memory, element work in
/// kernels), kernel outlining, NVVM, and the host's calls of MLIR's GPU
/// runtime functions (mgpu*, provided by the distopt runtime).
void buildDistOptLowerToGPUPipeline(OpPassManager &pm,
                                    const DistOptLowerToGPUOptions &options);
/// The lowerings' stages, for compilers that assemble their own:
/// - a step on buffers: optimizers and local ops lowered, bufferized,
///   runtime calls for the collectives, deallocations for its temporaries,
///   loops over contiguous memory collapsed to one (`maxShardCases`: see
///   --distopt-lower-local-ops);
void buildBufferizedStepPipeline(OpPassManager &pm, int64_t maxShardCases = 64);
/// - the CPU lowering's large element-wise ops as OpenMP work-sharing loops
///   (--distopt-parallelize-loops, --convert-scf-to-openmp), between the two
///   halves;
void buildParallelLoopsPipeline(OpPassManager &pm);
/// - the CPU lowering's second half: loops on buffers to the LLVM dialect
///   (`runtimeAllocator`: allocate through the runtime's caching allocator),
///   element-wise loops vectorized `elementwiseVectorBits` wide (0: as the
///   target prefers); OpenMP ops become calls of LLVM's OpenMP runtime;
void buildLoopsToLLVMPipeline(
    OpPassManager &pm, bool runtimeAllocator,
    unsigned elementwiseVectorBits = kDefaultElementwiseVectorBits);
/// - the GPU lowering's first half: buffers in device memory, kernels as
///   gpu.launch with `blockSize` threads.
void buildOffloadPipeline(OpPassManager &pm, int64_t blockSize);

/// Registers `distopt-pipeline`, `distopt-lower-to-cpu` and
/// `distopt-lower-to-gpu`.
void registerDistOptPipeline();

/// Registers every distopt pass (lib/Transforms and lib/Conversion) for
/// textual pipelines and command lines, like registerAllPasses upstream.
void registerDistOptPasses();

} // namespace mlir::distopt

#endif // DISTOPT_PIPELINES_PIPELINES_H
