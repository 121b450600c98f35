//===- JSON.cpp - JSON parsing with a bounded nesting depth -----*- C++ -*-===//

#include "distopt/Support/JSON.h"

using namespace llvm;

namespace distopt {

Expected<json::Value> parseJSON(StringRef text, unsigned maxDepth) {
  // Brackets count outside strings only; a backslash escapes the next
  // character inside one. Malformed input is left to the parser.
  unsigned depth = 0, line = 1;
  size_t lineStart = 0;
  bool inString = false;
  for (size_t i = 0, e = text.size(); i < e; ++i) {
    char c = text[i];
    if (c == '\n') {
      ++line;
      lineStart = i + 1;
    }
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > maxDepth)
        return createStringError(
            inconvertibleErrorCode(),
            "[" + Twine(line) + ":" + Twine(i - lineStart + 1) +
                "]: nested deeper than " + Twine(maxDepth) + " levels");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return json::parse(text);
}

} // namespace distopt
