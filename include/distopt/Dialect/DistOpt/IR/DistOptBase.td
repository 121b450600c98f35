//===- DistOptBase.td - distopt dialect, enums, types ------*- tablegen -*-===//
//
// The dialect definition, its enumerations, its types and the op base classes
// shared by DistOptOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_DIALECT_DISTOPT_IR_DISTOPTBASE_TD
#define DISTOPT_DIALECT_DISTOPT_IR_DISTOPTBASE_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Dialect
//===----------------------------------------------------------------------===//

def DistOpt_Dialect : Dialect {
  let name = "distopt";
  let cppNamespace = "::mlir::distopt";
  let summary = "The distributed optimizer step of data-parallel training.";
  let description = [{
    The `distopt` dialect makes the tail of a data-parallel training step a
    program: gradient collectives over a process group, gradient buckets,
    gradient compression (PowerSGD, top-K), ZeRO-style ownership of parameters
    and optimizer state, mixed-precision bookkeeping, global-norm clipping and
    the optimizer updates themselves, with torch.optim's semantics.

    All ops work on tensors (value semantics). Ops that communicate carry a
    read and write effect on the `Communicator` resource, so that generic
    transformations never delete, duplicate or reorder them across each other.
    See docs/dialect.md for the op families and the exact formulas.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let hasConstantMaterializer = 1;
  // The step ABI's attributes (StepABI.h, docs/step-abi.md), checked where
  // they are written: on arguments, results, functions and the module.
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let hasOperationAttrVerify = 1;
}

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def DistOpt_ReductionKind : I32EnumAttr<"ReductionKind",
    "how a collective combines the contributions of the ranks", [
  I32EnumAttrCase<"Sum", 0, "sum">,
  I32EnumAttrCase<"Avg", 1, "avg">,
  I32EnumAttrCase<"Min", 2, "min">,
  I32EnumAttrCase<"Max", 3, "max">,
  I32EnumAttrCase<"Prod", 4, "prod">,
  // Each contribution is multiplied by `scale` before summation (NCCL's
  // ncclRedOpCreatePreMulSum).
  I32EnumAttrCase<"PremulSum", 5, "premul_sum">
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::distopt";
}

def DistOpt_CollectiveKind : I32EnumAttr<"CollectiveKind",
    "what a collective computes; its name is the op's and the runtime's", [
  I32EnumAttrCase<"AllReduce", 0, "all_reduce">,
  I32EnumAttrCase<"ReduceScatter", 1, "reduce_scatter">,
  I32EnumAttrCase<"AllGather", 2, "all_gather">,
  I32EnumAttrCase<"Broadcast", 3, "broadcast">,
  I32EnumAttrCase<"Reduce", 4, "reduce">
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::distopt";
}

def DistOpt_ReductionKindAttr
    : EnumAttr<DistOpt_Dialect, DistOpt_ReductionKind, "reduction"> {
  let assemblyFormat = "`<` $value `>`";
}

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

def DistOpt_TokenType : TypeDef<DistOpt_Dialect, "Token"> {
  let mnemonic = "token";
  let summary = "the pending result of an asynchronous collective";
  let description = [{
    Produced by a `*_start` collective and consumed by `distopt.wait`, which
    yields the tensor of type `valueType`. Between the two, the collective may
    run concurrently with other work.

    ```mlir
    !distopt.token<tensor<1024xf32>>
    ```
  }];
  let parameters = (ins "::mlir::RankedTensorType":$valueType);
  let assemblyFormat = "`<` $valueType `>`";
}

//===----------------------------------------------------------------------===//
// Resources and op base classes
//===----------------------------------------------------------------------===//

/// The inter-rank communicator. Every op that communicates reads and writes it.
def DistOpt_CommunicatorResource
    : Resource<"::mlir::distopt::CommunicatorResource">;

def DistOpt_Communicates : MemoryEffects<[
  MemRead<DistOpt_CommunicatorResource>, MemWrite<DistOpt_CommunicatorResource>
]>;

class DistOpt_Op<string mnemonic, list<Trait> traits = []>
    : Op<DistOpt_Dialect, mnemonic, traits>;

/// An op that communicates over the process group named by `$group`.
class DistOpt_GroupOp<string mnemonic, list<Trait> traits = []>
    : DistOpt_Op<mnemonic, !listconcat(traits, [
        DistOpt_Communicates,
        DeclareOpInterfaceMethods<SymbolUserOpInterface>])>;

/// A signless i64 attribute read as a signed value (upstream I64Attr returns
/// uint64_t, which would turn a negative rank into a huge one).
def DistOpt_I64Attr : TypedSignlessIntegerAttrBase<I64, "int64_t",
                                                   "64-bit integer attribute"> {
  let convertFromStorage = "$_self.getValue().getSExtValue()";
}

def DistOpt_FloatTensor : RankedTensorOf<[AnyFloat]>;
def DistOpt_BucketTensor : Type<
    And<[StaticShapeTensorOf<[AnyFloat, AnySignlessInteger]>.predicate,
         HasAnyRankOfPred<[1]>]>,
    "1-D statically shaped tensor of float or integer values",
    "::mlir::RankedTensorType">;
def DistOpt_Scalar : AnyTypeOf<[AnyFloat]>;

#endif // DISTOPT_DIALECT_DISTOPT_IR_DISTOPTBASE_TD
