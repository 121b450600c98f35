//===- ChoiceParser.h - enum options that list their choices ---*- C++ -*-===//
//
// llvm::cl's parser for enum options rejects a bad value with "Cannot find
// option named 'x'!", which names neither the option's meaning nor what it
// accepts. ChoiceParser keeps cl::parser's interface (so that MLIR's pass
// options print and compare the values as usual) and rejects a bad value
// with the list of choices. Specialize llvm::cl::parser for an enum with
// DISTOPT_CHOICE_PARSER(Enum) to use it.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_SUPPORT_CHOICEPARSER_H
#define DISTOPT_SUPPORT_CHOICEPARSER_H

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"

#include <cassert>

namespace mlir::distopt {

template <typename T>
class ChoiceParser : public llvm::cl::generic_parser_base {
protected:
  struct Choice : GenericOptionInfo {
    Choice(llvm::StringRef name, T value, llvm::StringRef help)
        : GenericOptionInfo(name, help), V(value) {}
    llvm::cl::OptionValue<T> V;
  };
  llvm::SmallVector<Choice, 4> Values;

public:
  using parser_data_type = T;

  explicit ChoiceParser(llvm::cl::Option &owner) : generic_parser_base(owner) {}

  unsigned getNumOptions() const override { return Values.size(); }
  llvm::StringRef getOption(unsigned n) const override {
    return Values[n].Name;
  }
  llvm::StringRef getDescription(unsigned n) const override {
    return Values[n].HelpStr;
  }
  const llvm::cl::GenericOptionValue &
  getOptionValue(unsigned n) const override {
    return Values[n].V;
  }

  /// Returns true, after reporting it, on a value that is not a choice.
  /// Options take their value after `=` (as pass options always do); the
  /// flag-per-choice style of llvm::cl enum options is not supported.
  bool parse(llvm::cl::Option &option, llvm::StringRef, llvm::StringRef arg,
             T &value) {
    for (const Choice &choice : Values)
      if (choice.Name == arg) {
        value = choice.V.getValue();
        return false;
      }
    std::string names = llvm::join(
        llvm::map_range(Values, [](const Choice &c) { return c.Name; }), ", ");
    return option.error("'" + arg + "' is not one of: " + names);
  }

  template <typename V>
  void addLiteralOption(llvm::StringRef name, const V &value,
                        llvm::StringRef help) {
    Values.emplace_back(name, static_cast<T>(value), help);
    AddLiteralOption(Owner, name);
  }
  void removeLiteralOption(llvm::StringRef name) {
    unsigned at = findOption(name);
    assert(at != Values.size() && "no such choice");
    Values.erase(Values.begin() + at);
  }
};

} // namespace mlir::distopt

/// Makes llvm::cl (and so MLIR's pass options) parse `Enum` with
/// ChoiceParser. Use at global scope.
#define DISTOPT_CHOICE_PARSER(Enum)                                            \
  template <>                                                                  \
  class llvm::cl::parser<Enum> : public ::mlir::distopt::ChoiceParser<Enum> {  \
  public:                                                                      \
    using ::mlir::distopt::ChoiceParser<Enum>::ChoiceParser;                   \
  };

#endif // DISTOPT_SUPPORT_CHOICEPARSER_H
