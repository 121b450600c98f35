//===- JSON.cpp - JSON for step interfaces and checkpoints ------*- C++ -*-===//
//
// A recursive-descent parser whose recursion is bounded by the nesting
// limit, and a compact writer. No LLVM: the host step library links it.
//
//===----------------------------------------------------------------------===//

#include "distopt/StepInterface/JSON.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace distopt::json {

Value::Value(const std::vector<int64_t> &numbers) : kind(Kind::Array) {
  json::Array a;
  a.reserve(numbers.size());
  for (int64_t n : numbers)
    a.emplace_back(n);
  array = std::make_shared<json::Array>(std::move(a));
}

std::optional<bool> Value::getBoolean() const {
  if (kind != Kind::Bool)
    return std::nullopt;
  return boolean;
}

std::optional<double> Value::getNumber() const {
  if (kind != Kind::Number)
    return std::nullopt;
  return number;
}

std::optional<int64_t> Value::getInteger() const {
  if (kind != Kind::Number)
    return std::nullopt;
  if (integer)
    return integer;
  double whole;
  // 2^63 is the first double above INT64_MAX.
  if (std::modf(number, &whole) == 0.0 && whole >= -9223372036854775808.0 &&
      whole < 9223372036854775808.0)
    return static_cast<int64_t>(whole);
  return std::nullopt;
}

const std::string *Value::getString() const {
  return kind == Kind::String ? &text : nullptr;
}

const json::Array *Value::getArray() const {
  return kind == Kind::Array ? array.get() : nullptr;
}

const json::Object *Value::getObject() const {
  return kind == Kind::Object ? object.get() : nullptr;
}

const Value *Value::get(std::string_view key) const {
  if (kind != Kind::Object)
    return nullptr;
  for (const auto &[k, v] : *object)
    if (k == key)
      return &v;
  return nullptr;
}

void Value::set(std::string key, Value value) {
  if (kind != Kind::Object)
    return;
  // Copies share their members until one of them is changed.
  if (object.use_count() > 1)
    object = std::make_shared<json::Object>(*object);
  object->emplace_back(std::move(key), std::move(value));
}

namespace {

void writeString(std::string &out, const std::string &s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\r':
      out += "\\r";
      break;
    default:
      if (c < 0x20) {
        char escape[8];
        std::snprintf(escape, sizeof(escape), "\\u%04x", c);
        out += escape;
      } else {
        out += static_cast<char>(c);
      }
    }
  }
  out += '"';
}

} // namespace

void Value::write(std::string &out) const {
  switch (kind) {
  case Kind::Null:
    out += "null";
    return;
  case Kind::Bool:
    out += boolean ? "true" : "false";
    return;
  case Kind::Number: {
    if (integer) {
      out += std::to_string(*integer);
      return;
    }
    if (!std::isfinite(number)) {
      out += "null"; // JSON has no inf or NaN
      return;
    }
    // The shortest text that reads back as the same double.
    char buffer[32];
    for (int precision = 15; precision <= 17; ++precision) {
      std::snprintf(buffer, sizeof(buffer), "%.*g", precision, number);
      if (std::strtod(buffer, nullptr) == number)
        break;
    }
    out += buffer;
    return;
  }
  case Kind::String:
    writeString(out, text);
    return;
  case Kind::Array: {
    out += '[';
    bool first = true;
    for (const Value &v : *array) {
      if (!first)
        out += ',';
      first = false;
      v.write(out);
    }
    out += ']';
    return;
  }
  case Kind::Object: {
    out += '{';
    bool first = true;
    for (const auto &[k, v] : *object) {
      if (!first)
        out += ',';
      first = false;
      writeString(out, k);
      out += ':';
      v.write(out);
    }
    out += '}';
    return;
  }
  }
}

std::string Value::str() const {
  std::string out;
  write(out);
  return out;
}

/// Recursive descent; the recursion is as deep as the nesting, which is
/// checked before each level.
class Parser {
public:
  Parser(std::string_view text, unsigned maxDepth)
      : text(text), maxDepth(maxDepth) {}

  Expected<Value> run() {
    Value v;
    skipSpace();
    if (!value(v, 0))
      return Expected<Value>::failure(error);
    skipSpace();
    if (at < text.size()) {
      fail("unexpected text after the value");
      return Expected<Value>::failure(error);
    }
    return v;
  }

private:
  bool fail(const std::string &what) {
    size_t line = 1, lineStart = 0;
    for (size_t i = 0; i < at && i < text.size(); ++i)
      if (text[i] == '\n') {
        ++line;
        lineStart = i + 1;
      }
    error = "[" + std::to_string(line) + ":" +
            std::to_string(at - lineStart + 1) + "]: " + what;
    return false;
  }
  void skipSpace() {
    while (at < text.size() && (text[at] == ' ' || text[at] == '\t' ||
                                text[at] == '\n' || text[at] == '\r'))
      ++at;
  }
  bool literal(std::string_view word) {
    if (text.substr(at, word.size()) != word)
      return fail("invalid value");
    at += word.size();
    return true;
  }

  bool value(Value &out, unsigned depth) {
    if (at >= text.size())
      return fail("unexpected end of input");
    char c = text[at];
    switch (c) {
    case 'n':
      out = Value();
      return literal("null");
    case 't':
      out = Value(true);
      return literal("true");
    case 'f':
      out = Value(false);
      return literal("false");
    case '"': {
      std::string s;
      if (!string(s))
        return false;
      out = Value(std::move(s));
      return true;
    }
    case '[':
    case '{':
      if (depth + 1 > maxDepth)
        return fail("nested deeper than " + std::to_string(maxDepth) +
                    " levels");
      return c == '[' ? parseArray(out, depth + 1)
                      : parseObject(out, depth + 1);
    default:
      if (c == '-' || (c >= '0' && c <= '9'))
        return parseNumber(out);
      return fail("invalid value");
    }
  }

  bool parseArray(Value &out, unsigned depth) {
    ++at; // [
    json::Array items;
    skipSpace();
    if (at < text.size() && text[at] == ']') {
      ++at;
      out = Value(std::move(items));
      return true;
    }
    while (true) {
      skipSpace();
      Value item;
      if (!value(item, depth))
        return false;
      items.push_back(std::move(item));
      skipSpace();
      if (at < text.size() && text[at] == ',') {
        ++at;
        continue;
      }
      if (at < text.size() && text[at] == ']') {
        ++at;
        out = Value(std::move(items));
        return true;
      }
      return fail("expected ',' or ']' in an array");
    }
  }

  bool parseObject(Value &out, unsigned depth) {
    ++at; // {
    json::Object members;
    skipSpace();
    if (at < text.size() && text[at] == '}') {
      ++at;
      out = Value(std::move(members));
      return true;
    }
    while (true) {
      skipSpace();
      if (at >= text.size() || text[at] != '"')
        return fail("expected a key in quotes");
      std::string key;
      if (!string(key))
        return false;
      for (const auto &member : members)
        if (member.first == key)
          return fail("duplicate key '" + key + "'");
      skipSpace();
      if (at >= text.size() || text[at] != ':')
        return fail("expected ':' after a key");
      ++at;
      skipSpace();
      Value item;
      if (!value(item, depth))
        return false;
      members.emplace_back(std::move(key), std::move(item));
      skipSpace();
      if (at < text.size() && text[at] == ',') {
        ++at;
        continue;
      }
      if (at < text.size() && text[at] == '}') {
        ++at;
        out = Value(std::move(members));
        return true;
      }
      return fail("expected ',' or '}' in an object");
    }
  }

  static void appendUtf8(std::string &s, uint32_t cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  bool hex4(uint32_t &cp) {
    if (at + 4 > text.size())
      return fail("truncated \\u escape");
    cp = 0;
    for (int i = 0; i < 4; ++i) {
      char h = text[at++];
      cp <<= 4;
      if (h >= '0' && h <= '9')
        cp |= h - '0';
      else if (h >= 'a' && h <= 'f')
        cp |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F')
        cp |= h - 'A' + 10;
      else
        return fail("invalid \\u escape");
    }
    return true;
  }

  /// The length of the valid UTF-8 sequence at `at`, or 0.
  size_t utf8Length() const {
    auto byte = [&](size_t i) -> unsigned char {
      return at + i < text.size() ? static_cast<unsigned char>(text[at + i])
                                  : 0;
    };
    unsigned char c = byte(0);
    auto continuation = [&](size_t i) { return (byte(i) & 0xC0) == 0x80; };
    if (c >= 0xC2 && c <= 0xDF)
      return continuation(1) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
      // No overlong forms, no surrogates.
      unsigned char c1 = byte(1);
      if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0))
        return 0;
      return continuation(1) && continuation(2) ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
      unsigned char c1 = byte(1);
      if ((c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90))
        return 0;
      return continuation(1) && continuation(2) && continuation(3) ? 4 : 0;
    }
    return 0;
  }

  bool string(std::string &out) {
    ++at; // "
    while (true) {
      if (at >= text.size())
        return fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(text[at]);
      if (c == '"') {
        ++at;
        return true;
      }
      if (c < 0x20)
        return fail("a control character in a string");
      if (c >= 0x80) {
        size_t n = utf8Length();
        if (!n)
          return fail("invalid UTF-8");
        out.append(text.substr(at, n));
        at += n;
        continue;
      }
      if (c != '\\') {
        out += static_cast<char>(c);
        ++at;
        continue;
      }
      if (++at >= text.size())
        return fail("unterminated string");
      char e = text[at++];
      switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        uint32_t cp = 0;
        if (!hex4(cp))
          return false;
        if (cp >= 0xD800 && cp <= 0xDBFF && at + 1 < text.size() &&
            text[at] == '\\' && text[at + 1] == 'u') {
          size_t back = at;
          at += 2;
          uint32_t low = 0;
          if (!hex4(low))
            return false;
          if (low >= 0xDC00 && low <= 0xDFFF)
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          else
            at = back; // a lone high surrogate; the next escape stands alone
        }
        if (cp >= 0xD800 && cp <= 0xDFFF)
          cp = 0xFFFD; // a lone surrogate has no UTF-8 form
        appendUtf8(out, cp);
        break;
      }
      default:
        return fail("invalid escape");
      }
    }
  }

  bool parseNumber(Value &out) {
    size_t start = at;
    bool integral = true;
    if (text[at] == '-')
      ++at;
    auto digits = [&] {
      size_t from = at;
      while (at < text.size() && text[at] >= '0' && text[at] <= '9')
        ++at;
      return at - from;
    };
    if (at < text.size() && text[at] == '0')
      ++at; // no leading zeros
    else if (!digits())
      return fail("invalid number");
    if (at < text.size() && text[at] == '.') {
      integral = false;
      ++at;
      if (!digits())
        return fail("invalid number");
    }
    if (at < text.size() && (text[at] == 'e' || text[at] == 'E')) {
      integral = false;
      ++at;
      if (at < text.size() && (text[at] == '+' || text[at] == '-'))
        ++at;
      if (!digits())
        return fail("invalid number");
    }
    std::string literal(text.substr(start, at - start));
    if (integral) {
      errno = 0;
      long long v = std::strtoll(literal.c_str(), nullptr, 10);
      if (errno != ERANGE) {
        out = Value(static_cast<int64_t>(v));
        return true;
      }
    }
    out = Value(std::strtod(literal.c_str(), nullptr));
    return true;
  }

  std::string_view text;
  unsigned maxDepth;
  size_t at = 0;
  std::string error;
};

Expected<Value> parse(std::string_view text, unsigned maxDepth) {
  return Parser(text, maxDepth).run();
}

} // namespace distopt::json
