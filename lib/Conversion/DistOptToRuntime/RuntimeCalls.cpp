//===- RuntimeCalls.cpp - calls of the runtime's C ABI ----------*- C++ -*-===//

#include "distopt/Conversion/DistOptToRuntime/RuntimeCalls.h"

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/StepInterface/StepInterface.h"
#include "distopt_rt.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Utils/MemRefUtils.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"

using namespace mlir;
using namespace mlir::distopt;

RuntimeCalls::RuntimeCalls(OpBuilder &builder, Location loc, Operation *at)
    : b(builder), loc(loc), at(at) {}

Value RuntimeCalls::i32(int64_t v) {
  return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(v));
}
Value RuntimeCalls::i64(int64_t v) {
  return arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(v));
}
Value RuntimeCalls::f64(double v) {
  return arith::ConstantOp::create(b, loc, b.getF64FloatAttr(v));
}

// The dialect's reduction kinds are the runtime's codes (distopt_rt.h): a
// collective passes its kind to the runtime as is.
static_assert(static_cast<int>(ReductionKind::Sum) == DISTOPT_RT_SUM &&
                  static_cast<int>(ReductionKind::Avg) == DISTOPT_RT_AVG &&
                  static_cast<int>(ReductionKind::Min) == DISTOPT_RT_MIN &&
                  static_cast<int>(ReductionKind::Max) == DISTOPT_RT_MAX &&
                  static_cast<int>(ReductionKind::Prod) == DISTOPT_RT_PROD &&
                  static_cast<int>(ReductionKind::PremulSum) ==
                      DISTOPT_RT_PREMUL_SUM,
              "ReductionKind must match distopt_rt_reduction");

int64_t RuntimeCalls::reductionCode(ReductionKind kind) {
  return static_cast<int64_t>(kind);
}

int64_t RuntimeCalls::dtypeCode(Type type) {
  // The runtime's codes, from the step interface's dtype table, which
  // distopt_rt.h defines them for.
  std::string name;
  llvm::raw_string_ostream(name) << type;
  const ::distopt::step::DType *dtype = ::distopt::step::lookupDType(name);
  return dtype ? dtype->runtimeCode : -1;
}

bool RuntimeCalls::isContiguous(MemRefType type) {
  return memref::isStaticShapeAndContiguousRowMajor(type);
}

func::FuncOp RuntimeCalls::declare(StringRef name, FunctionType type) {
  auto module = at->getParentOfType<ModuleOp>();
  if (auto existing = module.lookupSymbol<func::FuncOp>(name))
    return existing;
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(module.getBody());
  auto decl = func::FuncOp::create(b, loc, name, type);
  decl.setPrivate();
  return decl;
}

Value RuntimeCalls::slot(Type element) {
  OpBuilder::InsertionGuard guard(b);
  auto func = at->getParentOfType<FunctionOpInterface>();
  b.setInsertionPointToStart(&func.getFunctionBody().front());
  auto ptr = LLVM::LLVMPointerType::get(b.getContext());
  Value one = arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(1));
  return LLVM::AllocaOp::create(b, loc, ptr, element, one);
}

void RuntimeCalls::check(Value status) {
  Value failed =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, status, i32(0));
  func::FuncOp fatal = declare(kFatal, b.getFunctionType({b.getI32Type()}, {}));
  scf::IfOp::create(b, loc, failed, [&](OpBuilder &then, Location l) {
    func::CallOp::create(then, l, fatal, ValueRange{status});
    scf::YieldOp::create(then, l);
  });
}

void RuntimeCalls::call(StringRef name, ValueRange args) {
  SmallVector<Type> types;
  for (Value arg : args)
    types.push_back(arg.getType());
  func::FuncOp callee =
      declare(name, b.getFunctionType(types, {b.getI32Type()}));
  check(func::CallOp::create(b, loc, callee, args).getResult(0));
}

Value RuntimeCalls::constant(StringRef name, Type type, Attribute value) {
  auto module = at->getParentOfType<ModuleOp>();
  if (!module.lookupSymbol<LLVM::GlobalOp>(name)) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(module.getBody());
    LLVM::GlobalOp::create(b, loc, type, /*isConstant=*/true,
                           LLVM::Linkage::Private, name, value);
  }
  return LLVM::AddressOfOp::create(
      b, loc, LLVM::LLVMPointerType::get(b.getContext()), name);
}

Value RuntimeCalls::comm(ProcessGroupOp group) {
  auto ptr = LLVM::LLVMPointerType::get(b.getContext());
  Value out = slot(ptr);
  if (group.isWorld()) {
    call("distopt_rt_world", {i64(group.getSize()), out});
    return LLVM::LoadOp::create(b, loc, ptr, out);
  }
  // LLVM globals, not memref ones: they stay in host memory on the GPU path,
  // where the runtime reads them.
  int64_t world = group.getWorldSize();
  auto i64Type = b.getI64Type();
  auto tableType = LLVM::LLVMArrayType::get(i64Type, 2 * world);
  std::string prefix = ("__distopt_group_" + group.getSymName()).str();
  // The layout is built once per module, not at every call site.
  Attribute layoutAttr;
  if (!at->getParentOfType<ModuleOp>().lookupSymbol<LLVM::GlobalOp>(
          prefix + "_layout")) {
    ProcessGroupOp::Membership membership = group.getMembership();
    SmallVector<int64_t> layout(membership.color);
    llvm::append_range(layout, membership.key);
    layoutAttr = DenseElementsAttr::get(
        RankedTensorType::get({2 * world}, i64Type), ArrayRef<int64_t>(layout));
  }
  Value table = constant(prefix + "_layout", tableType, layoutAttr);
  std::string name = ("@" + group.getSymName()).str();
  name.push_back('\0');
  Value text = constant(prefix + "_name",
                        LLVM::LLVMArrayType::get(b.getI8Type(), name.size()),
                        b.getStringAttr(name));
  call("distopt_rt_group",
       {i64(world), i64(group.getSize()), table, text, out});
  return LLVM::LoadOp::create(b, loc, ptr, out);
}

Value RuntimeCalls::rank(Value comm) {
  Value out = slot(b.getI64Type());
  call("distopt_rt_comm_rank", {comm, out});
  Value rank = LLVM::LoadOp::create(b, loc, b.getI64Type(), out);
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), rank);
}

Value RuntimeCalls::pointer(Value buffer) {
  auto type = cast<MemRefType>(buffer.getType());
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, buffer);
  // A view (a bucket's slice) starts `offset` elements past its base.
  auto metadata = memref::ExtractStridedMetadataOp::create(b, loc, buffer);
  Value bytes = arith::ConstantIndexOp::create(
      b, loc, getElementBytes(type.getElementType()));
  Value address = arith::AddIOp::create(
      b, loc, base, arith::MulIOp::create(b, loc, metadata.getOffset(), bytes));
  Value asInt = arith::IndexCastOp::create(b, loc, b.getI64Type(), address);
  return LLVM::IntToPtrOp::create(
      b, loc, LLVM::LLVMPointerType::get(b.getContext()), asInt);
}

std::pair<func::CallOp, unsigned>
RuntimeCalls::pointerUser(memref::ExtractAlignedPointerAsIndexOp address) {
  // pointer()'s chain: the offset added, cast to an integer, then a pointer.
  Value value = address.getResult();
  while (value.hasOneUse()) {
    OpOperand &use = *value.use_begin();
    Operation *user = use.getOwner();
    if (auto call = dyn_cast<func::CallOp>(user))
      return {call, use.getOperandNumber()};
    if (!isa<arith::AddIOp, arith::IndexCastOp, LLVM::IntToPtrOp>(user))
      break;
    value = user->getResult(0);
  }
  return {};
}

Value RuntimeCalls::requestSlot() {
  return slot(LLVM::LLVMPointerType::get(b.getContext()));
}

Value RuntimeCalls::load(Value slot) {
  return LLVM::LoadOp::create(b, loc,
                              LLVM::LLVMPointerType::get(b.getContext()), slot);
}
