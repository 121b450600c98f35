//===- ShardToDistOpt.h - upstream shard collectives to distopt -*- C++ -*-===//
//
// The patterns of --convert-shard-to-distopt, for compilers that run them
// in their own conversion. They expect input the pass has checked (grids of
// static size, static tensors); what they cannot convert is left to the
// conversion framework to report.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_CONVERSION_SHARDTODISTOPT_SHARDTODISTOPT_H
#define DISTOPT_CONVERSION_SHARDTODISTOPT_SHARDTODISTOPT_H

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/Statistic.h"
#include "llvm/ADT/StringMap.h"

#include <cstdint>

namespace mlir {
class RewritePatternSet;
namespace distopt {

/// The static shapes of a module's shard.grid ops, by name.
using ShardGridShapes = llvm::StringMap<llvm::SmallVector<int64_t>>;

/// shard collectives, process indices and grid shapes become distopt ops
/// on the process group named after the grid; each grid becomes that
/// group. A collective over some of a grid's axes (or all, in another
/// order) runs on a group over those axes of a distopt.mesh shaped like the
/// grid (`@<grid>_mesh`, `@<grid>_axes_<a>_<b>`), declared on first use.
/// `grids` must outlive the patterns; `converted`, if given, counts the ops
/// converted (grids aside).
void populateShardToDistOptPatterns(RewritePatternSet &patterns,
                                    const ShardGridShapes &grids,
                                    llvm::Statistic *converted = nullptr);

} // namespace distopt
} // namespace mlir

#endif // DISTOPT_CONVERSION_SHARDTODISTOPT_SHARDTODISTOPT_H
