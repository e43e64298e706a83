// The interpreter's values: Python's None, bool, int, float, str, list and dict as Jinja sees them,
// plus Jinja's Undefined, callables and namespace() objects. Lists and dicts are shared by
// reference, as in Python; only a namespace is ever mutated.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace chronos::jinja::detail {

// An error in the template or its data, without a position: the evaluator adds the line.
struct RenderError {
  std::string message;
};

[[noreturn]] void fail(std::string message);

struct Value;
struct Object;
struct Function;
using Array = std::vector<Value>;
using ArrayPtr = std::shared_ptr<const Array>;
using ObjectPtr = std::shared_ptr<Object>;
using FunctionPtr = std::shared_ptr<const Function>;

struct Undefined {
  std::string name;  // what was looked up, for the error when it is used
};
struct None {};

struct Value {
  std::variant<Undefined, None, bool, int64_t, double, std::string, ArrayPtr, ObjectPtr, FunctionPtr> data;
  bool is_tuple = false;  // an array made as a tuple: (a, b), dict items; only repr() tells them apart

  Value() : data(Undefined{}) {}
  Value(Undefined u) : data(std::move(u)) {}
  Value(None) : data(None{}) {}
  Value(bool b) : data(b) {}
  Value(int64_t i) : data(i) {}
  Value(int i) : data(int64_t{i}) {}
  Value(double d) : data(d) {}
  Value(std::string s) : data(std::move(s)) {}
  Value(const char* s) : data(std::string(s)) {}
  Value(Array a) : data(std::make_shared<const Array>(std::move(a))) {}
  Value(ObjectPtr o) : data(std::move(o)) {}
  Value(FunctionPtr f) : data(std::move(f)) {}

  bool is_undefined() const { return std::holds_alternative<Undefined>(data); }
  bool is_none() const { return std::holds_alternative<None>(data); }
  bool is_bool() const { return std::holds_alternative<bool>(data); }
  bool is_int() const { return std::holds_alternative<int64_t>(data); }
  bool is_float() const { return std::holds_alternative<double>(data); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return std::holds_alternative<std::string>(data); }
  bool is_array() const { return std::holds_alternative<ArrayPtr>(data); }
  bool is_object() const { return std::holds_alternative<ObjectPtr>(data); }
  bool is_function() const { return std::holds_alternative<FunctionPtr>(data); }

  const std::string& str() const { return std::get<std::string>(data); }
  const Array& array() const { return *std::get<ArrayPtr>(data); }
  Object& object() const { return *std::get<ObjectPtr>(data); }
  const Function& function() const { return *std::get<FunctionPtr>(data); }
  int64_t as_int() const;    // bool or int; fails otherwise
  double as_double() const;  // bool, int or float; fails otherwise
};

// A dict (insertion-ordered, as Python's) or a namespace(); keys are strings.
struct Object {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;

  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);
};

ObjectPtr make_object(bool is_namespace = false);

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;

  // The argument at `index` or named `name`; nullptr when absent.
  const Value* get(size_t index, std::string_view name) const;
  // Fails when a keyword is not among `allowed` or more than `max_positional` are given.
  void check(std::string_view function, size_t max_positional, std::initializer_list<std::string_view> allowed) const;
};

struct Function {
  std::string name;
  std::function<Value(const CallArgs&)> call;
};

Value make_tuple(Array items);
FunctionPtr make_function(std::string name, std::function<Value(const CallArgs&)> call);

// Python semantics.
const char* type_name(const Value& value);
bool truthy(const Value& value);
bool equal(const Value& a, const Value& b);
int compare(const Value& a, const Value& b);  // <0, 0, >0; fails for unorderable types
std::string to_str(const Value& value);       // str(): what {{ }} prints (Undefined prints nothing)
std::string to_repr(const Value& value);      // repr()
std::string format_float(double value);       // repr() of a float: "1.0", "0.1", "1e-07"

// json.dumps(value, ensure_ascii=False, indent=indent, separators=..., sort_keys=...), as
// transformers' tojson filter calls it. indent < 0 is None.
struct JsonStyle {
  int indent = -1;
  std::string item_separator;  // empty: Python's default (", " or "," with an indent)
  std::string key_separator;   // empty: ": "
  bool sort_keys = false;
};
std::string to_json(const Value& value, const JsonStyle& style);

Value from_json(const nlohmann::ordered_json& json);

// UTF-8 helpers: code points of a string, and back.
std::u32string decode_utf8(std::string_view text);
std::string encode_utf8(std::u32string_view text);
void append_utf8(std::string& out, char32_t c);

}  // namespace chronos::jinja::detail
