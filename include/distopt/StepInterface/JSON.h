//===- JSON.h - JSON for step interfaces and checkpoints --------*- C++ -*-===//
//
// The JSON a compiled step carries (its interface) and a checkpoint's header
// are read by the host step library in runtime/, which must not depend on
// LLVM, and by the compiler's tools: this is the one reader and writer both
// use. It is strict RFC 8259 (UTF-8 checked, no trailing commas, no
// comments, no duplicate keys), parses without recursion deeper than
// `maxDepth` levels (a document nested 100000 deep is an error, not a stack
// overflow), keeps an object's keys in order, and keeps integers exact.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_STEPINTERFACE_JSON_H
#define DISTOPT_STEPINTERFACE_JSON_H

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace distopt::json {

/// The deepest nesting of arrays and objects the parser accepts. The formats
/// distopt reads nest at most five levels.
constexpr unsigned kMaxDepth = 64;

class Value;
using Array = std::vector<Value>;
/// Keys in the order they were written (or read).
using Object = std::vector<std::pair<std::string, Value>>;

class Value {
public:
  enum class Kind { Null, Bool, Number, String, Array, Object };

  Value() = default;
  Value(std::nullptr_t) {}
  Value(bool b) : kind(Kind::Bool), boolean(b) {}
  Value(int v) : Value(static_cast<int64_t>(v)) {}
  Value(int64_t v)
      : kind(Kind::Number), number(static_cast<double>(v)), integer(v) {}
  Value(uint64_t v) = delete; // say which: int64_t or double
  Value(double v) : kind(Kind::Number), number(v) {}
  Value(const char *s) : kind(Kind::String), text(s) {}
  Value(std::string s) : kind(Kind::String), text(std::move(s)) {}
  Value(std::string_view s) : kind(Kind::String), text(s) {}
  Value(json::Array a)
      : kind(Kind::Array), array(std::make_shared<json::Array>(std::move(a))) {}
  Value(json::Object o)
      : kind(Kind::Object),
        object(std::make_shared<json::Object>(std::move(o))) {}
  Value(const std::vector<int64_t> &numbers);

  Kind getKind() const { return kind; }

  /// Typed access: null (or nullopt) when the value is of another kind.
  std::optional<bool> getBoolean() const;
  std::optional<double> getNumber() const;
  /// A number that is an integer exactly representable in int64_t (1.0 and
  /// 1e3 count, 1.5 does not).
  std::optional<int64_t> getInteger() const;
  const std::string *getString() const;
  const json::Array *getArray() const;
  const json::Object *getObject() const;

  /// An object's member `key`, or null (also for a non-object).
  const Value *get(std::string_view key) const;

  /// Appends a member to an object value (it must be one).
  void set(std::string key, Value value);

  /// Compact text; keys in their order.
  std::string str() const;
  void write(std::string &out) const;

private:
  Kind kind = Kind::Null;
  bool boolean = false;
  double number = 0;
  std::optional<int64_t> integer; // the literal, where it is an integer
  std::string text;
  std::shared_ptr<const json::Array> array;
  std::shared_ptr<json::Object> object;

  friend class Parser;
};

/// Either a value or the reason there is none (no exceptions: the compiler
/// builds without them).
template <typename T> class Expected {
public:
  Expected(T value) : value(std::move(value)) {}
  static Expected failure(std::string message) {
    Expected e;
    e.message = std::move(message);
    return e;
  }
  explicit operator bool() const { return value.has_value(); }
  T &operator*() { return *value; }
  const T &operator*() const { return *value; }
  T *operator->() { return &*value; }
  const T *operator->() const { return &*value; }
  /// Why there is no value ("" when there is one).
  const std::string &error() const { return message; }

private:
  Expected() = default;
  std::optional<T> value;
  std::string message;
};

/// Parses `text`. Errors say where: "[line:column]: what".
Expected<Value> parse(std::string_view text, unsigned maxDepth = kMaxDepth);

} // namespace distopt::json

#endif // DISTOPT_STEPINTERFACE_JSON_H
