//===- JSON.h - JSON parsing with a bounded nesting depth -------*- C++ -*-===//
//
// llvm::json::parse recurses once per nesting level, so a document nested
// tens of thousands of levels deep overflows the stack. Every JSON the tools
// read (parameter specs, checkpoint headers, a compiled step's interface)
// goes through parseJSON, which refuses such input before parsing it.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_SUPPORT_JSON_H
#define DISTOPT_SUPPORT_JSON_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

namespace distopt {

/// The deepest nesting of arrays and objects parseJSON accepts. The formats
/// distopt reads nest at most five levels.
constexpr unsigned kMaxJSONDepth = 64;

/// Parses `text` as llvm::json::parse does, after checking that no array or
/// object nests deeper than `maxDepth` (an error naming the line and column
/// where it does).
llvm::Expected<llvm::json::Value> parseJSON(llvm::StringRef text,
                                            unsigned maxDepth = kMaxJSONDepth);

} // namespace distopt

#endif // DISTOPT_SUPPORT_JSON_H
