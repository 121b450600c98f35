//===- DistOptInterfaces.td - distopt op interfaces --------*- tablegen -*-===//
//
// CollectiveOpInterface: what every collective (synchronous or `_start`)
// tells the passes that lower, report, bucket and verify it.
// OptimizerOpInterface: what every optimizer update tells the passes that
// shard, compress, verify, name and lower it.
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

def DistOpt_OptimizerOpInterface : OpInterface<"OptimizerOpInterface"> {
  let cppNamespace = "::mlir::distopt";
  let description = [{
    An optimizer update with torch.optim's semantics: it reads a parameter,
    its gradient, its state tensors, the learning rate and the step number,
    and yields the new parameter and the new state. Its hyperparameters are
    attributes, compiled in, except those listed in
    `runtime_hyperparameter_names`, whose values are f64 operands read at run
    time (a scheduler or a training program may change them between steps).
    Passes handle every optimizer through this interface, without naming
    each update op.
  }];

  let methods = [
    InterfaceMethod<"The parameter (or fp32 main parameter) updated.",
      "::mlir::Value", "getParam">,
    InterfaceMethod<"The gradient the update reads.",
      "::mlir::Value", "getGrad">,
    InterfaceMethod<"The state tensors, in the order of getStateKeys().",
      "::mlir::Operation::operand_range", "getState">,
    InterfaceMethod<"The learning rate (a float scalar).",
      "::mlir::Value", "getLr">,
    InterfaceMethod<"The 1-based step number (i64).",
      "::mlir::Value", "getStep">,
    InterfaceMethod<"The new parameter.",
      "::mlir::Value", "getNewParam">,
    InterfaceMethod<"The new state tensors.",
      "::mlir::Operation::result_range", "getNewState">,
    InterfaceMethod<"torch.optim's names of the state tensors these "
                    "hyperparameters call for, in operand order.",
      "::llvm::SmallVector<::llvm::StringRef>", "getStateKeys">,
    StaticInterfaceMethod<"The state keys for the hyperparameters that "
                          "`hyperparameter` gives by attribute name (null "
                          "where absent: the attribute's default): what "
                          "getStateKeys() says of an op built with them.",
      "::llvm::SmallVector<::llvm::StringRef>", "getStateKeysFor",
      (ins "::llvm::function_ref<::mlir::Attribute(::llvm::StringRef)>":
           $hyperparameter)>,
    StaticInterfaceMethod<"The shape of state tensor `key` of a parameter "
                          "of shape `paramShape`, for the hyperparameters "
                          "`hyperparameter` gives (as getStateKeysFor): the "
                          "parameter's, unless the update keeps a factor of "
                          "its own shape (Dion's right factor).",
      "::llvm::SmallVector<int64_t>", "getStateShapeFor",
      (ins "::llvm::StringRef":$key, "::llvm::ArrayRef<int64_t>":$paramShape,
           "::llvm::function_ref<::mlir::Attribute(::llvm::StringRef)>":
               $hyperparameter),
      /*methodBody=*/"",
      /*defaultImplementation=*/[{
        return ::llvm::SmallVector<int64_t>(paramShape);
      }]>,
    StaticInterfaceMethod<"The hyperparameters (f64 attributes) that may be "
                          "given at run time instead, by their torch.optim "
                          "names.",
      "::llvm::ArrayRef<::llvm::StringRef>", "getRuntimeHyperparameterKeys">,
    StaticInterfaceMethod<"Whether each element of the new parameter and "
                          "state depends only on the same element of the "
                          "operands (and scalars), so that a shard updates "
                          "alone; false for an update that reads the whole "
                          "matrix (Muon's orthogonalization).",
      "bool", "isElementwise">,
    StaticInterfaceMethod<"The smallest rank of the parameters it updates "
                          "(2 for an update of matrices only, as Muon's; "
                          "the spec gives lower ranks to AdamW).",
      "int64_t", "getMinParamRank">,
    StaticInterfaceMethod<"The param spec's `optimizer.type` of this update "
                          "(\"adamw\").",
      "::llvm::StringRef", "getSpecType">,
    StaticInterfaceMethod<"The keys of the spec's `optimizer` object this "
                          "update reads besides `type` and `lr`, in the "
                          "order messages list them.",
      "::llvm::ArrayRef<::mlir::distopt::OptimizerSpecKey>", "getSpecKeys">,
    InterfaceMethod<"The compiled value of hyperparameter `key`, one of "
                    "getRuntimeHyperparameterKeys(): its attribute, or "
                    "the attribute's default.",
      "double", "getCompiledHyperparameter", (ins "::llvm::StringRef":$key)>,
    InterfaceMethod<"The floating-point operations of one update, roughly "
                    "(ZeRO's owner plan balances them across ranks): the "
                    "matrix products of one that reads whole matrices; for "
                    "an element-wise update its element count (its work "
                    "grows with it).",
      "int64_t", "getUpdateFlops">,
    InterfaceMethod<"The group over which the update averages what it "
                    "makes of the gradient it reads, this rank's own (Dion's "
                    "low-rank sync: its `group`); null for an update whose "
                    "gradient comes reduced.",
      "::mlir::FlatSymbolRefAttr", "getGradientGroup", (ins),
      /*methodBody=*/"",
      /*defaultImplementation=*/[{ return {}; }]>,
    InterfaceMethod<"The operands that give hyperparameters at run time.",
      "::mlir::Operation::operand_range", "getRuntimeHyperparameters">,
    InterfaceMethod<"Their names, one per operand.",
      "::mlir::ArrayAttr", "getRuntimeHyperparameterNames">
  ];

  let extraSharedClassDeclaration = [{
    /// The type state tensor `key` must have: the parameter's element
    /// type, in the shape getStateShapeFor gives.
    ::mlir::RankedTensorType getStateTypeFor(::llvm::StringRef key) {
      auto param = ::llvm::cast<::mlir::RankedTensorType>(
          $_op.getParam().getType());
      return ::mlir::RankedTensorType::get(
          $_op.getStateShapeFor(key, param.getShape(),
                                [&](::llvm::StringRef name) {
                                  return $_op->getAttr(name);
                                }),
          param.getElementType());
    }

    /// The operand that gives hyperparameter `key` at run time, or null
    /// when it is compiled in (its attribute).
    ::mlir::Value getRuntimeHyperparameter(::llvm::StringRef key) {
      for (auto [name, value] : ::llvm::zip_equal(
               $_op.getRuntimeHyperparameterNames(),
               $_op.getRuntimeHyperparameters()))
        if (::llvm::cast<::mlir::StringAttr>(name).getValue() == key)
          return value;
      return {};
    }
  }];

  let verify = [{
    return ::mlir::distopt::detail::verifyOptimizerOp($_op);
  }];
}

#endif // DISTOPT_DIALECT_DISTOPT_IR_DISTOPTINTERFACES_TD
