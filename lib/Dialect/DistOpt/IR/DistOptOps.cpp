//===- DistOptOps.cpp - distopt operations ----------------------*- C++ -*-===//
//
// Verifiers, folders, canonicalizations, type inference and custom assembly
// directives of the distopt ops. Every diagnostic here has a case in
// test/Dialect/DistOpt/invalid.mlir that checks its text.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <cstdio>
#include <limits>

using namespace mlir;
using namespace mlir::distopt;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

ProcessGroupOp mlir::distopt::lookupProcessGroup(Operation *from,
                                                 FlatSymbolRefAttr symbol) {
  if (!symbol)
    return nullptr;
  return SymbolTable::lookupNearestSymbolFrom<ProcessGroupOp>(from, symbol);
}

/// Looks up the process group `symbol` for a verifier; emits an error on `op`
/// and returns null when it does not name one.
static ProcessGroupOp verifyGroupSymbol(Operation *op, FlatSymbolRefAttr symbol,
                                        SymbolTableCollection &symbolTable) {
  auto group =
      symbolTable.lookupNearestSymbolFrom<ProcessGroupOp>(op, symbol.getAttr());
  if (!group)
    op->emitOpError() << symbol << " does not name a distopt.process_group";
  return group;
}

/// The size of the group `symbol` names when it is 1, for folders.
static bool isSingletonGroup(Operation *op, FlatSymbolRefAttr symbol) {
  ProcessGroupOp group = lookupProcessGroup(op, symbol);
  return group && group.getSize() == 1;
}

/// Prints a double the way users wrote it in diagnostics.
static std::string formatDouble(double value) {
  char text[32];
  snprintf(text, sizeof(text), "%g", value);
  return text;
}

static int64_t elementBytes(Type elementType) {
  return llvm::divideCeil(elementType.getIntOrFloatBitWidth(), 8);
}

SmallVector<int64_t> mlir::distopt::computeBucketOffsets(TypeRange types,
                                                         int64_t alignmentBytes,
                                                         int64_t *packedSize) {
  // Sizes saturate at INT64_MAX rather than overflow, so that an absurd
  // alignment yields a verifier error ("cannot hold"), not wrapped offsets.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  SmallVector<int64_t> offsets;
  int64_t end = 0;
  for (Type type : types) {
    auto tensor = cast<RankedTensorType>(type);
    int64_t alignElems = std::max<int64_t>(
        1, alignmentBytes / elementBytes(tensor.getElementType()));
    int64_t offset = end > kMax - alignElems
                         ? kMax
                         : static_cast<int64_t>(llvm::alignTo(end, alignElems));
    offsets.push_back(offset);
    int64_t numElements = tensor.getNumElements();
    end = offset > kMax - numElements ? kMax : offset + numElements;
  }
  if (packedSize)
    *packedSize = end;
  return offsets;
}

//===----------------------------------------------------------------------===//
// Custom directives
//===----------------------------------------------------------------------===//

/// reduction ::= `sum` | `avg` | `min` | `max` | `prod` | `premul_sum`,
/// optionally followed by `(` scale `)`.
static ParseResult parseReduction(OpAsmParser &parser, ReductionKindAttr &kind,
                                  FloatAttr &scale) {
  StringRef keyword;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseKeyword(&keyword))
    return failure();
  std::optional<ReductionKind> parsed = symbolizeReductionKind(keyword);
  if (!parsed)
    return parser.emitError(loc) << "unknown reduction '" << keyword
                                 << "'; expected sum, avg, min, max, prod "
                                    "or premul_sum";
  kind = ReductionKindAttr::get(parser.getContext(), *parsed);
  if (succeeded(parser.parseOptionalLParen())) {
    double value;
    if (parser.parseFloat(value) || parser.parseRParen())
      return failure();
    scale = parser.getBuilder().getF64FloatAttr(value);
  }
  return success();
}

static void printReduction(OpAsmPrinter &printer, Operation *,
                           ReductionKindAttr kind, FloatAttr scale) {
  printer << stringifyReductionKind(kind.getValue());
  if (scale) {
    printer << "(";
    printer.printFloat(scale.getValue());
    printer << ")";
  }
}

/// A type list; the results take the same types.
static ParseResult parseTypesAndSameResults(OpAsmParser &parser,
                                            SmallVectorImpl<Type> &types,
                                            SmallVectorImpl<Type> &results) {
  if (parser.parseTypeList(types))
    return failure();
  results.assign(types.begin(), types.end());
  return success();
}

static void printTypesAndSameResults(OpAsmPrinter &printer, Operation *,
                                     TypeRange types, TypeRange) {
  llvm::interleaveComma(types, printer);
}

/// The parameter's type, which the gradient and each state tensor share (the
/// verifier requires them to be equal).
static ParseResult
parseSameTypeAs(OpAsmParser &parser, Type &paramType,
                ArrayRef<OpAsmParser::UnresolvedOperand> state, Type &gradType,
                SmallVectorImpl<Type> &stateTypes) {
  if (parser.parseType(paramType))
    return failure();
  gradType = paramType;
  stateTypes.assign(state.size(), paramType);
  return success();
}

static void printSameTypeAs(OpAsmPrinter &printer, Operation *, Type paramType,
                            OperandRange, Type, TypeRange) {
  printer << paramType;
}

/// The gradient's type, which the optional error-feedback state shares.
static ParseResult
parseGradAndErrorTypes(OpAsmParser &parser, Type &gradType,
                       std::optional<OpAsmParser::UnresolvedOperand> error,
                       Type &errorType) {
  if (parser.parseType(gradType))
    return failure();
  if (error)
    errorType = gradType;
  return success();
}

static void printGradAndErrorTypes(OpAsmPrinter &printer, Operation *,
                                   Type gradType, Value, Type) {
  printer << gradType;
}

//===----------------------------------------------------------------------===//
// ProcessGroupOp, RankOp, GroupSizeOp
//===----------------------------------------------------------------------===//

LogicalResult ProcessGroupOp::verify() {
  if (getSize() < 1)
    return emitOpError() << "group size must be at least 1, got " << getSize();
  return success();
}

LogicalResult RankOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return success(verifyGroupSymbol(*this, getGroupAttr(), symbolTable));
}

OpFoldResult RankOp::fold(FoldAdaptor) {
  if (isSingletonGroup(*this, getGroupAttr()))
    return IntegerAttr::get(getType(), 0);
  return {};
}

LogicalResult
GroupSizeOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return success(verifyGroupSymbol(*this, getGroupAttr(), symbolTable));
}

OpFoldResult GroupSizeOp::fold(FoldAdaptor) {
  if (ProcessGroupOp group = lookupProcessGroup(*this, getGroupAttr()))
    return IntegerAttr::get(getType(), group.getSize());
  return {};
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

/// The tensor a collective yields: its result, or what its token carries.
static RankedTensorType getYieldedType(Value result) {
  if (auto token = dyn_cast<TokenType>(result.getType()))
    return token.getValueType();
  return cast<RankedTensorType>(result.getType());
}

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
  // The scale is applied in the element type: a factor that rounds to zero or
  // overflows there would silently zero or destroy the gradients.
  APFloat converted = *scale;
  bool losesInfo;
  converted.convert(floatType.getFloatSemantics(), APFloat::rmNearestTiesToEven,
                    &losesInfo);
  if ((converted.isZero() && !scale->isZero()) || converted.isInfinity())
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

/// Common checks of every collective: reduction, wire type, the yielded type.
/// `sameShape` collectives yield the input's type; the others (all_gather,
/// reduce_scatter) change dimension 0 only, checked against the group size
/// in verifyCollectiveGroup.
template <typename OpTy>
static LogicalResult verifyCollective(OpTy op, bool sameShape) {
  auto inputType = cast<RankedTensorType>(op.getInput().getType());
  RankedTensorType yielded = getYieldedType(op->getResult(0));
  Type elementType = inputType.getElementType();
  if (failed(verifyWireType(op, op.getWireType(), elementType)))
    return failure();
  if (sameShape) {
    if (yielded != inputType)
      return op.emitOpError()
             << "yields " << yielded << " but the input is " << inputType;
    return success();
  }
  if (inputType.getRank() == 0)
    return op.emitOpError("requires a tensor of rank at least 1");
  if (yielded.getElementType() != elementType ||
      yielded.getRank() != inputType.getRank() ||
      yielded.getShape().drop_front() != inputType.getShape().drop_front())
    return op.emitOpError()
           << "yields " << yielded << ", which differs from the input "
           << inputType << " in more than dimension 0";
  return success();
}

template <typename OpTy>
static LogicalResult verifyReducingCollective(OpTy op, bool sameShape) {
  if (failed(verifyReduction(
          op, op.getReduction(), op.getScale(),
          cast<RankedTensorType>(op.getInput().getType()).getElementType())))
    return failure();
  return verifyCollective(op, sameShape);
}

/// How dimension 0 of a collective's result relates to its input's.
enum class Dim0 { Same, Gathered, Scattered };

/// The checks that need the group: it exists, the root is in range, and
/// dimension 0 of the result matches the group size.
static LogicalResult verifyCollectiveGroup(Operation *op,
                                           FlatSymbolRefAttr symbol,
                                           SymbolTableCollection &symbolTable,
                                           Value input, Value result, Dim0 dim0,
                                           std::optional<int64_t> root) {
  ProcessGroupOp group = verifyGroupSymbol(op, symbol, symbolTable);
  if (!group)
    return failure();
  int64_t size = group.getSize();
  if (root && (*root < 0 || *root >= size))
    return op->emitOpError() << "root " << *root << " is out of range for "
                             << symbol << " of size " << size;
  if (dim0 == Dim0::Same)
    return success();
  auto inputType = cast<RankedTensorType>(input.getType());
  RankedTensorType yielded = getYieldedType(result);
  int64_t inDim = inputType.getDimSize(0);
  if (dim0 == Dim0::Scattered && inDim % size != 0)
    return op->emitOpError() << "dimension 0 of the input (" << inDim
                             << ") is not divisible by the size of " << symbol
                             << " (" << size << ")";
  int64_t expected = dim0 == Dim0::Scattered ? inDim / size : inDim * size;
  if (yielded.getDimSize(0) != expected)
    return op->emitOpError() << "dimension 0 of the result must be " << expected
                             << " for " << symbol << " of size " << size
                             << ", got " << yielded.getDimSize(0);
  return success();
}

#define DISTOPT_COLLECTIVE(OpTy, verifyFn, sameShape, dim0, root)              \
  LogicalResult OpTy::verify() { return verifyFn(*this, sameShape); }          \
  LogicalResult OpTy::verifySymbolUses(SymbolTableCollection &symbolTable) {   \
    return verifyCollectiveGroup(*this, getGroupAttr(), symbolTable,           \
                                 getInput(), getResult(), dim0, root);         \
  }

DISTOPT_COLLECTIVE(AllReduceOp, verifyReducingCollective, true, Dim0::Same,
                   std::nullopt)
DISTOPT_COLLECTIVE(AllReduceStartOp, verifyReducingCollective, true, Dim0::Same,
                   std::nullopt)
DISTOPT_COLLECTIVE(ReduceScatterOp, verifyReducingCollective, false,
                   Dim0::Scattered, std::nullopt)
DISTOPT_COLLECTIVE(ReduceScatterStartOp, verifyReducingCollective, false,
                   Dim0::Scattered, std::nullopt)
DISTOPT_COLLECTIVE(AllGatherOp, verifyCollective, false, Dim0::Gathered,
                   std::nullopt)
DISTOPT_COLLECTIVE(AllGatherStartOp, verifyCollective, false, Dim0::Gathered,
                   std::nullopt)
DISTOPT_COLLECTIVE(BroadcastOp, verifyCollective, true, Dim0::Same, getRoot())
DISTOPT_COLLECTIVE(BroadcastStartOp, verifyCollective, true, Dim0::Same,
                   getRoot())
DISTOPT_COLLECTIVE(ReduceOp, verifyReducingCollective, true, Dim0::Same,
                   getRoot())
DISTOPT_COLLECTIVE(ReduceStartOp, verifyReducingCollective, true, Dim0::Same,
                   getRoot())
#undef DISTOPT_COLLECTIVE

// On a group of one rank every collective returns its input, except a
// premul_sum, which still scales.
OpFoldResult AllReduceOp::fold(FoldAdaptor) {
  if (getReduction() != ReductionKind::PremulSum &&
      isSingletonGroup(*this, getGroupAttr()))
    return getInput();
  return {};
}

OpFoldResult ReduceScatterOp::fold(FoldAdaptor) {
  if (getReduction() != ReductionKind::PremulSum &&
      isSingletonGroup(*this, getGroupAttr()))
    return getInput();
  return {};
}

OpFoldResult ReduceOp::fold(FoldAdaptor) {
  if (getReduction() != ReductionKind::PremulSum &&
      isSingletonGroup(*this, getGroupAttr()))
    return getInput();
  return {};
}

OpFoldResult AllGatherOp::fold(FoldAdaptor) {
  if (isSingletonGroup(*this, getGroupAttr()))
    return getInput();
  return {};
}

OpFoldResult BroadcastOp::fold(FoldAdaptor) {
  if (isSingletonGroup(*this, getGroupAttr()))
    return getInput();
  return {};
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
// Buckets
//===----------------------------------------------------------------------===//

/// Checks a bucket against the tensors packed into it.
static LogicalResult verifyBucket(Operation *op, RankedTensorType bucket,
                                  TypeRange tensors, int64_t alignment,
                                  StringRef role) {
  if (tensors.empty())
    return op->emitOpError() << "requires at least one " << role;
  Type elementType = bucket.getElementType();
  for (auto [index, type] : llvm::enumerate(tensors)) {
    Type other = cast<RankedTensorType>(type).getElementType();
    if (other != elementType)
      return op->emitOpError()
             << role << " #" << index << " has element type " << other
             << " but the bucket's is " << elementType;
  }
  if (alignment < 1 || !llvm::isPowerOf2_64(alignment))
    return op->emitOpError()
           << "alignment must be a positive power of two, got " << alignment;
  int64_t bytes = elementBytes(elementType);
  if (alignment % bytes != 0)
    return op->emitOpError()
           << "alignment (" << alignment
           << " bytes) is not a multiple of the element size (" << bytes
           << " bytes)";
  int64_t packed;
  computeBucketOffsets(tensors, alignment, &packed);
  if (bucket.getNumElements() < packed)
    return op->emitOpError() << "bucket of " << bucket.getNumElements()
                             << " elements cannot hold the " << packed
                             << " elements packed at alignment " << alignment;
  return success();
}

LogicalResult BucketPackOp::verify() {
  return verifyBucket(*this, getBucket().getType(), getInputs().getTypes(),
                      getAlignment(), "input");
}

SmallVector<int64_t> BucketPackOp::getOffsets(int64_t *packedSize) {
  return computeBucketOffsets(getInputs().getTypes(), getAlignment(),
                              packedSize);
}

LogicalResult BucketUnpackOp::verify() {
  return verifyBucket(*this, getBucket().getType(), getOutputs().getTypes(),
                      getAlignment(), "output");
}

SmallVector<int64_t> BucketUnpackOp::getOffsets(int64_t *packedSize) {
  return computeBucketOffsets(getOutputs().getTypes(), getAlignment(),
                              packedSize);
}

namespace {
/// unpack(pack(xs)) -> xs when both use the same layout.
struct FoldUnpackOfPack : OpRewritePattern<BucketUnpackOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(BucketUnpackOp unpack,
                                PatternRewriter &rewriter) const override {
    auto pack = unpack.getBucket().getDefiningOp<BucketPackOp>();
    if (!pack || pack.getAlignment() != unpack.getAlignment() ||
        pack.getInputs().getTypes() != unpack.getOutputs().getTypes())
      return failure();
    rewriter.replaceOp(unpack, pack.getInputs());
    return success();
  }
};
} // namespace

void BucketUnpackOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                                 MLIRContext *context) {
  results.add<FoldUnpackOfPack>(context);
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

//===----------------------------------------------------------------------===//
// Sharding
//===----------------------------------------------------------------------===//

LogicalResult ShardSliceOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (in.getRank() == 0)
    return emitOpError("requires a tensor of rank at least 1");
  if (in.getElementType() != out.getElementType() ||
      in.getRank() != out.getRank() ||
      in.getShape().drop_front() != out.getShape().drop_front())
    return emitOpError() << "result " << out << " differs from the input " << in
                         << " in more than dimension 0";
  return success();
}

LogicalResult
ShardSliceOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyCollectiveGroup(*this, getGroupAttr(), symbolTable, getInput(),
                               getResult(), Dim0::Scattered, std::nullopt);
}

OpFoldResult ShardSliceOp::fold(FoldAdaptor) {
  if (isSingletonGroup(*this, getGroupAttr()))
    return getInput();
  return {};
}

LogicalResult OwnedByOp::verify() {
  Block &body = getBody().front();
  if (body.getNumArguments() != 0)
    return emitOpError("body must not take arguments");
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return emitOpError("body must end with distopt.yield");
  if (yield.getValues().getTypes() != getOtherwise().getTypes())
    return emitOpError() << "distopt.yield returns "
                         << yield.getValues().getTypes()
                         << " but the otherwise operands are "
                         << getOtherwise().getTypes();
  if (getResults().getTypes() != getOtherwise().getTypes())
    return emitOpError() << "results " << getResults().getTypes()
                         << " differ from the otherwise operands "
                         << getOtherwise().getTypes();
  return success();
}

LogicalResult OwnedByOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  ProcessGroupOp group = verifyGroupSymbol(*this, getGroupAttr(), symbolTable);
  if (!group)
    return failure();
  if (getOwner() < 0 || getOwner() >= group.getSize())
    return emitOpError() << "owner rank " << getOwner()
                         << " is out of range for " << getGroupAttr()
                         << " of size " << group.getSize();
  return success();
}

namespace {
/// On a group of one rank, rank 0 owns everything: inline the body.
struct InlineSingletonOwnedBy : OpRewritePattern<OwnedByOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(OwnedByOp op,
                                PatternRewriter &rewriter) const override {
    if (!isSingletonGroup(op, op.getGroupAttr()))
      return failure();
    Block &body = op.getBody().front();
    auto yield = cast<YieldOp>(body.getTerminator());
    SmallVector<Value> values = yield.getValues();
    rewriter.inlineBlockBefore(&body, op);
    rewriter.eraseOp(yield);
    rewriter.replaceOp(op, values);
    return success();
  }
};
} // namespace

void OwnedByOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                            MLIRContext *context) {
  results.add<InlineSingletonOwnedBy>(context);
}

//===----------------------------------------------------------------------===//
// Optimizer updates
//===----------------------------------------------------------------------===//

/// Checks `lo <= value` (and `value < hi` when given) for a hyperparameter;
/// NaN fails every range.
static LogicalResult checkRange(Operation *op, StringRef name, APFloat value,
                                double lo, std::optional<double> hi = {}) {
  double v = value.convertToDouble();
  if (hi) {
    if (!(v >= lo && v < *hi))
      return op->emitOpError()
             << "'" << name << "' must be in [" << formatDouble(lo) << ", "
             << formatDouble(*hi) << "), got " << formatDouble(v);
    return success();
  }
  if (!(v >= lo))
    return op->emitOpError()
           << "'" << name << "' must be non-negative, got " << formatDouble(v);
  return success();
}

/// The checks every optimizer update shares: types, state count, and the
/// learning rate and step where they are constants.
template <typename OpTy>
static LogicalResult verifyOptimizer(OpTy op, StringRef stateNames) {
  Type paramType = op.getParam().getType();
  if (op.getGrad().getType() != paramType)
    return op.emitOpError() << "gradient type " << op.getGrad().getType()
                            << " differs from the parameter type " << paramType;
  for (auto [index, state] : llvm::enumerate(op.getState()))
    if (state.getType() != paramType)
      return op.emitOpError()
             << "state #" << index << " type " << state.getType()
             << " differs from the parameter type " << paramType;
  unsigned expected = op.getExpectedNumState();
  if (op.getState().size() != expected)
    return op.emitOpError()
           << "expects " << expected << " state tensors (" << stateNames
           << ") for these hyperparameters, got " << op.getState().size();
  FloatAttr lr;
  if (matchPattern(op.getLr(), m_Constant(&lr)) &&
      !(lr.getValueAsDouble() >= 0))
    return op.emitOpError() << "learning rate must be non-negative, got "
                            << formatDouble(lr.getValueAsDouble());
  APInt step;
  if (matchPattern(op.getStep(), m_ConstantInt(&step)) &&
      step.getSExtValue() < 1)
    return op.emitOpError()
           << "step counts from 1, got " << step.getSExtValue();
  return success();
}

/// Results: the parameter's type, then each state tensor's.
static LogicalResult inferOptimizerTypes(ValueRange operands,
                                         SmallVectorImpl<Type> &types) {
  // Operands: param, grad, state..., lr, step.
  if (operands.size() < 4)
    return failure();
  types.push_back(operands[0].getType());
  for (Value state : operands.drop_front(2).drop_back(2))
    types.push_back(state.getType());
  return success();
}

#define DISTOPT_OPTIMIZER_INFER(OpTy)                                          \
  LogicalResult OpTy::inferReturnTypes(                                        \
      MLIRContext *, std::optional<Location>, ValueRange operands,             \
      DictionaryAttr, OpaqueProperties, RegionRange,                           \
      SmallVectorImpl<Type> &inferredReturnTypes) {                            \
    return inferOptimizerTypes(operands, inferredReturnTypes);                 \
  }
DISTOPT_OPTIMIZER_INFER(SGDUpdateOp)
DISTOPT_OPTIMIZER_INFER(AdamUpdateOp)
DISTOPT_OPTIMIZER_INFER(AdamWUpdateOp)
DISTOPT_OPTIMIZER_INFER(RMSpropUpdateOp)
DISTOPT_OPTIMIZER_INFER(AdagradUpdateOp)
#undef DISTOPT_OPTIMIZER_INFER

unsigned SGDUpdateOp::getExpectedNumState() {
  return getMomentum().isZero() ? 0 : 1;
}

LogicalResult SGDUpdateOp::verify() {
  if (failed(checkRange(*this, "momentum", getMomentum(), 0)) ||
      failed(checkRange(*this, "weight_decay", getWeightDecay(), 0)))
    return failure();
  if (getNesterov() && (getMomentum().isZero() || !getDampening().isZero()))
    return emitOpError("nesterov requires a momentum and zero dampening");
  return verifyOptimizer(*this, "the momentum buffer when momentum != 0");
}

unsigned AdamUpdateOp::getExpectedNumState() { return getAmsgrad() ? 3 : 2; }
unsigned AdamWUpdateOp::getExpectedNumState() { return getAmsgrad() ? 3 : 2; }

template <typename OpTy> static LogicalResult verifyAdam(OpTy op) {
  if (failed(checkRange(op, "beta1", op.getBeta1(), 0, 1.0)) ||
      failed(checkRange(op, "beta2", op.getBeta2(), 0, 1.0)) ||
      failed(checkRange(op, "eps", op.getEps(), 0)) ||
      failed(checkRange(op, "weight_decay", op.getWeightDecay(), 0)))
    return failure();
  return verifyOptimizer(
      op, "exp_avg, exp_avg_sq, and max_exp_avg_sq with amsgrad");
}

LogicalResult AdamUpdateOp::verify() { return verifyAdam(*this); }
LogicalResult AdamWUpdateOp::verify() { return verifyAdam(*this); }

unsigned RMSpropUpdateOp::getExpectedNumState() {
  return 1 + (getMomentum().convertToDouble() > 0) + getCentered();
}

LogicalResult RMSpropUpdateOp::verify() {
  if (failed(checkRange(*this, "alpha", getAlpha(), 0)) ||
      failed(checkRange(*this, "eps", getEps(), 0)) ||
      failed(checkRange(*this, "weight_decay", getWeightDecay(), 0)) ||
      failed(checkRange(*this, "momentum", getMomentum(), 0)))
    return failure();
  return verifyOptimizer(*this, "square_avg, momentum_buffer when momentum > "
                                "0, grad_avg when centered");
}

unsigned AdagradUpdateOp::getExpectedNumState() { return 1; }

LogicalResult AdagradUpdateOp::verify() {
  if (failed(checkRange(*this, "lr_decay", getLrDecay(), 0)) ||
      failed(checkRange(*this, "weight_decay", getWeightDecay(), 0)) ||
      failed(checkRange(*this, "eps", getEps(), 0)) ||
      failed(checkRange(*this, "initial_accumulator_value",
                        getInitialAccumulatorValue(), 0)))
    return failure();
  return verifyOptimizer(*this, "the sum of squares");
}

//===----------------------------------------------------------------------===//
// Mixed precision and clipping
//===----------------------------------------------------------------------===//

/// Ops whose communication depends on an optional group: they communicate
/// (and so must stay in order with the collectives) only when it is present.
static void addGroupEffects(
    FlatSymbolRefAttr group,
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>>
        &effects) {
  if (!group)
    return;
  effects.emplace_back(MemoryEffects::Read::get(), CommunicatorResource::get());
  effects.emplace_back(MemoryEffects::Write::get(),
                       CommunicatorResource::get());
}

static LogicalResult verifyOptionalGroup(Operation *op, FlatSymbolRefAttr group,
                                         SymbolTableCollection &symbolTable) {
  return success(!group || verifyGroupSymbol(op, group, symbolTable));
}

LogicalResult AllFiniteOp::verify() {
  if (getInputs().empty())
    return emitOpError("requires at least one input");
  return success();
}

void AllFiniteOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>>
        &effects) {
  addGroupEffects(getGroupAttr(), effects);
}

LogicalResult AllFiniteOp::verifySymbolUses(SymbolTableCollection &table) {
  return verifyOptionalGroup(*this, getGroupAttr(), table);
}

LogicalResult LossScaleUpdateOp::verify() {
  if (!(getGrowthFactor().convertToDouble() > 1))
    return emitOpError() << "growth_factor must be greater than 1, got "
                         << formatDouble(getGrowthFactor().convertToDouble());
  double backoff = getBackoffFactor().convertToDouble();
  if (!(backoff > 0 && backoff < 1))
    return emitOpError() << "backoff_factor must be in (0, 1), got "
                         << formatDouble(backoff);
  if (getGrowthInterval() < 1)
    return emitOpError() << "growth_interval must be at least 1, got "
                         << getGrowthInterval();
  return success();
}

LogicalResult ClipGradNormOp::verify() {
  if (getInputs().empty())
    return emitOpError("requires at least one input");
  if (getClipped().getTypes() != getInputs().getTypes())
    return emitOpError() << "results " << getClipped().getTypes()
                         << " differ from the inputs "
                         << getInputs().getTypes();
  double maxNorm = getMaxNorm().convertToDouble();
  if (!(maxNorm > 0) || std::isinf(maxNorm))
    return emitOpError() << "max_norm must be positive and finite, got "
                         << formatDouble(maxNorm);
  double normType = getNormType().convertToDouble();
  if (!(normType > 0))
    return emitOpError() << "norm_type must be positive (inf for the maximum "
                            "norm), got "
                         << formatDouble(normType);
  return success();
}

void ClipGradNormOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>>
        &effects) {
  addGroupEffects(getGroupAttr(), effects);
}

LogicalResult ClipGradNormOp::verifySymbolUses(SymbolTableCollection &table) {
  return verifyOptionalGroup(*this, getGroupAttr(), table);
}

#define GET_OP_CLASSES
#include "distopt/Dialect/DistOpt/IR/DistOptOps.cpp.inc"
