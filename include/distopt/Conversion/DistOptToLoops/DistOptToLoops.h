//===- DistOptToLoops.h - local distopt ops to linalg, tensor ---*- C++ -*-===//
//
// The pattern sets of --distopt-lower-local-ops, by family, for a compiler
// that runs them in its own rewrite, and the target that says what the
// lowering leaves of the dialect (the collectives, for bufferization).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_CONVERSION_DISTOPTTOLOOPS_DISTOPTTOLOOPS_H
#define DISTOPT_CONVERSION_DISTOPTTOLOOPS_DISTOPTTOLOOPS_H

#include <cstdint>

namespace mlir {
class ConversionTarget;
class RewritePatternSet;

namespace distopt {

/// bucket_pack, bucket_unpack, shard_slice (of a pack: only this rank's
/// chunk is packed; beyond `maxShardCases` ranks its bounds are computed at
/// run time), owned_by, rank and group_size.
void populateLowerBucketsPatterns(RewritePatternSet &patterns,
                                  int64_t maxShardCases);

/// unscale, all_finite, loss_scale_update and clip_grad_norm.
void populateLowerMixedPrecisionPatterns(RewritePatternSet &patterns);

/// orthogonalize and topk_all_reduce. (powersgd_all_reduce is lowered by
/// batch, a block at a time: see the pass.)
void populateLowerCompressionPatterns(RewritePatternSet &patterns);

/// Marks what --distopt-lower-local-ops leaves legal: of the distopt
/// dialect only the collectives, their waits and the process groups, which
/// bufferization turns into runtime calls. Every other distopt op is
/// illegal: one left after the lowering is an error at that op.
void addLowerLocalOpsLegality(ConversionTarget &target);

} // namespace distopt
} // namespace mlir

#endif // DISTOPT_CONVERSION_DISTOPTTOLOOPS_DISTOPTTOLOOPS_H
