//===- CollectiveOps.cpp - ops that communicate ----------------*- C++ -*-===//
//
// The verifiers and folders of the ops that communicate: the collectives,
// which share theirs through CollectiveOpInterface, and the compressed
// reductions (PowerSGD, top-K).
//
//===----------------------------------------------------------------------===//

#include "OpHelpers.h"

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"

#include "llvm/Support/MathExtras.h"

#include <cmath>

using namespace mlir;
using namespace mlir::distopt;
using namespace mlir::distopt::detail;

#include "distopt/Dialect/DistOpt/IR/DistOptInterfaces.cpp.inc"

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

bool mlir::distopt::communicates(Operation *op) {
  auto effects = dyn_cast<MemoryEffectOpInterface>(op);
  if (!effects)
    return false;
  SmallVector<MemoryEffects::EffectInstance> instances;
  effects.getEffects(instances);
  return llvm::any_of(instances, [](const MemoryEffects::EffectInstance &e) {
    return e.getResource() == CommunicatorResource::get();
  });
}

bool mlir::distopt::isRepresentableScale(const APFloat &scale, FloatType type) {
  // The scale is applied in the element type: a factor that rounds to zero or
  // overflows there would silently zero or destroy the gradients.
  APFloat converted = scale;
  bool losesInfo;
  converted.convert(type.getFloatSemantics(), APFloat::rmNearestTiesToEven,
                    &losesInfo);
  return scale.isFinite() && !converted.isInfinity() &&
         (!converted.isZero() || scale.isZero());
}

/// Checks a reduction kind and its optional scale against an element type.
static LogicalResult verifyReduction(Operation *op, ReductionKind kind,
                                     std::optional<APFloat> scale,
                                     Type elementType) {
  if (kind != ReductionKind::PremulSum) {
    if (scale)
      return op->emitOpError("a scale is only valid with premul_sum");
    return success();
  }
  if (!scale)
    return op->emitOpError("premul_sum requires a scale");
  auto floatType = dyn_cast<FloatType>(elementType);
  if (!floatType)
    return op->emitOpError()
           << "premul_sum requires a floating-point element type, got "
           << elementType;
  if (!scale->isFinite())
    return op->emitOpError("premul_sum scale must be finite");
  if (!isRepresentableScale(*scale, floatType))
    return op->emitOpError()
           << "premul_sum scale " << formatDouble(scale->convertToDouble())
           << " is not representable in " << elementType;
  return success();
}

/// Checks the optional wire type against the data's element type.
static LogicalResult verifyWireType(Operation *op, std::optional<Type> wire,
                                    Type elementType) {
  if (!wire)
    return success();
  if (!isa<FloatType>(elementType))
    return op->emitOpError()
           << "a wire type requires floating-point data, got " << elementType;
  if (wire->getIntOrFloatBitWidth() > elementType.getIntOrFloatBitWidth())
    return op->emitOpError()
           << "wire type " << *wire << " is wider than the element type "
           << elementType;
  return success();
}

LogicalResult mlir::distopt::detail::verifyCollectiveOp(Operation *op) {
  auto collective = cast<CollectiveOpInterface>(op);
  auto inputType = cast<RankedTensorType>(collective.getInput().getType());
  Type elementType = inputType.getElementType();
  if (std::optional<ReductionKind> kind = collective.getReductionKind())
    if (failed(verifyReduction(op, *kind, collective.getScale(), elementType)))
      return failure();
  if (failed(verifyWireType(op, collective.getWireType(), elementType)))
    return failure();
  RankedTensorType yielded = collective.getYieldedType();
  // all_gather and reduce_scatter change dimension 0, checked against the
  // group size in verifyCollectiveSymbolUses.
  if (collective.keepsShape()) {
    if (yielded != inputType)
      return op->emitOpError()
             << "yields " << yielded << " but the input is " << inputType;
    return success();
  }
  if (inputType.getRank() == 0)
    return op->emitOpError("requires a tensor of rank at least 1");
  if (yielded.getElementType() != elementType ||
      yielded.getRank() != inputType.getRank() ||
      yielded.getShape().drop_front() != inputType.getShape().drop_front())
    return op->emitOpError()
           << "yields " << yielded << ", which differs from the input "
           << inputType << " in more than dimension 0";
  return success();
}

LogicalResult mlir::distopt::detail::verifyCollectiveSymbolUses(
    Operation *op, SymbolTableCollection &symbolTable) {
  auto collective = cast<CollectiveOpInterface>(op);
  FlatSymbolRefAttr symbol = collective.getGroupAttr();
  ProcessGroupOp group = verifyGroupSymbol(op, symbol, symbolTable);
  if (!group)
    return failure();
  int64_t size = group.getSize();
  std::optional<int64_t> root = collective.getRootRank();
  if (root && (*root < 0 || *root >= size))
    return op->emitOpError() << "root " << *root << " is out of range for "
                             << symbol << " of size " << size;
  if (collective.keepsShape())
    return success();
  auto inputType = cast<RankedTensorType>(collective.getInput().getType());
  return verifyDim0AgainstGroup(op, group, inputType.getDimSize(0),
                                collective.getYieldedType().getDimSize(0),
                                collective.getCollectiveKind() ==
                                    CollectiveKind::ReduceScatter);
}

LogicalResult mlir::distopt::detail::verifyDim0AgainstGroup(
    Operation *op, ProcessGroupOp group, int64_t inDim, int64_t outDim,
    bool scatters) {
  int64_t size = group.getSize();
  StringRef name = group.getSymName();
  if (scatters && inDim % size != 0)
    return op->emitOpError() << "dimension 0 of the input (" << inDim
                             << ") is not divisible by the size of @" << name
                             << " (" << size << ")";
  int64_t expected = scatters ? inDim / size : inDim * size;
  if (outDim != expected)
    return op->emitOpError()
           << "dimension 0 of the result must be " << expected << " for @"
           << name << " of size " << size << ", got " << outDim;
  return success();
}

double mlir::distopt::ringBytesSent(CollectiveKind kind, int64_t payloadBytes,
                                    int64_t groupSize) {
  double share =
      groupSize > 0 ? static_cast<double>(groupSize - 1) / groupSize : 0;
  double factor = kind == CollectiveKind::AllReduce ? 2 : 1;
  return factor * share * static_cast<double>(payloadBytes);
}

RootedCollectiveCost
mlir::distopt::getRootedCollectiveCost(CollectiveKind kind,
                                       int64_t payloadBytes,
                                       int64_t slicedBytes, int64_t groupSize) {
  bool tree = kind == CollectiveKind::Broadcast;
  int64_t n = groupSize;
  double payload = static_cast<double>(payloadBytes);
  if (n <= 1)
    return {0, 0};
  // The runtime's rule (chainSlice): a binomial tree for broadcasts under
  // 1 MiB, the root sending to log2(n) children in a row; otherwise
  // sqrt((n - 2) x bytes / 256 KiB) slices of at most 4 MiB (on two
  // ranks, slices of 4 MiB), moving one link per step. (Not the NCCL
  // backend's algorithms, nor DISTOPT_RT_RING_SLICE_KB's other caps.)
  constexpr double kLatencyBytes = 256 * 1024, kMaxSlice = 4 * 1024 * 1024;
  if (tree && (n <= 2 || payload < 1024 * 1024)) {
    int64_t levels = llvm::Log2_64_Ceil(static_cast<uint64_t>(n));
    return {levels, levels * payload};
  }
  double sliced = tree ? payload : static_cast<double>(slicedBytes);
  double slices =
      std::max(1.0, std::ceil(std::sqrt((n - 2) * sliced / kLatencyBytes)));
  slices = std::max(slices, std::ceil(sliced / kMaxSlice));
  int64_t steps = static_cast<int64_t>(slices) + n - 2;
  return {steps, payload * static_cast<double>(steps) / slices};
}

std::string mlir::distopt::getRuntimeFunctionName(CollectiveOpInterface op) {
  std::string name = "distopt_rt_";
  name += stringifyCollectiveKind(op.getCollectiveKind());
  if (op.isAsync())
    name += "_start";
  return name;
}

/// On a group of one rank every collective returns its input, except a
/// premul_sum, which still scales.
static OpFoldResult foldOnSingletonGroup(CollectiveOpInterface op) {
  if (op.getReductionKind() == ReductionKind::PremulSum ||
      !isSingletonGroup(op, op.getGroupAttr()))
    return {};
  return op.getInput();
}

OpFoldResult AllReduceOp::fold(FoldAdaptor) {
  return foldOnSingletonGroup(*this);
}
OpFoldResult ReduceScatterOp::fold(FoldAdaptor) {
  return foldOnSingletonGroup(*this);
}
OpFoldResult ReduceOp::fold(FoldAdaptor) { return foldOnSingletonGroup(*this); }
OpFoldResult AllGatherOp::fold(FoldAdaptor) {
  return foldOnSingletonGroup(*this);
}
OpFoldResult BroadcastOp::fold(FoldAdaptor) {
  return foldOnSingletonGroup(*this);
}

LogicalResult WaitOp::inferReturnTypes(
    MLIRContext *, std::optional<Location>, ValueRange operands, DictionaryAttr,
    OpaqueProperties, RegionRange, SmallVectorImpl<Type> &inferredReturnTypes) {
  auto token = dyn_cast<TokenType>(operands.front().getType());
  if (!token)
    return failure();
  inferredReturnTypes.push_back(token.getValueType());
  return success();
}

//===----------------------------------------------------------------------===//
// Compression
//===----------------------------------------------------------------------===//

LogicalResult PowerSGDAllReduceOp::verify() {
  if (getRank() < 1)
    return emitOpError() << "PowerSGD rank must be at least 1, got "
                         << getRank();
  auto grad = cast<RankedTensorType>(getGrad().getType());
  if (grad.getRank() != 2)
    return emitOpError() << "gradient must be a matrix (rank 2), got rank "
                         << grad.getRank();
  if (grad.isDynamicDim(0) || grad.isDynamicDim(1))
    return emitOpError("gradient must have a static shape");
  int64_t n = grad.getDimSize(0), m = grad.getDimSize(1), r = getRank();
  if (r > std::min(n, m))
    return emitOpError() << "PowerSGD rank " << r
                         << " exceeds min(rows, columns) = " << std::min(n, m);
  auto expect = [&](Value value, int64_t rows, StringRef name,
                    StringRef what) -> LogicalResult {
    auto type = RankedTensorType::get({rows, r}, grad.getElementType());
    if (value.getType() != type)
      return emitOpError() << name << " must be " << type << " (" << what
                           << " x rank), got " << value.getType();
    return success();
  };
  if (failed(expect(getP(), n, "P", "rows of the gradient")) ||
      failed(expect(getQ(), m, "Q", "columns of the gradient")))
    return failure();
  if (getError() && getError().getType() != grad)
    return emitOpError() << "error state type " << getError().getType()
                         << " differs from the gradient type " << grad;
  if (!(getOrthogonalizationEpsilon().convertToDouble() >= 0))
    return emitOpError("orthogonalization_epsilon must be non-negative");
  return success();
}

LogicalResult PowerSGDAllReduceOp::inferReturnTypes(
    MLIRContext *, std::optional<Location>, ValueRange operands, DictionaryAttr,
    OpaqueProperties, RegionRange, SmallVectorImpl<Type> &inferredReturnTypes) {
  llvm::append_range(inferredReturnTypes, operands.getTypes());
  return success();
}

LogicalResult
PowerSGDAllReduceOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return success(verifyGroupSymbol(*this, getGroupAttr(), symbolTable));
}

LogicalResult OrthogonalizeOp::verify() {
  if (getInput().getType().getRank() != 2)
    return emitOpError() << "requires a matrix (rank 2), got rank "
                         << getInput().getType().getRank();
  if (!(getEpsilon().convertToDouble() >= 0))
    return emitOpError("epsilon must be non-negative");
  return success();
}

LogicalResult TopKAllReduceOp::verify() {
  double density = getDensity().convertToDouble();
  if (!(density > 0 && density <= 1))
    return emitOpError() << "density must be in (0, 1], got "
                         << formatDouble(density);
  ReductionKind kind = getReduction();
  if (kind != ReductionKind::Sum && kind != ReductionKind::Avg &&
      kind != ReductionKind::PremulSum)
    return emitOpError() << "top-K reduction must be sum, avg or premul_sum, "
                            "got "
                         << stringifyReductionKind(kind);
  return verifyReduction(*this, kind, getScale(),
                         getGrad().getType().getElementType());
}

LogicalResult
TopKAllReduceOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return success(verifyGroupSymbol(*this, getGroupAttr(), symbolTable));
}
