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
template <typename OpTy>
SmallVector<Value> collectiveArgs(RuntimeCalls &rt, OpTy op, int64_t count,
                                  Type element) {
  int64_t wire = RuntimeCalls::dtypeCode(element);
  if (std::optional<Type> wireType = op.getWireType())
    wire = RuntimeCalls::dtypeCode(*wireType);
  SmallVector<Value> args = {rt.i64(count),
                             rt.i32(RuntimeCalls::dtypeCode(element))};
  if constexpr (std::is_same_v<OpTy, AllReduceOp> ||
                std::is_same_v<OpTy, ReduceScatterOp> ||
                std::is_same_v<OpTy, ReduceOp> ||
                std::is_same_v<OpTy, AllReduceStartOp> ||
                std::is_same_v<OpTy, ReduceScatterStartOp> ||
                std::is_same_v<OpTy, ReduceStartOp>) {
    args.push_back(rt.i32(static_cast<int64_t>(op.getReduction())));
    args.push_back(
        rt.f64(op.getScale() ? op.getScale()->convertToDouble() : 1.0));
  }
  if constexpr (std::is_same_v<OpTy, BroadcastOp> ||
                std::is_same_v<OpTy, ReduceOp> ||
                std::is_same_v<OpTy, BroadcastStartOp> ||
                std::is_same_v<OpTy, ReduceStartOp>)
    args.push_back(rt.i64(op.getRoot()));
  args.push_back(rt.i32(wire));
  return args;
}

template <typename OpTy> constexpr StringLiteral runtimeName() {
  if constexpr (std::is_same_v<OpTy, AllReduceStartOp>)
    return "distopt_rt_all_reduce_start";
  else if constexpr (std::is_same_v<OpTy, ReduceScatterStartOp>)
    return "distopt_rt_reduce_scatter_start";
  else if constexpr (std::is_same_v<OpTy, AllGatherStartOp>)
    return "distopt_rt_all_gather_start";
  else if constexpr (std::is_same_v<OpTy, BroadcastStartOp>)
    return "distopt_rt_broadcast_start";
  else if constexpr (std::is_same_v<OpTy, ReduceStartOp>)
    return "distopt_rt_reduce_start";
  else if constexpr (std::is_same_v<OpTy, AllReduceOp>)
    return "distopt_rt_all_reduce";
  else if constexpr (std::is_same_v<OpTy, ReduceScatterOp>)
    return "distopt_rt_reduce_scatter";
  else if constexpr (std::is_same_v<OpTy, AllGatherOp>)
    return "distopt_rt_all_gather";
  else if constexpr (std::is_same_v<OpTy, BroadcastOp>)
    return "distopt_rt_broadcast";
  else
    return "distopt_rt_reduce";
}

/// A collective's input buffer and the size of its group.
struct Input {
  Value buffer;
  int64_t groupSize;
};
template <typename OpTy>
FailureOr<Input> getInput(OpTy c, RewriterBase &rewriter,
                          const BufferizationOptions &options,
                          BufferizationState &state) {
  FailureOr<Value> buffer = getBuffer(rewriter, c.getInput(), options, state);
  if (failed(buffer))
    return failure();
  ProcessGroupOp group = lookupProcessGroup(c, c.getGroupAttr());
  if (!group)
    return c->emitError("cannot bufferize: the group is not declared");
  return Input{*buffer, group.getSize()};
}

template <typename OpTy, bool InPlace>
struct CollectiveModel : public BufferizableOpInterface::ExternalModel<
                             CollectiveModel<OpTy, InPlace>, OpTy> {
  bool bufferizesToMemoryRead(Operation *, OpOperand &,
                              const AnalysisState &) const {
    return true;
  }
  bool bufferizesToMemoryWrite(Operation *, OpOperand &,
                               const AnalysisState &) const {
    return InPlace;
  }
  AliasingValueList getAliasingValues(Operation *op, OpOperand &,
                                      const AnalysisState &) const {
    if (!InPlace)
      return {};
    return {{op->getResult(0), BufferRelation::Equivalent}};
  }
  bool bufferizesToAllocation(Operation *, Value) const { return !InPlace; }

  LogicalResult bufferize(Operation *op, RewriterBase &rewriter,
                          const BufferizationOptions &options,
                          BufferizationState &state) const {
    auto c = cast<OpTy>(op);
    Location loc = op->getLoc();
    FailureOr<Input> in = getInput(c, rewriter, options, state);
    if (failed(in))
      return failure();
    Value buffer = in->buffer;
    rewriter.setInsertionPoint(op);
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
          ->setAttr(kRequestInputAttr, rewriter.getUnitAttr());
    }
    auto resultType = cast<RankedTensorType>(c.getType());
    Value output = InPlace ? input
                           : memref::AllocOp::create(rewriter, loc,
                                                     contiguousType(resultType))
                                 .getResult();

    RuntimeCalls rt(rewriter, loc, op);
    Value comm = rt.world(in->groupSize);
    Value send = rt.pointer(input);
    Value recv = InPlace ? send : rt.pointer(output);
    int64_t count = InPlace || std::is_same_v<OpTy, ReduceScatterOp>
                        ? resultType.getNumElements()
                        : inputType.getNumElements();
    SmallVector<Value> args = {comm, send, recv};
    llvm::append_range(
        args, collectiveArgs(rt, c, count, resultType.getElementType()));
    rt.call(runtimeName<OpTy>(), args);

    if (InPlace && copied) { // the result lives in the original buffer
      memref::CopyOp::create(rewriter, loc, input, buffer);
      output = buffer;
    }
    replaceOpWithBufferizedValues(rewriter, op, output);
    return success();
  }
};

/// An asynchronous collective. The one-shot analysis cannot see that the
/// request keeps using a buffer until its wait, so the start copies the
/// input into a buffer the request owns (and, when the result differs in
/// shape, allocates the output); the token becomes (request, result buffer),
/// which the wait completes and hands on.
template <typename OpTy>
struct StartModel
    : public BufferizableOpInterface::ExternalModel<StartModel<OpTy>, OpTy> {
  bool bufferizesToMemoryRead(Operation *, OpOperand &,
                              const AnalysisState &) const {
    return true;
  }
  bool bufferizesToMemoryWrite(Operation *, OpOperand &,
                               const AnalysisState &) const {
    return false;
  }
  AliasingValueList getAliasingValues(Operation *, OpOperand &,
                                      const AnalysisState &) const {
    return {};
  }

  LogicalResult bufferize(Operation *op, RewriterBase &rewriter,
                          const BufferizationOptions &options,
                          BufferizationState &state) const {
    auto c = cast<OpTy>(op);
    Location loc = op->getLoc();
    FailureOr<Input> in = getInput(c, rewriter, options, state);
    if (failed(in))
      return failure();
    Value buffer = in->buffer;
    rewriter.setInsertionPoint(op);
    auto inputType = cast<MemRefType>(buffer.getType());
    RankedTensorType resultType = c.getToken().getType().getValueType();
    bool sameShape = inputType.getShape() == resultType.getShape();
    // The request's own copy of the input (in place for same-shape ones).
    Value input = memref::AllocOp::create(
        rewriter, loc,
        MemRefType::get(inputType.getShape(), inputType.getElementType()));
    // --distopt-async-in-place drops the copy where that is safe.
    memref::CopyOp::create(rewriter, loc, buffer, input)
        ->setAttr(kRequestInputAttr, rewriter.getUnitAttr());
    Value output = sameShape ? input
                             : memref::AllocOp::create(
                                   rewriter, loc,
                                   MemRefType::get(resultType.getShape(),
                                                   resultType.getElementType()))
                                   .getResult();
    RuntimeCalls rt(rewriter, loc, op);
    Value comm = rt.world(in->groupSize);
    Value send = rt.pointer(input);
    Value recv = sameShape ? send : rt.pointer(output);
    int64_t count = std::is_same_v<OpTy, AllGatherStartOp>
                        ? inputType.getNumElements()
                        : resultType.getNumElements();
    Value request = rt.requestSlot();
    SmallVector<Value> args = {comm, send, recv};
    llvm::append_range(
        args, collectiveArgs(rt, c, count, resultType.getElementType()));
    args.push_back(request);
    rt.call(runtimeName<OpTy>(), args);
    Value token = UnrealizedConversionCastOp::create(
                      rewriter, loc, c.getToken().getType(),
                      ValueRange{rt.load(request), output})
                      .getResult(0);
    rewriter.replaceOp(op, token);
    return success();
  }
};

/// Completes the request behind a token; the result is its buffer.
struct WaitModel
    : public BufferizableOpInterface::ExternalModel<WaitModel, WaitOp> {
  bool bufferizesToMemoryRead(Operation *, OpOperand &,
                              const AnalysisState &) const {
    return false;
  }
  bool bufferizesToMemoryWrite(Operation *, OpOperand &,
                               const AnalysisState &) const {
    return false;
  }
  AliasingValueList getAliasingValues(Operation *, OpOperand &,
                                      const AnalysisState &) const {
    return {};
  }
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

} // namespace

void mlir::distopt::registerBufferizableOpInterfaceExternalModels(
    DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *context, DistOptDialect *) {
    AllReduceOp::attachInterface<CollectiveModel<AllReduceOp, true>>(*context);
    BroadcastOp::attachInterface<CollectiveModel<BroadcastOp, true>>(*context);
    ReduceOp::attachInterface<CollectiveModel<ReduceOp, true>>(*context);
    ReduceScatterOp::attachInterface<CollectiveModel<ReduceScatterOp, false>>(
        *context);
    AllGatherOp::attachInterface<CollectiveModel<AllGatherOp, false>>(*context);
    AllReduceStartOp::attachInterface<StartModel<AllReduceStartOp>>(*context);
    ReduceScatterStartOp::attachInterface<StartModel<ReduceScatterStartOp>>(
        *context);
    AllGatherStartOp::attachInterface<StartModel<AllGatherStartOp>>(*context);
    BroadcastStartOp::attachInterface<StartModel<BroadcastStartOp>>(*context);
    ReduceStartOp::attachInterface<StartModel<ReduceStartOp>>(*context);
    WaitOp::attachInterface<WaitModel>(*context);
  });
}
