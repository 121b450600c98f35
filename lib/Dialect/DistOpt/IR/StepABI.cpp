//===- StepABI.cpp - the step ABI's attributes, verified --------*- C++ -*-===//
//
// The attributes that tell a driver what each argument and result of a step
// is (StepABI.h, docs/step-abi.md) are checked by the dialect wherever they
// appear, so that a pass or the step library never meets a role nobody
// knows, a layout entry without an offset or a world of zero ranks. The
// roles and inits are the compiled interface's own tables (StepInterface).
// What depends on the function as a whole (a result that replaces no
// argument, a scalar with an init) is the step library's to check.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Dialect/DistOpt/IR/DistOptDialect.h"
#include "distopt/StepInterface/StepInterface.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"

using namespace mlir;
using namespace mlir::distopt;
namespace si = ::distopt::step;

namespace {

/// `attr` on argument or result `index` of `op` (`what`: "argument" or
/// "result").
struct Site {
  Operation *op;
  StringRef what;
  unsigned index;
  NamedAttribute attr;

  InFlightDiagnostic error() const {
    return op->emitOpError()
           << what << " #" << index << ": " << attr.getName() << " ";
  }
};

/// Success where `ok`, else the error `report` emits.
LogicalResult require(bool ok,
                      llvm::function_ref<InFlightDiagnostic()> report) {
  if (ok)
    return success();
  return report();
}

/// Whether `attr` (or null) is an integer of at least `least`.
bool isNonNegative(Attribute attr, int64_t least = 0) {
  auto integer = dyn_cast_if_present<IntegerAttr>(attr);
  return integer && isa<IntegerType>(integer.getType()) &&
         integer.getValue().getSignificantBits() <= 64 &&
         integer.getInt() >= least;
}

LogicalResult verifyLayout(const Site &site) {
  auto entries = dyn_cast<ArrayAttr>(site.attr.getValue());
  if (!entries)
    return site.error() << "must be an array of entries";
  for (auto [k, entry] : llvm::enumerate(entries)) {
    auto dict = dyn_cast<DictionaryAttr>(entry);
    auto shape =
        dict ? dict.getAs<DenseI64ArrayAttr>("shape") : DenseI64ArrayAttr();
    bool wellFormed =
        dict && dict.getAs<StringAttr>("name") && shape &&
        isNonNegative(dict.get("offset")) &&
        llvm::all_of(shape.asArrayRef(), [](int64_t d) { return d >= 0; }) &&
        (!dict.get("owner") || isNonNegative(dict.get("owner"))) &&
        llvm::all_of(dict, [](NamedAttribute field) {
          return llvm::is_contained({"name", "offset", "shape", "owner"},
                                    field.getName().strref());
        });
    if (!wellFormed)
      return site.error()
             << "entry #" << k << " " << entry
             << " must be {name = \"...\", offset = N, shape = array<i64: "
                "...>} with an optional owner = R (N, R and the dimensions "
                "non-negative)";
  }
  return success();
}

/// The attributes an argument or a result may carry.
LogicalResult verifyValueAttribute(const Site &site, bool isResult) {
  StringRef name = site.attr.getName().strref();
  Attribute value = site.attr.getValue();
  if (name == abi::kRole) {
    auto role = dyn_cast<StringAttr>(value);
    std::optional<si::Role> parsed =
        role ? si::parseRole(role.strref()) : std::nullopt;
    if (!parsed)
      return site.error() << "must be one of " << si::knownRoles() << ", got "
                          << value;
    if (!isResult &&
        (*parsed == si::Role::Loss || *parsed == si::Role::Skipped))
      return site.error() << value << " is a role of results only";
    return success();
  }
  if (name == abi::kName)
    return require(isa<StringAttr>(value), [&] {
      return site.error() << "must be a string, got " << value;
    });
  if (name == abi::kPerRank) {
    auto mean = dyn_cast<StringAttr>(value);
    return require(
        isa<UnitAttr>(value) || (mean && mean == abi::kPerRankMean), [&] {
          return site.error()
                 << "takes no value (each rank's copy is its "
                    "own) or \""
                 << abi::kPerRankMean
                 << "\" (the copies stand for their mean), got " << value;
        });
  }
  if (name == abi::kLayout)
    return verifyLayout(site);
  if (name == abi::kValue)
    return require(isa<FloatAttr, IntegerAttr>(value), [&] {
      return site.error() << "must be a number, got " << value;
    });
  if (name == abi::kInit) {
    auto init = dyn_cast<StringAttr>(value);
    return require(
        init && si::parseInit(init.strref()), [&] {
          return site.error()
                 << "must be \"zeros\", \"randn\" or \"randn_each_step\", got "
                 << value;
        });
  }
  if (name == abi::kShardOf)
    return require(isNonNegative(value, 1), [&] {
      return site.error() << "must be a positive integer, got " << value;
    });
  if (name == abi::kUnit)
    return require(isNonNegative(value), [&] {
      return site.error() << "must be a non-negative integer, got " << value;
    });
  return site.error() << "is not an attribute of the step ABI (role, name, "
                         "per_rank, layout, value, init, shard_of, unit)";
}

} // namespace

LogicalResult DistOptDialect::verifyRegionArgAttribute(Operation *op,
                                                       unsigned regionIndex,
                                                       unsigned argIndex,
                                                       NamedAttribute attr) {
  return verifyValueAttribute({op, "argument", argIndex, attr},
                              /*isResult=*/false);
}

LogicalResult DistOptDialect::verifyRegionResultAttribute(Operation *op,
                                                          unsigned regionIndex,
                                                          unsigned resultIndex,
                                                          NamedAttribute attr) {
  return verifyValueAttribute({op, "result", resultIndex, attr},
                              /*isResult=*/true);
}

LogicalResult DistOptDialect::verifyOperationAttribute(Operation *op,
                                                       NamedAttribute attr) {
  StringRef name = attr.getName().strref();
  Attribute value = attr.getValue();
  auto check = [&](bool ok, StringRef expected) {
    return require(ok, [&] {
      return op->emitOpError()
             << attr.getName() << " must be " << expected << ", got " << value;
    });
  };
  // On the module (the importer's).
  if (name == abi::kWorldSize || name == abi::kGradAccumulation)
    return check(isNonNegative(value, 1), "a positive integer");
  if (name == abi::kNumParameters || name == abi::kSeed)
    return check(isNonNegative(value), "a non-negative integer");
  if (name == abi::kModelName)
    return check(isa<StringAttr>(value), "a string");
  if (name == abi::kInitialLr)
    return check(isa<FloatAttr, IntegerAttr>(value), "a number");
  if (name == abi::kMatrixPlans) {
    // What --distopt-report prints of each group (docs/step-abi.md).
    auto isPlan = [](Attribute attr) {
      auto plan = dyn_cast<DictionaryAttr>(attr);
      auto gathered = plan ? plan.getAs<ArrayAttr>("gathered") : ArrayAttr();
      auto kind = plan ? plan.getAs<StringAttr>("plan") : StringAttr();
      bool knownKind = plan && (!plan.get("plan") ||
                                (kind && (kind.getValue() == "gather" ||
                                          kind.getValue() == "lowrank")));
      return plan && knownKind && plan.getAs<IntegerAttr>("matrices") &&
             gathered && llvm::all_of(gathered, llvm::IsaPred<StringAttr>) &&
             llvm::all_of(ArrayRef<StringRef>{"chosen_us", "all_owners_us",
                                              "all_gathered_us"},
                          [&](StringRef key) {
                            return bool(plan.getAs<FloatAttr>(key));
                          });
    };
    auto plans = dyn_cast<ArrayAttr>(value);
    return check(plans && llvm::all_of(plans, isPlan),
                 "an array of {matrices = N, plan = \"gather\" or "
                 "\"lowrank\" (optional), gathered = [names], chosen_us, "
                 "all_owners_us, all_gathered_us = microseconds}");
  }
  // On the entry points of a split step, and the lowering's marks.
  if (name == abi::kEntry) {
    auto entry = dyn_cast<StringAttr>(value);
    return check(entry && (entry.getValue() == "reduce" ||
                           entry.getValue() == "gather" ||
                           entry.getValue() == "update"),
                 "\"reduce\", \"gather\" or \"update\"");
  }
  if (name == abi::kReduces || name == abi::kGathers ||
      name == abi::kInPlaceResults)
    return check(isa<DenseI64ArrayAttr>(value), "an array<i64: ...>");
  if (name == abi::kReturnsStatus || name == abi::kRequestInput ||
      name == abi::kOwnerLoop)
    return check(isa<UnitAttr>(value), "a unit attribute");
  return op->emitOpError() << attr.getName()
                           << " is not an attribute of the distopt dialect";
}
