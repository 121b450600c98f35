//===- BufferizableOpInterfaceImpl.cpp - collectives on buffers -*- C++ -*-===//
//
// Bufferizing a synchronous collective is calling the runtime on buffers.
// all_reduce, broadcast and reduce work in place on their input's buffer
// (the one-shot analysis copies the input first when it is still needed);
// reduce_scatter and all_gather write a new buffer. A buffer the runtime
// cannot address with one pointer (a strided view) goes through a
// contiguous copy.
//
//===----------------------------------------------------------------------===//

#include "distopt/Conversion/DistOptToRuntime/BufferizableOpInterfaceImpl.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"

#include "distopt/Conversion/DistOptToRuntime/RuntimeCalls.h"
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"

#include "mlir/Dialect/Bufferization/IR/BufferizableOpInterface.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

using namespace mlir;
using namespace mlir::bufferization;
using namespace mlir::distopt;

namespace {

/// The runtime arguments of one collective after (comm, send, recv).
SmallVector<Value> collectiveArgs(RuntimeCalls &rt, CollectiveOpInterface op,
                                  int64_t count, Type element) {
  Type wire = op.getWireType().value_or(element);
  SmallVector<Value> args = {rt.i64(count),
                             rt.i32(RuntimeCalls::dtypeCode(element))};
  if (std::optional<ReductionKind> reduction = op.getReductionKind()) {
    std::optional<APFloat> scale = op.getScale();
    args.push_back(rt.i32(RuntimeCalls::reductionCode(*reduction)));
    args.push_back(rt.f64(scale ? scale->convertToDouble() : 1.0));
  }
  if (std::optional<int64_t> root = op.getRootRank())
    args.push_back(rt.i64(*root));
  args.push_back(rt.i32(RuntimeCalls::dtypeCode(wire)));
  return args;
}

/// The runtime's element count: the per-rank chunk of a reduce_scatter or
/// all_gather (the smaller side), the whole tensor otherwise.
int64_t runtimeCount(ShapedType input, ShapedType yielded) {
  return std::min(input.getNumElements(), yielded.getNumElements());
}

/// A collective's input buffer and its group; the rewriter is placed before
/// the collective.
struct Input {
  Value buffer;
  ProcessGroupOp group;
};
FailureOr<Input> getInput(CollectiveOpInterface c, RewriterBase &rewriter,
                          const BufferizationOptions &options,
                          BufferizationState &state) {
  FailureOr<Value> buffer = getBuffer(rewriter, c.getInput(), options, state);
  if (failed(buffer))
    return failure();
  ProcessGroupOp group = lookupProcessGroup(c, c.getGroupAttr());
  if (!group)
    return c->emitError("cannot bufferize: the group is not declared");
  rewriter.setInsertionPoint(c);
  return Input{*buffer, group};
}

/// Calls the runtime's collective for `c` on contiguous buffers, from
/// `input` into `output` (the same buffer when it works in place). Returns
/// the request slot of a `_start`.
Value callCollective(RuntimeCalls &rt, CollectiveOpInterface c,
                     ProcessGroupOp group, Value input, Value output) {
  RankedTensorType resultType = c.getYieldedType();
  Value comm = rt.comm(group);
  Value send = rt.pointer(input);
  Value recv = output == input ? send : rt.pointer(output);
  Value request = c.isAsync() ? rt.requestSlot() : Value();
  SmallVector<Value> args = {comm, send, recv};
  llvm::append_range(
      args,
      collectiveArgs(
          rt, c, runtimeCount(cast<ShapedType>(input.getType()), resultType),
          resultType.getElementType()));
  if (request)
    args.push_back(request);
  rt.call(getRuntimeFunctionName(c), args);
  return request;
}

/// Whether the runtime writes the result over the input: where the op
/// keeps its input's shape.
bool worksInPlace(Operation *op) {
  return cast<CollectiveOpInterface>(op).keepsShape();
}

template <typename OpTy>
struct CollectiveModel
    : public BufferizableOpInterface::ExternalModel<CollectiveModel<OpTy>,
                                                    OpTy> {
  bool bufferizesToMemoryRead(Operation *, OpOperand &,
                              const AnalysisState &) const {
    return true;
  }
  bool bufferizesToMemoryWrite(Operation *op, OpOperand &,
                               const AnalysisState &) const {
    return worksInPlace(op);
  }
  AliasingValueList getAliasingValues(Operation *op, OpOperand &,
                                      const AnalysisState &) const {
    if (!worksInPlace(op))
      return {};
    return {{op->getResult(0), BufferRelation::Equivalent}};
  }
  bool bufferizesToAllocation(Operation *op, Value) const {
    return !worksInPlace(op);
  }

  LogicalResult bufferize(Operation *op, RewriterBase &rewriter,
                          const BufferizationOptions &options,
                          BufferizationState &state) const {
    auto c = cast<CollectiveOpInterface>(op);
    bool inPlace = worksInPlace(op);
    Location loc = op->getLoc();
    FailureOr<Input> in = getInput(c, rewriter, options, state);
    if (failed(in))
      return failure();
    Value buffer = in->buffer;
    auto contiguousType = [](ShapedType type) {
      return MemRefType::get(type.getShape(), type.getElementType());
    };
    // The runtime needs one pointer per buffer: copy strided views.
    Value input = buffer;
    auto inputType = cast<MemRefType>(input.getType());
    bool copied = !RuntimeCalls::isContiguous(inputType);
    if (copied) {
      input = memref::AllocOp::create(rewriter, loc, contiguousType(inputType));
      // --distopt-async-in-place drops the copy where that is safe.
      memref::CopyOp::create(rewriter, loc, buffer, input)
          ->setAttr(abi::kRequestInput, rewriter.getUnitAttr());
    }
    RankedTensorType resultType = c.getYieldedType();
    Value output = inPlace ? input
                           : memref::AllocOp::create(rewriter, loc,
                                                     contiguousType(resultType))
                                 .getResult();

    RuntimeCalls rt(rewriter, loc, op);
    callCollective(rt, c, in->group, input, output);

    if (inPlace && copied) { // the result lives in the original buffer
      memref::CopyOp::create(rewriter, loc, input, buffer);
      output = buffer;
    }
    replaceOpWithBufferizedValues(rewriter, op, output);
    return success();
  }
};

/// An op that writes none of its operands and returns no alias of them: it
/// works in buffers of its own; it reads its operands if `ReadsOperands`.
template <typename Model, typename OpTy, bool ReadsOperands>
struct OwnBuffersModel
    : public BufferizableOpInterface::ExternalModel<Model, OpTy> {
  bool bufferizesToMemoryRead(Operation *, OpOperand &,
                              const AnalysisState &) const {
    return ReadsOperands;
  }
  bool bufferizesToMemoryWrite(Operation *, OpOperand &,
                               const AnalysisState &) const {
    return false;
  }
  AliasingValueList getAliasingValues(Operation *, OpOperand &,
                                      const AnalysisState &) const {
    return {};
  }
};

/// An asynchronous collective. The one-shot analysis cannot see that the
/// request keeps using a buffer until its wait, so the start copies the
/// input into a buffer the request owns (and, when the result differs in
/// shape, allocates the output); the token becomes (request, result buffer),
/// which the wait completes and hands on.
template <typename OpTy>
struct StartModel : public OwnBuffersModel<StartModel<OpTy>, OpTy,
                                           /*ReadsOperands=*/true> {
  LogicalResult bufferize(Operation *op, RewriterBase &rewriter,
                          const BufferizationOptions &options,
                          BufferizationState &state) const {
    auto c = cast<CollectiveOpInterface>(op);
    Location loc = op->getLoc();
    FailureOr<Input> in = getInput(c, rewriter, options, state);
    if (failed(in))
      return failure();
    Value buffer = in->buffer;
    auto inputType = cast<MemRefType>(buffer.getType());
    RankedTensorType resultType = c.getYieldedType();
    bool sameShape = c.keepsShape();
    // The request's own copy of the input (in place for same-shape ones).
    Value input = memref::AllocOp::create(
        rewriter, loc,
        MemRefType::get(inputType.getShape(), inputType.getElementType()));
    // --distopt-async-in-place drops the copy where that is safe.
    memref::CopyOp::create(rewriter, loc, buffer, input)
        ->setAttr(abi::kRequestInput, rewriter.getUnitAttr());
    Value output = sameShape ? input
                             : memref::AllocOp::create(
                                   rewriter, loc,
                                   MemRefType::get(resultType.getShape(),
                                                   resultType.getElementType()))
                                   .getResult();
    RuntimeCalls rt(rewriter, loc, op);
    Value request = callCollective(rt, c, in->group, input, output);
    Value token = UnrealizedConversionCastOp::create(
                      rewriter, loc, op->getResult(0).getType(),
                      ValueRange{rt.load(request), output})
                      .getResult(0);
    rewriter.replaceOp(op, token);
    return success();
  }
};

/// Completes the request behind a token; the result is its buffer.
struct WaitModel
    : public OwnBuffersModel<WaitModel, WaitOp, /*ReadsOperands=*/false> {
  bool bufferizesToAllocation(Operation *, Value) const { return true; }

  LogicalResult bufferize(Operation *op, RewriterBase &rewriter,
                          const BufferizationOptions &,
                          BufferizationState &) const {
    auto wait = cast<WaitOp>(op);
    auto cast = wait.getToken().getDefiningOp<UnrealizedConversionCastOp>();
    if (!cast || cast.getNumOperands() != 2)
      return op->emitError("cannot bufferize: the token does not come from a "
                           "bufferized *_start op");
    rewriter.setInsertionPoint(op);
    RuntimeCalls rt(rewriter, op->getLoc(), op);
    rt.call("distopt_rt_wait", {cast.getOperand(0)});
    replaceOpWithBufferizedValues(rewriter, op, cast.getOperand(1));
    return success();
  }
};

template <template <typename> class Model, typename... Ops>
void attachModels(MLIRContext &context) {
  (Ops::template attachInterface<Model<Ops>>(context), ...);
}

} // namespace

void mlir::distopt::registerBufferizableOpInterfaceExternalModels(
    DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *context, DistOptDialect *) {
    attachModels<CollectiveModel, AllReduceOp, BroadcastOp, ReduceOp,
                 ReduceScatterOp, AllGatherOp>(*context);
    attachModels<StartModel, AllReduceStartOp, ReduceScatterStartOp,
                 AllGatherStartOp, BroadcastStartOp, ReduceStartOp>(*context);
    WaitOp::attachInterface<WaitModel>(*context);
  });
}
