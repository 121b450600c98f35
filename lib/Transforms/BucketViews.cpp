//===- BucketViews.cpp - arguments as views of one flat buffer --*- C++ -*-===//
//
// --distopt-grad-as-bucket-view: a bucket packed from gradient arguments
// becomes one flat gradient argument, as DDP's gradient_as_bucket_view keeps
// each param.grad in its bucket's storage. The caller then writes gradients
// straight into the bucket, and the step copies nothing into or out of it.
//
// --distopt-param-as-bucket-view: the same for a flat buffer packed from
// parameter arguments (ZeRO-1/2's, which each rank slices its shard from and
// all-gathers back), as FSDP's FlatParameter keeps each parameter a view of
// one flat buffer: the shard is a view of it, and the all-gather writes the
// updated parameters straight back into it.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_GRADASBUCKETVIEWPASS
#define GEN_PASS_DEF_PARAMASBUCKETVIEWPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

/// A bucket packed from arguments of one role (or unpacked into results of
/// that role, whose arguments the step does not read), and what replaces it.
struct View {
  /// The view of `op`'s bucket (a bucket_pack or bucket_unpack), with its
  /// arguments still to be found.
  template <typename OpTy>
  explicit View(OpTy op)
      : source(op), loc(op.getLoc()), alignment(op.getAlignmentAttr()),
        type(op.getBucket().getType()), offsets(op.getOffsets()) {}

  Operation *source; // the bucket_pack (erased once replaced) or unpack
  Location loc;
  IntegerAttr alignment;
  Type type;                       // the bucket's
  SmallVector<int64_t> offsets;    // of the arguments in it
  SmallVector<BlockArgument> args; // the packed arguments, in pack order
  SmallVector<int64_t> results;    // per argument, its result, or -1
  BlockArgument bucket;            // the new argument
  DictionaryAttr attrs;            // its attributes (and the result's)
};

} // namespace

/// The bucket to return in place of the packed arguments' results `values`
/// (in pack order): the bucket they were unpacked from, when they are all of
/// it, else a pack.
static Value returnedBucket(OpBuilder &builder, const View &view,
                            ValueRange values) {
  auto unpack = values.front().getDefiningOp<BucketUnpackOp>();
  if (unpack && llvm::equal(unpack.getOutputs(), values) &&
      unpack.getBucket().getType() == view.bucket.getType() &&
      unpack.getAlignmentAttr() == view.alignment)
    return unpack.getBucket();
  return BucketPackOp::create(builder, view.loc, view.bucket.getType(), values,
                              view.alignment);
}

/// Replaces each bucket packed from `role` arguments of `func` by one flat
/// argument of that role named `prefix`<i>, and with `unpacked`, each bucket
/// unpacked into results of that role only, when the step does not read
/// their arguments; returns how many.
/// A bucket of arguments extended before they are packed (gradients reduced
/// in f32 by --distopt-widen-reductions) cannot be a view of them: says so,
/// rather than leaving the copy unexplained.
static void warnIfExtended(BucketPackOp pack, Value input, StringRef role) {
  auto extend = input.getDefiningOp<arith::ExtFOp>();
  auto arg = extend ? dyn_cast<BlockArgument>(extend.getIn()) : BlockArgument();
  // The function's own argument, not a loop's or a region's.
  auto func = arg ? dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp())
                  : func::FuncOp();
  if (!func || abi::getArgRole(func, arg.getArgNumber()) != role)
    return;
  Type wide = getElementTypeOrSelf(extend.getType());
  pack.emitWarning() << "bucket left as a copy: " << role << " '"
                     << abi::getArgName(func, arg.getArgNumber())
                     << "' is extended to " << wide
                     << " before it is packed (--distopt-widen-reductions); "
                        "handed in as "
                     << wide << ", it could be a view of the bucket";
}

static int64_t viewPackedArguments(func::FuncOp func, StringRef role,
                                   StringRef prefix, bool unpacked) {
  if (func.isExternal())
    return 0;
  MLIRContext *context = func.getContext();
  Block &entry = func.front();

  // Arguments of the role by name (a name used twice identifies nothing),
  // how many packs read each value, and returned ones by name.
  llvm::StringMap<int> named;
  llvm::StringMap<BlockArgument> argNamed;
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
    if (abi::getArgRole(func, i) == role) {
      ++named[abi::getArgName(func, i)];
      argNamed[abi::getArgName(func, i)] = func.getArgument(i);
    }
  DenseMap<Value, int> packReads;
  SmallVector<BucketPackOp> packs;
  func.walk([&](BucketPackOp pack) {
    packs.push_back(pack);
    for (Value input : pack.getInputs())
      ++packReads[input];
  });
  // -1: two results share the name.
  llvm::StringMap<int64_t> returned;
  for (unsigned j = 0, e = func.getNumResults(); j < e; ++j)
    if (abi::getResultRole(func, j) == role) {
      auto [it, inserted] =
          returned.try_emplace(abi::getResultName(func, j), j);
      if (!inserted)
        it->second = -1;
    }

  SmallVector<View> views;
  for (BucketPackOp pack : packs) {
    View view(pack);
    bool ok = !pack.getInputs().empty(); // as the verifier ensures
    for (Value input : pack.getInputs()) {
      auto arg = dyn_cast<BlockArgument>(input);
      if (!arg)
        warnIfExtended(pack, input, role);
      ok = arg && arg.getOwner() == &entry &&
           abi::getArgRole(func, arg.getArgNumber()) == role &&
           packReads[arg] == 1;
      if (!ok)
        break;
      StringRef name = abi::getArgName(func, arg.getArgNumber());
      ok = !name.empty() && named[name] == 1;
      if (!ok)
        break;
      view.args.push_back(arg);
      auto it = returned.find(name);
      ok = it == returned.end() || it->second >= 0;
      if (!ok)
        break;
      view.results.push_back(it == returned.end() ? -1 : it->second);
    }
    // Returned ones go back as the bucket: all of them, or none.
    int64_t returnedCount = llvm::count_if(
        view.results, [](int64_t result) { return result >= 0; });
    if (ok && (returnedCount == 0 ||
               returnedCount == static_cast<int64_t>(view.results.size())))
      views.push_back(std::move(view));
  }
  // Results the step only writes (parameters whose main parameters hold
  // their values, in mixed precision): all of an unpack's outputs, each
  // returned once and nowhere else used, under unique names of arguments
  // that nothing reads.
  if (unpacked)
    func.walk([&](BucketUnpackOp unpack) {
      View view(unpack);
      for (Value output : unpack.getOutputs()) {
        if (!output.hasOneUse())
          return;
        OpOperand &use = *output.use_begin();
        if (!isa<func::ReturnOp>(use.getOwner()) ||
            use.getOwner()->getParentOp() != func)
          return;
        int64_t result = use.getOperandNumber();
        StringRef name = abi::getResultName(func, result);
        auto it = returned.find(name);
        if (abi::getResultRole(func, result) != role || name.empty() ||
            it == returned.end() || it->second != result || named[name] != 1 ||
            !argNamed[name].use_empty())
          return;
        view.args.push_back(argNamed[name]);
        view.results.push_back(result);
      }
      views.push_back(std::move(view));
    });
  if (views.empty())
    return 0;

  // Names the new arguments do not share with an existing one.
  llvm::StringSet<> taken;
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
    taken.insert(abi::getArgName(func, i));
  unsigned nextName = 0;
  auto freshName = [&] {
    std::string name;
    do
      name = (prefix + Twine(nextName++)).str();
    while (taken.contains(name));
    return name;
  };

  Builder builder(context);
  for (View &view : views) {
    SmallVector<Attribute> layout;
    for (auto [arg, offset] : llvm::zip_equal(view.args, view.offsets))
      layout.push_back(abi::layoutEntry(
          builder, abi::getArgName(func, arg.getArgNumber()), offset,
          cast<RankedTensorType>(arg.getType()).getShape()));
    NamedAttrList attrs;
    attrs.set(abi::kRole, builder.getStringAttr(role));
    attrs.set(abi::kName, builder.getStringAttr(freshName()));
    attrs.set(abi::kLayout, builder.getArrayAttr(layout));
    view.attrs = attrs.getDictionary(context);

    // The bucket takes its first argument's place.
    unsigned index = view.args.front().getArgNumber();
    for (BlockArgument arg : view.args)
      index = std::min(index, arg.getArgNumber());
    (void)func.insertArgument(index, view.type, view.attrs, view.loc);
    view.bucket = func.getArgument(index);

    if (auto pack = dyn_cast<BucketPackOp>(view.source)) {
      pack.getBucket().replaceAllUsesWith(view.bucket);
      pack.erase();
    }
    // Whatever else reads one of them reads it from the bucket.
    if (llvm::any_of(view.args, [](Value arg) { return !arg.use_empty(); })) {
      OpBuilder atEntry = OpBuilder::atBlockBegin(&entry);
      SmallVector<Type> types;
      for (BlockArgument arg : view.args)
        types.push_back(arg.getType());
      auto unpack = BucketUnpackOp::create(atEntry, view.loc, types,
                                           view.bucket, view.alignment);
      for (auto [arg, output] : llvm::zip_equal(view.args, unpack.getResults()))
        arg.replaceAllUsesWith(output);
    }
  }

  llvm::BitVector erased(func.getNumArguments());
  for (View &view : views)
    for (BlockArgument arg : view.args)
      erased.set(arg.getArgNumber());
  (void)func.eraseArguments(erased);
  auto count = static_cast<int64_t>(views.size());

  // Results: each returned bucket takes its first member's place.
  DenseMap<int64_t, View *> firstResult;
  llvm::DenseSet<int64_t> memberResult;
  for (View &view : views) {
    if (view.results.front() < 0)
      continue;
    firstResult[*llvm::min_element(view.results)] = &view;
    memberResult.insert(view.results.begin(), view.results.end());
  }
  if (firstResult.empty())
    return count;
  SmallVector<Type> resultTypes;
  SmallVector<DictionaryAttr> resultAttrs;
  for (unsigned j = 0, e = func.getNumResults(); j < e; ++j) {
    if (View *view = firstResult.lookup(j)) {
      resultTypes.push_back(view->bucket.getType());
      resultAttrs.push_back(view->attrs);
    } else if (!memberResult.contains(j)) {
      resultTypes.push_back(func.getResultTypes()[j]);
      resultAttrs.push_back(func.getResultAttrDict(j));
    }
  }
  llvm::SetVector<Operation *> unpacks; // returned whole, maybe dead now
  func.walk([&](func::ReturnOp ret) {
    OpBuilder before(ret);
    SmallVector<Value> operands;
    for (unsigned j = 0, e = ret.getNumOperands(); j < e; ++j) {
      if (View *view = firstResult.lookup(j)) {
        SmallVector<Value> values;
        for (int64_t result : view->results)
          values.push_back(ret.getOperand(result));
        operands.push_back(returnedBucket(before, *view, values));
        if (Operation *unpack = values.front().getDefiningOp())
          unpacks.insert(unpack);
      } else if (!memberResult.contains(j)) {
        operands.push_back(ret.getOperand(j));
      }
    }
    ret->setOperands(operands);
  });
  for (Operation *unpack : unpacks)
    if (unpack->use_empty() && isa<BucketUnpackOp>(unpack))
      unpack->erase();
  func.setType(
      FunctionType::get(context, func.getArgumentTypes(), resultTypes));
  func.setAllResultAttrs(resultAttrs);
  return count;
}

namespace {

struct GradAsBucketViewPass
    : public distopt::impl::GradAsBucketViewPassBase<GradAsBucketViewPass> {
  void runOnOperation() override {
    numViews += viewPackedArguments(getOperation(), abi::kGrad, "bucket",
                                    /*unpacked=*/false);
  }
};

struct ParamAsBucketViewPass
    : public distopt::impl::ParamAsBucketViewPassBase<ParamAsBucketViewPass> {
  void runOnOperation() override {
    numViews += viewPackedArguments(getOperation(), abi::kParam, "flat_param",
                                    /*unpacked=*/true);
  }
};

} // namespace
