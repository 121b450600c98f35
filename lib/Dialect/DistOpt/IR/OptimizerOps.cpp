//===- OptimizerOps.cpp - optimizer updates, mixed precision ----*- C++ -*-===//
//
// The verifiers and type inference of the optimizer updates (each checks its
// hyperparameters' ranges as torch.optim does) and of the mixed-precision and
// clipping ops.
//
//===----------------------------------------------------------------------===//

#include "OpHelpers.h"

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"

#include "mlir/IR/Matchers.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace mlir::distopt;
using namespace mlir::distopt::detail;

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

LogicalResult mlir::distopt::detail::verifyOptimizerOp(Operation *operation) {
  auto op = cast<OptimizerOpInterface>(operation);
  Type paramType = op.getParam().getType();
  if (op.getGrad().getType() != paramType)
    return op->emitOpError()
           << "gradient type " << op.getGrad().getType()
           << " differs from the parameter type " << paramType;
  SmallVector<StringRef> keys = op.getStateKeys();
  if (op.getState().size() != keys.size())
    return op->emitOpError()
           << "expects " << keys.size() << " state tensors ("
           << (keys.empty() ? std::string("none") : llvm::join(keys, ", "))
           << ") for these hyperparameters, got " << op.getState().size();
  for (auto [index, state] : llvm::enumerate(op.getState())) {
    Type expected = op.getStateTypeFor(keys[index]);
    if (state.getType() != expected)
      return op->emitOpError()
             << "state #" << index << " ('" << keys[index] << "') type "
             << state.getType() << " differs from "
             << (expected == paramType ? "the parameter type " : "") << expected
             << (expected == paramType ? "" : ", the type the update keeps");
  }
  FloatAttr lr;
  if (matchPattern(op.getLr(), m_Constant(&lr)) &&
      !(lr.getValueAsDouble() >= 0))
    return op->emitOpError() << "learning rate must be non-negative, got "
                             << formatDouble(lr.getValueAsDouble());
  APInt step;
  if (matchPattern(op.getStep(), m_ConstantInt(&step)) &&
      step.getSExtValue() < 1)
    return op->emitOpError()
           << "step counts from 1, got " << step.getSExtValue();
  ArrayAttr names = op.getRuntimeHyperparameterNames();
  if (names.size() != op.getRuntimeHyperparameters().size())
    return op->emitOpError()
           << "has " << op.getRuntimeHyperparameters().size()
           << " runtime hyperparameters but " << names.size() << " names";
  ArrayRef<StringRef> allowed = op.getRuntimeHyperparameterKeys();
  llvm::StringSet<> seen;
  for (Attribute name : names) {
    StringRef key = cast<StringAttr>(name).getValue();
    if (!llvm::is_contained(allowed, key))
      return op->emitOpError() << "has no hyperparameter '" << key
                               << "' that can be given at run time (it takes "
                               << llvm::join(allowed, ", ") << ")";
    if (!seen.insert(key).second)
      return op->emitOpError()
             << "takes hyperparameter '" << key << "' at run time twice";
  }
  return success();
}

/// Results: the parameter's type, then each state tensor's.
#define DISTOPT_OPTIMIZER_INFER(OpTy)                                          \
  LogicalResult OpTy::inferReturnTypes(                                        \
      MLIRContext *, std::optional<Location>, ValueRange operands,             \
      DictionaryAttr attributes, OpaqueProperties properties,                  \
      RegionRange regions, SmallVectorImpl<Type> &inferredReturnTypes) {       \
    OpTy::Adaptor adaptor(operands, attributes, properties, regions);          \
    if (operands.size() < 4 || !adaptor.getParam())                            \
      return failure();                                                        \
    inferredReturnTypes.push_back(adaptor.getParam().getType());               \
    for (Value state : adaptor.getState())                                     \
      inferredReturnTypes.push_back(state.getType());                          \
    return success();                                                          \
  }
DISTOPT_OPTIMIZER_INFER(SGDUpdateOp)
DISTOPT_OPTIMIZER_INFER(AdamUpdateOp)
DISTOPT_OPTIMIZER_INFER(AdamWUpdateOp)
DISTOPT_OPTIMIZER_INFER(RMSpropUpdateOp)
DISTOPT_OPTIMIZER_INFER(AdagradUpdateOp)
DISTOPT_OPTIMIZER_INFER(MuonUpdateOp)
DISTOPT_OPTIMIZER_INFER(DionUpdateOp)
#undef DISTOPT_OPTIMIZER_INFER

/// A hyperparameter's value as getStateKeysFor's lookup gives it: its
/// attribute, or `fallback` (the attribute's default) where absent.
static double valueOr(Attribute attr, double fallback) {
  if (auto number = dyn_cast_or_null<FloatAttr>(attr))
    return number.getValueAsDouble();
  return fallback;
}

SmallVector<StringRef> SGDUpdateOp::getStateKeysFor(
    function_ref<Attribute(StringRef)> hyperparameter) {
  if (valueOr(hyperparameter("momentum"), 0.0) == 0)
    return {};
  return {"momentum_buffer"};
}

ArrayRef<OptimizerSpecKey> SGDUpdateOp::getSpecKeys() {
  static const OptimizerSpecKey keys[] = {
      {"momentum", OptimizerSpecKey::Number},
      {"dampening", OptimizerSpecKey::Number},
      {"weight_decay", OptimizerSpecKey::Number},
      {"nesterov", OptimizerSpecKey::Flag},
      {"maximize", OptimizerSpecKey::Flag}};
  return keys;
}

ArrayRef<StringRef> SGDUpdateOp::getRuntimeHyperparameterKeys() {
  static constexpr StringRef keys[] = {"momentum", "dampening", "weight_decay"};
  return keys;
}

double SGDUpdateOp::getCompiledHyperparameter(StringRef key) {
  return llvm::StringSwitch<APFloat>(key)
      .Case("momentum", getMomentum())
      .Case("dampening", getDampening())
      .Default(getWeightDecay())
      .convertToDouble();
}

LogicalResult SGDUpdateOp::verify() {
  if (failed(checkRange(*this, "momentum", getMomentum(), 0)) ||
      failed(checkRange(*this, "weight_decay", getWeightDecay(), 0)))
    return failure();
  if (getNesterov() && (getMomentum().isZero() || !getDampening().isZero()))
    return emitOpError("nesterov requires a momentum and zero dampening");
  return success();
}

/// Adam's and AdamW's state, spec keys and runtime hyperparameters.
static SmallVector<StringRef>
adamStateKeys(function_ref<Attribute(StringRef)> hyperparameter) {
  SmallVector<StringRef> keys = {"exp_avg", "exp_avg_sq"};
  if (hyperparameter("amsgrad"))
    keys.push_back("max_exp_avg_sq");
  return keys;
}
static const OptimizerSpecKey kAdamSpecKeys[] = {
    {"betas", OptimizerSpecKey::Pair, "beta1", "beta2"},
    {"eps", OptimizerSpecKey::Number},
    {"weight_decay", OptimizerSpecKey::Number},
    {"amsgrad", OptimizerSpecKey::Flag},
    {"maximize", OptimizerSpecKey::Flag}};
static constexpr StringRef kAdamRuntimeKeys[] = {"beta1", "beta2", "eps",
                                                 "weight_decay"};

SmallVector<StringRef> AdamUpdateOp::getStateKeysFor(
    function_ref<Attribute(StringRef)> hyperparameter) {
  return adamStateKeys(hyperparameter);
}
SmallVector<StringRef> AdamWUpdateOp::getStateKeysFor(
    function_ref<Attribute(StringRef)> hyperparameter) {
  return adamStateKeys(hyperparameter);
}
ArrayRef<OptimizerSpecKey> AdamUpdateOp::getSpecKeys() { return kAdamSpecKeys; }
ArrayRef<OptimizerSpecKey> AdamWUpdateOp::getSpecKeys() {
  return kAdamSpecKeys;
}
ArrayRef<StringRef> AdamUpdateOp::getRuntimeHyperparameterKeys() {
  return kAdamRuntimeKeys;
}
ArrayRef<StringRef> AdamWUpdateOp::getRuntimeHyperparameterKeys() {
  return kAdamRuntimeKeys;
}

template <typename OpTy>
static double adamHyperparameter(OpTy op, StringRef key) {
  return llvm::StringSwitch<APFloat>(key)
      .Case("beta1", op.getBeta1())
      .Case("beta2", op.getBeta2())
      .Case("eps", op.getEps())
      .Default(op.getWeightDecay())
      .convertToDouble();
}
double AdamUpdateOp::getCompiledHyperparameter(StringRef key) {
  return adamHyperparameter(*this, key);
}
double AdamWUpdateOp::getCompiledHyperparameter(StringRef key) {
  return adamHyperparameter(*this, key);
}

template <typename OpTy> static LogicalResult verifyAdam(OpTy op) {
  if (failed(checkRange(op, "beta1", op.getBeta1(), 0, 1.0)) ||
      failed(checkRange(op, "beta2", op.getBeta2(), 0, 1.0)) ||
      failed(checkRange(op, "eps", op.getEps(), 0)) ||
      failed(checkRange(op, "weight_decay", op.getWeightDecay(), 0)))
    return failure();
  return success();
}

LogicalResult AdamUpdateOp::verify() { return verifyAdam(*this); }
LogicalResult AdamWUpdateOp::verify() { return verifyAdam(*this); }

SmallVector<StringRef> RMSpropUpdateOp::getStateKeysFor(
    function_ref<Attribute(StringRef)> hyperparameter) {
  SmallVector<StringRef> keys = {"square_avg"};
  if (valueOr(hyperparameter("momentum"), 0.0) > 0)
    keys.push_back("momentum_buffer");
  if (hyperparameter("centered"))
    keys.push_back("grad_avg");
  return keys;
}

ArrayRef<OptimizerSpecKey> RMSpropUpdateOp::getSpecKeys() {
  static const OptimizerSpecKey keys[] = {
      {"alpha", OptimizerSpecKey::Number},
      {"eps", OptimizerSpecKey::Number},
      {"weight_decay", OptimizerSpecKey::Number},
      {"momentum", OptimizerSpecKey::Number},
      {"centered", OptimizerSpecKey::Flag},
      {"maximize", OptimizerSpecKey::Flag}};
  return keys;
}

ArrayRef<StringRef> RMSpropUpdateOp::getRuntimeHyperparameterKeys() {
  static constexpr StringRef keys[] = {"alpha", "eps", "weight_decay",
                                       "momentum"};
  return keys;
}

double RMSpropUpdateOp::getCompiledHyperparameter(StringRef key) {
  return llvm::StringSwitch<APFloat>(key)
      .Case("alpha", getAlpha())
      .Case("eps", getEps())
      .Case("momentum", getMomentum())
      .Default(getWeightDecay())
      .convertToDouble();
}

LogicalResult RMSpropUpdateOp::verify() {
  if (failed(checkRange(*this, "alpha", getAlpha(), 0)) ||
      failed(checkRange(*this, "eps", getEps(), 0)) ||
      failed(checkRange(*this, "weight_decay", getWeightDecay(), 0)) ||
      failed(checkRange(*this, "momentum", getMomentum(), 0)))
    return failure();
  return success();
}

SmallVector<StringRef>
AdagradUpdateOp::getStateKeysFor(function_ref<Attribute(StringRef)>) {
  return {"sum"};
}

ArrayRef<OptimizerSpecKey> AdagradUpdateOp::getSpecKeys() {
  static const OptimizerSpecKey keys[] = {
      {"lr_decay", OptimizerSpecKey::Number},
      {"eps", OptimizerSpecKey::Number},
      {"weight_decay", OptimizerSpecKey::Number},
      {"initial_accumulator_value", OptimizerSpecKey::Number},
      {"maximize", OptimizerSpecKey::Flag}};
  return keys;
}

ArrayRef<StringRef> AdagradUpdateOp::getRuntimeHyperparameterKeys() {
  static constexpr StringRef keys[] = {"lr_decay", "weight_decay", "eps",
                                       "initial_accumulator_value"};
  return keys;
}

double AdagradUpdateOp::getCompiledHyperparameter(StringRef key) {
  return llvm::StringSwitch<APFloat>(key)
      .Case("lr_decay", getLrDecay())
      .Case("eps", getEps())
      .Case("initial_accumulator_value", getInitialAccumulatorValue())
      .Default(getWeightDecay())
      .convertToDouble();
}

LogicalResult AdagradUpdateOp::verify() {
  if (failed(checkRange(*this, "lr_decay", getLrDecay(), 0)) ||
      failed(checkRange(*this, "weight_decay", getWeightDecay(), 0)) ||
      failed(checkRange(*this, "eps", getEps(), 0)) ||
      failed(checkRange(*this, "initial_accumulator_value",
                        getInitialAccumulatorValue(), 0)))
    return failure();
  return success();
}

SmallVector<StringRef>
MuonUpdateOp::getStateKeysFor(function_ref<Attribute(StringRef)>) {
  return {"momentum_buffer"};
}

ArrayRef<OptimizerSpecKey> MuonUpdateOp::getSpecKeys() {
  static const OptimizerSpecKey keys[] = {
      {"momentum", OptimizerSpecKey::Number},
      {"nesterov", OptimizerSpecKey::Bool},
      {"weight_decay", OptimizerSpecKey::Number},
      {"eps", OptimizerSpecKey::Number},
      {"ns_steps", OptimizerSpecKey::Integer},
      {"ns_coefficients", OptimizerSpecKey::Numbers, "a", "b", "c"},
      {"adjust_lr_fn", OptimizerSpecKey::String},
      {"ns_dtype", OptimizerSpecKey::DType},
      {"maximize", OptimizerSpecKey::Flag}};
  return keys;
}

ArrayRef<StringRef> MuonUpdateOp::getRuntimeHyperparameterKeys() {
  static constexpr StringRef keys[] = {"momentum", "weight_decay", "eps"};
  return keys;
}

double MuonUpdateOp::getCompiledHyperparameter(StringRef key) {
  return llvm::StringSwitch<APFloat>(key)
      .Case("momentum", getMomentum())
      .Case("eps", getEps())
      .Default(getWeightDecay())
      .convertToDouble();
}

LogicalResult MuonUpdateOp::verify() {
  auto type = cast<RankedTensorType>(getParam().getType());
  if (type.getRank() < getMinParamRank())
    return emitOpError("orthogonalizes matrices: the parameter must have "
                       "rank 2 or more, got ")
           << type << " (give vectors and scalars a group of their own, "
           << "with AdamW)";
  if (!type.hasStaticShape())
    return emitOpError("needs the parameter's shape, got ") << type;
  if (failed(checkRange(*this, "momentum", getMomentum(), 0, 1.0)) ||
      failed(checkRange(*this, "weight_decay", getWeightDecay(), 0)) ||
      failed(checkRange(*this, "eps", getEps(), 0)))
    return failure();
  if (auto steps = static_cast<int64_t>(getNsSteps()); steps < 0 || steps > 100)
    return emitOpError("'ns_steps' must be in [0, 100], got ") << steps;
  if (getNsCoefficients().size() != 3 ||
      !llvm::all_of(getNsCoefficients(),
                    [](double c) { return std::isfinite(c); }))
    return emitOpError("'ns_coefficients' must be three finite numbers "
                       "(a, b, c)");
  if (getAdjustLrFn() != "original" && getAdjustLrFn() != "match_rms_adamw")
    return emitOpError("'adjust_lr_fn' must be \"original\" or "
                       "\"match_rms_adamw\", got \"")
           << getAdjustLrFn() << "\"";
  if (std::optional<Type> dtype = getNsDtype();
      dtype && !dtype->isF32() && !dtype->isBF16())
    return emitOpError("'ns_dtype' must be f32 or bf16, got ") << *dtype;
  return success();
}

/// `flops` as an int64_t, saturated (an attribute may ask for absurd
/// iteration counts; the estimate only orders ranks' loads).
static int64_t saturatedFlops(double flops) {
  constexpr double kMax = 9.0e18; // below INT64_MAX, exact as a double
  return flops >= kMax ? static_cast<int64_t>(kMax)
                       : static_cast<int64_t>(std::max(flops, 0.0));
}

/// The parameter as a matrix: its first dimension's rows, the rest columns.
static std::pair<double, double> matrixDims(Value param) {
  ArrayRef<int64_t> shape = cast<RankedTensorType>(param.getType()).getShape();
  if (shape.empty())
    return {1, 1};
  return {static_cast<double>(shape.front()),
          static_cast<double>(ShapedType::getNumElements(shape.drop_front()))};
}

int64_t MuonUpdateOp::getUpdateFlops() {
  // Each Newton-Schulz iteration on the m x n matrix (m <= n): X X^T
  // (2 m^2 n), A A (2 m^3), B X (2 m^2 n); the element-wise loops besides.
  auto [rows, cols] = matrixDims(getParam());
  double m = std::min(rows, cols), n = std::max(rows, cols);
  double iterations = static_cast<double>(std::max<int64_t>(getNsSteps(), 0));
  return saturatedFlops(iterations * (4 * m * m * n + 2 * m * m * m) +
                        10 * m * n);
}

SmallVector<StringRef>
DionUpdateOp::getStateKeysFor(function_ref<Attribute(StringRef)>) {
  return {"momentum", "right_factor"};
}

/// Dion's rank for a matrix of `rows` x `cols`: `rank` if given, else the
/// fraction of the smaller dimension rounded up; in [1, min(rows, cols)].
static int64_t dionRank(int64_t rows, int64_t cols, std::optional<int64_t> rank,
                        double fraction) {
  int64_t smaller = std::min(rows, cols);
  if (smaller <= 0)
    return 0;
  // (Run before the verifier, which refuses a fraction outside (0, 1]:
  // no cast of a NaN or a huge product.)
  if (!(fraction > 0 && fraction <= 1))
    fraction = 1;
  int64_t r = rank ? *rank
                   : static_cast<int64_t>(
                         std::ceil(fraction * static_cast<double>(smaller)));
  return std::clamp<int64_t>(r, 1, smaller);
}

SmallVector<int64_t>
DionUpdateOp::getStateShapeFor(StringRef key, ArrayRef<int64_t> paramShape,
                               function_ref<Attribute(StringRef)> lookup) {
  // A non-matrix (which the verifier refuses) or an unknown shape keeps the
  // parameter's, so that the verifier's message is about the parameter.
  if (key != "right_factor" || paramShape.size() < 2 ||
      ShapedType::isDynamicShape(paramShape))
    return SmallVector<int64_t>(paramShape);
  int64_t rows = paramShape.front();
  // Row shards (`matrix_rows`): the rank is the whole matrix's.
  if (auto whole = dyn_cast_or_null<IntegerAttr>(lookup("matrix_rows")))
    rows = whole.getInt();
  int64_t cols = ShapedType::getNumElements(paramShape.drop_front());
  std::optional<int64_t> rank;
  if (auto given = dyn_cast_or_null<IntegerAttr>(lookup("rank")))
    rank = given.getInt();
  return {dionRank(rows, cols, rank, valueOr(lookup("rank_fraction"), 1.0)),
          cols};
}

int64_t DionUpdateOp::getUpdateFlops() {
  // Four products of m x n by rank r (B Q, B^T P, P R^T, P Q^T), two
  // Gram-Schmidt passes over P (2 m r^2 each), the element-wise loops.
  auto [m, n] = matrixDims(getParam());
  double r = 1;
  if (getState().size() == 2)
    if (auto factor = cast<RankedTensorType>(getState()[1].getType());
        factor.getRank() == 2)
      r = static_cast<double>(factor.getDimSize(0));
  return saturatedFlops(8 * m * n * r + 4 * m * r * r + 10 * m * n);
}

ArrayRef<OptimizerSpecKey> DionUpdateOp::getSpecKeys() {
  static const OptimizerSpecKey keys[] = {
      {"mu", OptimizerSpecKey::Number},
      {"weight_decay", OptimizerSpecKey::Number},
      {"epsilon", OptimizerSpecKey::Number},
      {"rank", OptimizerSpecKey::Integer},
      {"rank_fraction", OptimizerSpecKey::Number},
      {"seed", OptimizerSpecKey::Integer},
      {"maximize", OptimizerSpecKey::Flag}};
  return keys;
}

ArrayRef<StringRef> DionUpdateOp::getRuntimeHyperparameterKeys() {
  static constexpr StringRef keys[] = {"mu", "weight_decay", "epsilon"};
  return keys;
}

double DionUpdateOp::getCompiledHyperparameter(StringRef key) {
  return llvm::StringSwitch<APFloat>(key)
      .Case("mu", getMu())
      .Case("epsilon", getEpsilon())
      .Default(getWeightDecay())
      .convertToDouble();
}

LogicalResult DionUpdateOp::verify() {
  auto type = cast<RankedTensorType>(getParam().getType());
  if (type.getRank() < getMinParamRank())
    return emitOpError("orthonormalizes matrices: the parameter must have "
                       "rank 2 or more, got ")
           << type << " (give vectors and scalars a group of their own, "
           << "with AdamW)";
  if (!type.hasStaticShape())
    return emitOpError("needs the parameter's shape, got ") << type;
  if (failed(checkRange(*this, "mu", getMu(), 0, 1.0)) ||
      failed(checkRange(*this, "weight_decay", getWeightDecay(), 0)) ||
      failed(checkRange(*this, "epsilon", getEpsilon(), 0)))
    return failure();
  if (std::optional<uint64_t> rank = getRank();
      rank && static_cast<int64_t>(*rank) < 1)
    return emitOpError("'rank' must be at least 1, got ")
           << static_cast<int64_t>(*rank);
  double fraction = getRankFraction().convertToDouble();
  if (!(fraction > 0 && fraction <= 1))
    return emitOpError("'rank_fraction' must be in (0, 1], got ")
           << formatDouble(fraction);
  if (getBatch() && !getGroupAttr())
    return emitOpError("'batch' numbers updates whose factors are "
                       "all-reduced together: it needs a 'group'");
  if (bool(getRowGroupAttr()) != getMatrixRows().has_value())
    return emitOpError("row shards take 'row_group' and 'matrix_rows' "
                       "together");
  if (getRowGroupAttr()) {
    if (getGroupAttr())
      return emitOpError("a 'group' (the low-rank sync, which reads the "
                         "rank's own gradient) and row shards of a reduced "
                         "one ('row_group') exclude each other");
    if (type.getRank() != 2)
      return emitOpError("row shards are blocks of a matrix's rows: the "
                         "parameter must have rank 2, got ")
             << type;
    if (static_cast<int64_t>(*getMatrixRows()) < 1 || type.getDimSize(1) < 1)
      return emitOpError("row shards cut a matrix with elements: "
                         "'matrix_rows' and the columns must be at least 1, "
                         "got ")
             << static_cast<int64_t>(*getMatrixRows()) << " and "
             << type.getDimSize(1);
  }
  return success();
}

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

// Without a group Dion is pure; with one it all-reduces (or gathers) its
// factors.
void DionUpdateOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>>
        &effects) {
  addGroupEffects(getCommunicatorGroup(), effects);
}

LogicalResult DionUpdateOp::verifySymbolUses(SymbolTableCollection &table) {
  if (!getRowGroupAttr())
    return verifyOptionalGroup(*this, getGroupAttr(), table);
  // The group's blocks of rows hold the matrix's rows.
  ProcessGroupOp group = verifyGroupSymbol(*this, getRowGroupAttr(), table);
  if (!group)
    return failure();
  int64_t blockRows =
      cast<RankedTensorType>(getParam().getType()).getDimSize(0);
  int64_t rows = static_cast<int64_t>(*getMatrixRows());
  if (llvm::divideCeilSigned(rows, group.getSize()) > blockRows)
    return emitOpError("row shards: ")
           << group.getSize() << " blocks of " << blockRows
           << " rows cannot hold 'matrix_rows' = " << rows;
  return success();
}

//===----------------------------------------------------------------------===//
// Mixed precision and clipping
//===----------------------------------------------------------------------===//

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
  if (ArrayAttr bounds = getTensorBoundsAttr()) {
    if (!getGroupAttr())
      return emitOpError("tensor_bounds describe shards: they need a group");
    if (bounds.size() != getInputs().size())
      return emitOpError() << "has " << bounds.size()
                           << " tensor_bounds arrays for " << getInputs().size()
                           << " inputs";
    for (auto [i, input] : llvm::enumerate(getInputs()))
      if (cast<RankedTensorType>(input.getType()).getRank() != 1)
        return emitOpError() << "with tensor_bounds takes 1-d shards; input #"
                             << i << " is " << input.getType();
    for (auto [i, attr] : llvm::enumerate(bounds)) {
      ArrayRef<int64_t> b = cast<DenseI64ArrayAttr>(attr).asArrayRef();
      bool ordered = b.size() % 2 == 0;
      for (size_t k = 0; ordered && k < b.size(); ++k)
        ordered = b[k] >= 0 && (k == 0 || b[k] >= b[k - 1]);
      if (!ordered)
        return emitOpError()
               << "tensor_bounds of input #" << i
               << " must be [begin, end) pairs, sorted and disjoint";
    }
  }
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
