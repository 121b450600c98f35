//===- PassOptions.h - enum-valued options of the passes --------*- C++ -*-===//
//
// The choices of the passes' and the pipeline's enum options. A value that
// is not a choice fails at option parsing, listing the choices.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_TRANSFORMS_PASSOPTIONS_H
#define DISTOPT_TRANSFORMS_PASSOPTIONS_H

#include "distopt/Support/ChoiceParser.h"

namespace mlir::distopt {

/// The collective library a step targets: what reductions it has.
enum class CollectiveBackend { Nccl, Mpi, SumOnly };

inline llvm::cl::ValuesClass collectiveBackendChoices() {
  return llvm::cl::values(
      clEnumValN(CollectiveBackend::Nccl, "nccl", "avg and premul_sum"),
      clEnumValN(CollectiveBackend::Mpi, "mpi",
                 "avg and premul_sum (the runtime's MPI backend)"),
      clEnumValN(CollectiveBackend::SumOnly, "sum-only",
                 "sum only (gloo-like): no fusion"));
}

/// How --distopt-shard-optimizer assigns what each rank owns.
enum class ZeroStrategy { Flat, Greedy };

inline llvm::cl::ValuesClass zeroStrategyChoices() {
  return llvm::cl::values(
      clEnumValN(ZeroStrategy::Flat, "flat", "chunks of a flat buffer"),
      clEnumValN(ZeroStrategy::Greedy, "greedy", "whole parameters"));
}

/// What the owners of updates that read whole matrices balance.
enum class OwnerBalance { Flops, Elements };

inline llvm::cl::ValuesClass ownerBalanceChoices() {
  return llvm::cl::values(
      clEnumValN(OwnerBalance::Flops, "flops", "the updates' arithmetic"),
      clEnumValN(OwnerBalance::Elements, "elements", "their elements"));
}

/// How ZeRO updates a matrix that an update reads whole (Muon's
/// orthogonalization, Dion's power iteration): on one owner, on every rank
/// from gathered chunks, or (Dion) in blocks of rows whose low-rank
/// factors alone move.
enum class MatrixPlan { Auto, Owner, Gather, LowRank };

inline llvm::cl::ValuesClass matrixPlanChoices() {
  return llvm::cl::values(
      clEnumValN(MatrixPlan::Auto, "auto",
                 "owner where it can run, else gather; per matrix by the "
                 "cost model when rates are given"),
      clEnumValN(MatrixPlan::Owner, "owner",
                 "whole on one owner, then broadcast"),
      clEnumValN(MatrixPlan::Gather, "gather",
                 "gathered and updated on every rank, each keeping its "
                 "chunk"),
      clEnumValN(MatrixPlan::LowRank, "lowrank",
                 "Dion: each rank updates its block of rows, only the "
                 "low-rank factors move"));
}

/// The type bf16/f16 gradients are reduced in (None: their own).
enum class ReduceDtype { None, F32, F64 };

/// The wide types --distopt-widen-reductions reduces in.
inline llvm::cl::ValuesClass reduceDtypeChoices() {
  return llvm::cl::values(clEnumValN(ReduceDtype::F32, "f32", "f32"),
                          clEnumValN(ReduceDtype::F64, "f64", "f64"));
}

/// The pipeline's reduce-dtype: also `none`, which leaves reductions be.
inline llvm::cl::ValuesClass pipelineReduceDtypeChoices() {
  return llvm::cl::values(
      clEnumValN(ReduceDtype::None, "none", "in the gradients' own type"),
      clEnumValN(ReduceDtype::F32, "f32", "f32"),
      clEnumValN(ReduceDtype::F64, "f64", "f64"));
}

} // namespace mlir::distopt

DISTOPT_CHOICE_PARSER(mlir::distopt::CollectiveBackend)
DISTOPT_CHOICE_PARSER(mlir::distopt::ZeroStrategy)
DISTOPT_CHOICE_PARSER(mlir::distopt::OwnerBalance)
DISTOPT_CHOICE_PARSER(mlir::distopt::MatrixPlan)
DISTOPT_CHOICE_PARSER(mlir::distopt::ReduceDtype)

#endif // DISTOPT_TRANSFORMS_PASSOPTIONS_H
