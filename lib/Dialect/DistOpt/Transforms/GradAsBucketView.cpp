//===- GradAsBucketView.cpp - gradients as views of their bucket -*- C++
//-*-===//
//
// --distopt-grad-as-bucket-view: a bucket packed from gradient arguments
// becomes one flat gradient argument, as DDP's gradient_as_bucket_view keeps
// each param.grad in its bucket's storage. The caller then writes gradients
// straight into the bucket, and the step copies nothing into or out of it.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Dialect/DistOpt/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_GRADASBUCKETVIEWPASS
#include "distopt/Dialect/DistOpt/Transforms/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

/// A bucket packed from gradient arguments, and what replaces it.
struct View {
  BucketPackOp pack; // erased once replaced
  Location loc;
  IntegerAttr alignment;
  SmallVector<BlockArgument> grads; // in pack order
  SmallVector<int64_t> results;     // per gradient, its result, or -1
  BlockArgument bucket;             // the new argument
  DictionaryAttr attrs;             // its attributes (and the result's)
};

struct GradAsBucketViewPass
    : public distopt::impl::GradAsBucketViewPassBase<GradAsBucketViewPass> {
  void runOnOperation() override;
};

} // namespace

/// The bucket to return in place of the gradients `values` (in pack order):
/// the bucket they were unpacked from, when they are all of it, else a pack.
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

void GradAsBucketViewPass::runOnOperation() {
  func::FuncOp func = getOperation();
  if (func.isExternal())
    return;
  Block &entry = func.front();

  // Gradient arguments by name (a name used twice identifies nothing), how
  // many packs read each value, and returned gradients by name.
  llvm::StringMap<int> gradsNamed;
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
    if (abi::getArgRole(func, i) == abi::kGrad)
      ++gradsNamed[abi::getArgName(func, i)];
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
    if (abi::getResultRole(func, j) == abi::kGrad) {
      auto [it, inserted] =
          returned.try_emplace(abi::getResultName(func, j), j);
      if (!inserted)
        it->second = -1;
    }

  SmallVector<View> views;
  for (BucketPackOp pack : packs) {
    View view{pack, pack.getLoc(), pack.getAlignmentAttr(), {}, {}, {}, {}};
    bool ok = !pack.getInputs().empty(); // as the verifier ensures
    for (Value input : pack.getInputs()) {
      auto arg = dyn_cast<BlockArgument>(input);
      ok = arg && arg.getOwner() == &entry &&
           abi::getArgRole(func, arg.getArgNumber()) == abi::kGrad &&
           packReads[arg] == 1;
      if (!ok)
        break;
      StringRef name = abi::getArgName(func, arg.getArgNumber());
      ok = !name.empty() && gradsNamed[name] == 1;
      if (!ok)
        break;
      view.grads.push_back(arg);
      auto it = returned.find(name);
      ok = it == returned.end() || it->second >= 0;
      if (!ok)
        break;
      view.results.push_back(it == returned.end() ? -1 : it->second);
    }
    // Returned gradients go back as the bucket: all of them, or none.
    int64_t returnedCount = llvm::count_if(
        view.results, [](int64_t result) { return result >= 0; });
    if (ok && (returnedCount == 0 ||
               returnedCount == static_cast<int64_t>(view.results.size())))
      views.push_back(std::move(view));
  }
  if (views.empty())
    return;

  // Names the new arguments do not share with an existing one.
  llvm::StringSet<> taken;
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
    taken.insert(abi::getArgName(func, i));
  unsigned nextName = 0;
  auto freshName = [&] {
    std::string name;
    do
      name = "bucket" + std::to_string(nextName++);
    while (taken.contains(name));
    return name;
  };

  Builder builder(&getContext());
  for (View &view : views) {
    SmallVector<int64_t> offsets = view.pack.getOffsets();
    SmallVector<Attribute> layout;
    for (auto [arg, offset] : llvm::zip_equal(view.grads, offsets))
      layout.push_back(abi::layoutEntry(
          builder, abi::getArgName(func, arg.getArgNumber()), offset,
          cast<RankedTensorType>(arg.getType()).getShape()));
    NamedAttrList attrs;
    attrs.set(abi::kRole, builder.getStringAttr(abi::kGrad));
    attrs.set(abi::kName, builder.getStringAttr(freshName()));
    attrs.set(abi::kLayout, builder.getArrayAttr(layout));
    view.attrs = attrs.getDictionary(&getContext());

    // The bucket takes its first gradient's place.
    unsigned index = view.grads.front().getArgNumber();
    for (BlockArgument arg : view.grads)
      index = std::min(index, arg.getArgNumber());
    Type type = view.pack.getBucket().getType();
    (void)func.insertArgument(index, type, view.attrs, view.loc);
    view.bucket = func.getArgument(index);

    view.pack.getBucket().replaceAllUsesWith(view.bucket);
    view.pack.erase();
    // Whatever else reads a gradient reads it from the bucket.
    if (llvm::any_of(view.grads, [](Value arg) { return !arg.use_empty(); })) {
      OpBuilder atEntry = OpBuilder::atBlockBegin(&entry);
      SmallVector<Type> types;
      for (BlockArgument arg : view.grads)
        types.push_back(arg.getType());
      auto unpack = BucketUnpackOp::create(atEntry, view.loc, types,
                                           view.bucket, view.alignment);
      for (auto [arg, output] :
           llvm::zip_equal(view.grads, unpack.getResults()))
        arg.replaceAllUsesWith(output);
    }
  }

  llvm::BitVector erased(func.getNumArguments());
  for (View &view : views)
    for (BlockArgument arg : view.grads)
      erased.set(arg.getArgNumber());
  (void)func.eraseArguments(erased);
  numViews += views.size();

  // Results: each returned bucket takes its first gradient's place.
  DenseMap<int64_t, View *> firstResult;
  llvm::DenseSet<int64_t> memberResult;
  for (View &view : views) {
    if (view.results.front() < 0)
      continue;
    firstResult[*llvm::min_element(view.results)] = &view;
    memberResult.insert(view.results.begin(), view.results.end());
  }
  if (firstResult.empty())
    return;
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
  func.walk([&](func::ReturnOp ret) {
    OpBuilder before(ret);
    SmallVector<Value> operands;
    for (unsigned j = 0, e = ret.getNumOperands(); j < e; ++j) {
      if (View *view = firstResult.lookup(j)) {
        SmallVector<Value> values;
        for (int64_t result : view->results)
          values.push_back(ret.getOperand(result));
        operands.push_back(returnedBucket(before, *view, values));
      } else if (!memberResult.contains(j)) {
        operands.push_back(ret.getOperand(j));
      }
    }
    ret->setOperands(operands);
  });
  func.setType(
      FunctionType::get(&getContext(), func.getArgumentTypes(), resultTypes));
  func.setAllResultAttrs(resultAttrs);
}
