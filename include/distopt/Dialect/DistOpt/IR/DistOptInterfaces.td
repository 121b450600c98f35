//===- DistOptInterfaces.td - distopt op interfaces --------*- tablegen -*-===//
//
// CollectiveOpInterface: what every collective (synchronous or `_start`)
// tells the passes that lower, report, bucket and verify it.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_DIALECT_DISTOPT_IR_DISTOPTINTERFACES_TD
#define DISTOPT_DIALECT_DISTOPT_IR_DISTOPTINTERFACES_TD

include "mlir/IR/OpBase.td"

def DistOpt_CollectiveOpInterface : OpInterface<"CollectiveOpInterface"> {
  let cppNamespace = "::mlir::distopt";
  let description = [{
    A collective over a process group: every rank contributes `input`, and
    the op yields its share of the combined data, either as its result or, for
    a `_start` op, through the token that `distopt.wait` completes. The
    interface exposes the group, the kind of collective, its reduction and
    root where it has them, the wire type and the bytes it moves, so that
    passes handle the ten collective ops without naming each of them.
  }];

  let methods = [
    InterfaceMethod<"What the collective computes.",
      "::mlir::distopt::CollectiveKind", "getCollectiveKind">,
    InterfaceMethod<"The tensor this rank contributes.",
      "::mlir::Value", "getInput">,
    InterfaceMethod<"The process group the collective runs over.",
      "::mlir::FlatSymbolRefAttr", "getGroupAttr">,
    InterfaceMethod<"The element type values travel as, when not their own.",
      "std::optional<::mlir::Type>", "getWireType">,
    InterfaceMethod<"How contributions combine; none for gathers and "
                    "broadcasts.",
      "std::optional<::mlir::distopt::ReductionKind>", "getReductionKind">,
    InterfaceMethod<"The premul_sum factor, when there is one.",
      "std::optional<::llvm::APFloat>", "getScale">,
    InterfaceMethod<"The rank that sends (broadcast) or receives (reduce).",
      "std::optional<int64_t>", "getRootRank">,
    InterfaceMethod<"Whether the op returns a token instead of the data.",
      "bool", "isAsync", (ins), [{}], [{
        return ::llvm::isa<::mlir::distopt::TokenType>(
            $_op->getResult(0).getType());
      }]>,
    InterfaceMethod<"The tensor the op yields: its result, or what its "
                    "token carries.",
      "::mlir::RankedTensorType", "getYieldedType", (ins), [{}], [{
        ::mlir::Type type = $_op->getResult(0).getType();
        if (auto token = ::llvm::dyn_cast<::mlir::distopt::TokenType>(type))
          return token.getValueType();
        return ::llvm::cast<::mlir::RankedTensorType>(type);
      }]>
  ];

  let extraSharedClassDeclaration = [{
    /// Whether the op combines the contributions (a reduction) rather than
    /// moving them (gather, broadcast).
    bool reduces() { return $_op.getReductionKind().has_value(); }

    /// Whether the op yields a tensor of its input's type (and so the
    /// runtime works in place): all but reduce_scatter and all_gather,
    /// which change dimension 0 (also on a group of one rank).
    bool keepsShape() {
      ::mlir::distopt::CollectiveKind kind = $_op.getCollectiveKind();
      return kind != ::mlir::distopt::CollectiveKind::ReduceScatter &&
             kind != ::mlir::distopt::CollectiveKind::AllGather;
    }

    /// The whole tensor the collective moves: the gathered result of an
    /// all_gather, the input of the others.
    ::mlir::RankedTensorType getFullType() {
      if ($_op.getCollectiveKind() == ::mlir::distopt::CollectiveKind::AllGather)
        return $_op.getYieldedType();
      return ::llvm::cast<::mlir::RankedTensorType>($_op.getInput().getType());
    }

    /// Bytes of the whole tensor as it travels, in the wire type if any.
    int64_t getPayloadBytes() {
      return ::mlir::distopt::getShapedBytes(
          $_op.getFullType(), $_op.getWireType().value_or(::mlir::Type()));
    }

    /// Bytes each rank sends over a group of `groupSize` ranks.
    double getBytesSentPerRank(int64_t groupSize) {
      return ::mlir::distopt::ringBytesSent(
          $_op.getCollectiveKind(), $_op.getPayloadBytes(), groupSize);
    }
  }];

  let verify = [{
    return ::mlir::distopt::detail::verifyCollectiveOp($_op);
  }];
}

#endif // DISTOPT_DIALECT_DISTOPT_IR_DISTOPTINTERFACES_TD
