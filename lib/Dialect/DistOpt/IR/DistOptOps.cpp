//===- DistOptOps.cpp - distopt operations ----------------------*- C++ -*-===//
//
// Custom assembly directives, and the verifiers, folders and
// canonicalizations of process groups, buckets and sharding. Collectives and
// compression are in CollectiveOps.cpp, optimizer updates and mixed precision
// in OptimizerOps.cpp. Every diagnostic of the three files has a case in
// test/Dialect/DistOpt/invalid.mlir that checks its text.
//
//===----------------------------------------------------------------------===//

#include "OpHelpers.h"

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Support/Limits.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Sequence.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <cstdio>
#include <limits>

using namespace mlir;
using namespace mlir::distopt;
using namespace mlir::distopt::detail;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

AllFiniteOp mlir::distopt::getFusedFiniteCheck(ClipGradNormOp clip) {
  if (!clip.getTensorBoundsAttr() || !clip.getGroupAttr())
    return {};
  Block *block = clip->getBlock();
  for (Operation &op : *block) {
    if (&op == clip.getOperation())
      return {};
    auto check = dyn_cast<AllFiniteOp>(op);
    if (!check || check.getGroupAttr() != clip.getGroupAttr())
      continue;
    bool readLater = llvm::all_of(check->getUsers(), [&](Operation *user) {
      Operation *inBlock = block->findAncestorOpInBlock(*user);
      return inBlock && clip->isBeforeInBlock(inBlock);
    });
    if (readLater)
      return check;
  }
  return {};
}

ProcessGroupOp mlir::distopt::lookupProcessGroup(Operation *from,
                                                 FlatSymbolRefAttr symbol) {
  if (!symbol)
    return nullptr;
  return SymbolTable::lookupNearestSymbolFrom<ProcessGroupOp>(from, symbol);
}

ProcessGroupOp
mlir::distopt::detail::verifyGroupSymbol(Operation *op,
                                         FlatSymbolRefAttr symbol,
                                         SymbolTableCollection &symbolTable) {
  auto group =
      symbolTable.lookupNearestSymbolFrom<ProcessGroupOp>(op, symbol.getAttr());
  if (!group)
    op->emitOpError() << symbol << " does not name a distopt.process_group";
  return group;
}

bool mlir::distopt::detail::isSingletonGroup(Operation *op,
                                             FlatSymbolRefAttr symbol) {
  ProcessGroupOp group = lookupProcessGroup(op, symbol);
  return group && group.getSize() == 1;
}

std::string mlir::distopt::detail::formatDouble(double value) {
  char text[32];
  snprintf(text, sizeof(text), "%g", value);
  return text;
}

int64_t mlir::distopt::getElementBytes(Type type) {
  if (type.isIntOrFloat())
    return llvm::divideCeil(type.getIntOrFloatBitWidth(), 8);
  return type.isIndex() ? 8 : 0;
}

int64_t mlir::distopt::getShapedBytes(ShapedType type, Type elementType) {
  if (!type.hasStaticShape())
    return 0;
  return type.getNumElements() *
         getElementBytes(elementType ? elementType : type.getElementType());
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
        1, alignmentBytes / getElementBytes(tensor.getElementType()));
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

/// The parameter's type, which the gradient shares, and so does each state
/// tensor unless its types follow in brackets (the verifier checks them
/// against the update's getStateShapeFor).
static ParseResult
parseSameTypeAs(OpAsmParser &parser, Type &paramType,
                ArrayRef<OpAsmParser::UnresolvedOperand> state, Type &gradType,
                SmallVectorImpl<Type> &stateTypes) {
  if (parser.parseType(paramType))
    return failure();
  gradType = paramType;
  // State of other shapes than the parameter's (Dion's right factor) lists
  // its types: `[tensor<8x4xf32>, tensor<2x4xf32>]`.
  if (succeeded(parser.parseOptionalLSquare()))
    return failure(parser.parseTypeList(stateTypes) || parser.parseRSquare());
  stateTypes.assign(state.size(), paramType);
  return success();
}

static void printSameTypeAs(OpAsmPrinter &printer, Operation *, Type paramType,
                            OperandRange, Type, TypeRange stateTypes) {
  printer << paramType;
  if (llvm::any_of(stateTypes, [&](Type t) { return t != paramType; })) {
    printer << " [";
    llvm::interleaveComma(stateTypes, printer);
    printer << "]";
  }
}

/// Hyperparameters given at run time, inside `runtime(...)`: `beta1 = %b1,
/// eps = %e`, each an f64 operand.
static ParseResult parseRuntimeHyperparameters(
    OpAsmParser &parser,
    SmallVectorImpl<OpAsmParser::UnresolvedOperand> &values, ArrayAttr &names) {
  SmallVector<Attribute> keys;
  auto parseOne = [&]() -> ParseResult {
    std::string key;
    if (parser.parseKeywordOrString(&key) || parser.parseEqual() ||
        parser.parseOperand(values.emplace_back()))
      return failure();
    keys.push_back(parser.getBuilder().getStringAttr(key));
    return success();
  };
  if (parser.parseCommaSeparatedList(parseOne))
    return failure();
  names = parser.getBuilder().getArrayAttr(keys);
  return success();
}

static void printRuntimeHyperparameters(OpAsmPrinter &printer, Operation *,
                                        OperandRange values, ArrayAttr names) {
  llvm::interleaveComma(llvm::zip(names, values), printer, [&](auto pair) {
    printer.printKeywordOrString(
        cast<StringAttr>(std::get<0>(pair)).getValue());
    printer << " = " << std::get<1>(pair);
  });
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

LogicalResult MeshOp::verify() {
  if (getShape().empty())
    return emitOpError() << "a mesh needs at least one axis";
  int64_t ranks = 1;
  for (int64_t extent : getShape()) {
    if (extent < 1)
      return emitOpError() << "every mesh axis needs at least 1 rank, got "
                           << extent;
    if (ranks > ::distopt::kMaxWorldSize / extent)
      return emitOpError() << "the mesh has more than 2^20 ranks, the most "
                              "a step may be compiled for";
    ranks *= extent;
  }
  return success();
}

int64_t MeshOp::getNumRanks() {
  int64_t ranks = 1;
  for (int64_t extent : getShape())
    ranks *= extent;
  return ranks;
}

LogicalResult ProcessGroupOp::verify() {
  if (getSize() < 1)
    return emitOpError() << "group size must be at least 1, got " << getSize();
  if (getMesh().has_value() != getAxes().has_value())
    return emitOpError() << "a group over a mesh names both the mesh and its "
                            "axes";
  if (getMesh() && getRanks())
    return emitOpError() << "a group is over a mesh or lists its ranks, not "
                            "both";
  if (std::optional<ArrayRef<int64_t>> axes = getAxes()) {
    if (axes->empty())
      return emitOpError() << "a group over a mesh needs at least one axis";
    llvm::SmallDenseSet<int64_t> seen;
    for (int64_t axis : *axes)
      if (axis < 0 || !seen.insert(axis).second)
        return emitOpError() << "mesh axis " << axis
                             << (axis < 0 ? " is negative" : " is repeated");
  }
  if (std::optional<DenseIntElementsAttr> ranks = getRanks()) {
    auto type = cast<ShapedType>(ranks->getType());
    if (type.getRank() != 2 || type.getDimSize(1) != getSize() ||
        type.getDimSize(0) < 1)
      return emitOpError() << "ranks must be a 2-D list of parts of "
                           << getSize() << " ranks each, got " << type;
    // Bounded before the product, which could overflow.
    if (getSize() > ::distopt::kMaxWorldSize ||
        type.getDimSize(0) > ::distopt::kMaxWorldSize / getSize())
      return emitOpError() << "the parts list more than the 2^20 ranks a "
                              "step may be compiled for";
    int64_t world = type.getNumElements();
    if (world > ::distopt::kMaxWorldSize)
      return emitOpError() << "the parts list " << world
                           << " ranks, more than the 2^20 a step may be "
                              "compiled for";
    SmallVector<bool> seen(world, false);
    for (auto [index, rank] : llvm::enumerate(ranks->getValues<int64_t>())) {
      if (rank < 0 || rank >= world)
        return emitOpError()
               << "rank " << rank << " (part " << index / getSize()
               << ") is outside the world of " << world
               << " ranks the parts tile";
      if (seen[rank])
        return emitOpError() << "rank " << rank
                             << " is in two parts: the parts must tile the "
                                "world";
      seen[rank] = true;
    }
  }
  return success();
}

LogicalResult
ProcessGroupOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  if (FlatSymbolRefAttr meshRef = getMeshAttr()) {
    auto mesh = symbolTable.lookupNearestSymbolFrom<MeshOp>(*this, meshRef);
    if (!mesh)
      return emitOpError() << meshRef << " does not name a distopt.mesh";
    int64_t size = 1;
    ArrayRef<int64_t> axes = *getAxes();
    for (int64_t axis : axes) {
      if (axis >= static_cast<int64_t>(mesh.getShape().size()))
        return emitOpError()
               << "mesh axis " << axis << " is out of range for " << meshRef
               << " of " << mesh.getShape().size() << " axes";
      size *= mesh.getShape()[axis];
    }
    if (size != getSize())
      return emitOpError() << "size " << getSize() << " differs from the "
                           << size << " ranks of axes ["
                           << llvm::make_range(axes.begin(), axes.end())
                           << "] of " << meshRef;
  }
  return success();
}

int64_t ProcessGroupOp::getWorldSize() {
  if (std::optional<DenseIntElementsAttr> ranks = getRanks())
    return ranks->getNumElements();
  if (FlatSymbolRefAttr meshRef = getMeshAttr()) {
    auto mesh = SymbolTable::lookupNearestSymbolFrom<MeshOp>(*this, meshRef);
    return mesh ? mesh.getNumRanks() : 0;
  }
  return getSize();
}

ProcessGroupOp::Membership ProcessGroupOp::getMembership() {
  Membership result;
  int64_t world = getWorldSize();
  if (world == 0)
    return result;
  result.color.assign(world, 0);
  result.key.assign(world, 0);
  if (std::optional<DenseIntElementsAttr> ranks = getRanks()) {
    for (auto [index, rank] : llvm::enumerate(ranks->getValues<int64_t>())) {
      result.color[rank] = index / getSize();
      result.key[rank] = index % getSize();
    }
    return result;
  }
  if (!getMeshAttr()) {
    for (int64_t rank = 0; rank < world; ++rank)
      result.key[rank] = rank;
    return result;
  }
  // Row-major coordinates: the group's axes give the key (in their order),
  // the other axes the color.
  ArrayRef<int64_t> shape =
      SymbolTable::lookupNearestSymbolFrom<MeshOp>(*this, getMeshAttr())
          .getShape();
  ArrayRef<int64_t> axes = *getAxes();
  SmallVector<int64_t> coords(shape.size());
  for (int64_t rank = 0; rank < world; ++rank) {
    int64_t rest = rank;
    for (int64_t axis = shape.size() - 1; axis >= 0; --axis) {
      coords[axis] = rest % shape[axis];
      rest /= shape[axis];
    }
    int64_t key = 0, color = 0;
    for (int64_t axis : axes)
      key = key * shape[axis] + coords[axis];
    for (int64_t axis = 0; axis < static_cast<int64_t>(shape.size()); ++axis)
      if (!llvm::is_contained(axes, axis))
        color = color * shape[axis] + coords[axis];
    result.color[rank] = color;
    result.key[rank] = key;
  }
  return result;
}

bool ProcessGroupOp::isWorld() {
  if (getSize() != getWorldSize())
    return false;
  if (std::optional<DenseIntElementsAttr> ranks = getRanks())
    return llvm::equal(ranks->getValues<int64_t>(),
                       llvm::seq<int64_t>(0, getSize()));
  if (!getMeshAttr())
    return true;
  // Over every axis of more than one rank, in the mesh's order: the ranks
  // keep their world order (no layout needs building).
  auto mesh =
      SymbolTable::lookupNearestSymbolFrom<MeshOp>(*this, getMeshAttr());
  SmallVector<int64_t> used, all;
  ArrayRef<int64_t> axes = *getAxes();
  for (int64_t axis : axes)
    if (mesh.getShape()[axis] != 1)
      used.push_back(axis);
  for (auto [axis, extent] : llvm::enumerate(mesh.getShape()))
    if (extent != 1)
      all.push_back(axis);
  return used == all;
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
  int64_t bytes = getElementBytes(elementType);
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
  ProcessGroupOp group = verifyGroupSymbol(*this, getGroupAttr(), symbolTable);
  return success(group && succeeded(verifyDim0AgainstGroup(
                              *this, group, getInput().getType().getDimSize(0),
                              getResult().getType().getDimSize(0),
                              /*scatters=*/true)));
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

#define GET_OP_CLASSES
#include "distopt/Dialect/DistOpt/IR/DistOptOps.cpp.inc"
