// Attribute and item access, slicing, iteration, the operators and Python's str/dict/list methods.
#include "tokenizer/jinja/builtins.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <cmath>

#include "tokenizer/jinja/strings.h"

namespace chronos::jinja::detail {
namespace {

constexpr size_t kMaxListItems = size_t{1} << 20;

}  // namespace

// The Python methods call_method implements, by receiver type: `x.name` without a call is a
// bound method (so `s.strip is defined` holds, as in Python).
bool has_method(const Value& object, std::string_view name) {
  static constexpr std::string_view kString[] = {
      "startswith", "endswith", "strip",      "lstrip",  "rstrip",       "split",        "rsplit",  "splitlines",
      "upper",      "lower",    "capitalize", "title",   "replace",      "find",         "rfind",   "index",
      "rindex",     "count",    "join",       "format",  "removeprefix", "removesuffix", "isdigit", "isalpha",
      "isalnum",    "isspace",  "islower",    "isupper", "swapcase"};
  static constexpr std::string_view kDict[] = {"get", "items", "keys", "values"};
  static constexpr std::string_view kList[] = {"index", "count"};
  const auto in = [&](const auto& names) {
    return std::find(std::begin(names), std::end(names), name) != std::end(names);
  };
  if (object.is_string()) return in(kString);
  if (object.is_object() && !object.object().is_namespace) return in(kDict);
  return object.is_array() && in(kList);
}

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) fail(std::get<Undefined>(object.data).name);
  if (object.is_object()) {
    if (const Value* found = object.object().find(name)) return *found;
  }
  if (has_method(object, name)) {  // a method kept to be called later: the default size limit applies
    return make_function(name, [object, name](const CallArgs& args) {
      return call_method(object, name, args, SizeLimit{Limits{}.max_output_bytes});
    });
  }
  return Undefined{
      fmt::format("'{}' has no attribute '{}'", object.is_object() ? "dict object" : type_name(object), name)};
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) fail(std::get<Undefined>(object.data).name);
  if (object.is_object()) {
    if (key.is_string()) {
      if (const Value* found = object.object().find(key.str())) return *found;
    }
    return Undefined{fmt::format("'dict object' has no attribute {}", to_repr(key))};
  }
  if ((object.is_array() || object.is_string()) && (key.is_int() || key.is_bool())) {
    if (object.is_array()) {
      const Array& items = object.array();
      const int64_t index = normalize_index(key.as_int(), items.size());
      if (index < 0 || index >= int64_t(items.size())) return Undefined{"list object has no element " + to_str(key)};
      return items[size_t(index)];
    }
    const std::u32string chars = decode_utf8(object.str());
    const int64_t index = normalize_index(key.as_int(), chars.size());
    if (index < 0 || index >= int64_t(chars.size())) return Undefined{"str object has no element " + to_str(key)};
    return encode_utf8(std::u32string_view(chars).substr(size_t(index), 1));
  }
  if (key.is_string()) return get_attribute(object, key.str());
  return Undefined{fmt::format("'{}' object has no element {}", type_name(object), to_repr(key))};
}

Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step_value) {
  const int64_t step = step_value.is_undefined() || step_value.is_none() ? 1 : step_value.as_int();
  if (step == 0) fail("slice step cannot be zero");
  const bool is_string = object.is_string();
  if (!is_string && !object.is_array()) fail(fmt::format("'{}' object is not subscriptable", type_name(object)));
  const std::u32string chars = is_string ? decode_utf8(object.str()) : std::u32string();
  const int64_t size = is_string ? int64_t(chars.size()) : int64_t(object.array().size());
  // Python's slice.indices.
  const auto bound = [&](const Value& v, int64_t fallback) {
    if (v.is_undefined() || v.is_none()) return fallback;
    int64_t i = v.as_int();
    if (i < 0) i += size;
    if (step > 0) return std::clamp<int64_t>(i, 0, size);
    return std::clamp<int64_t>(i, -1, size - 1);
  };
  const int64_t begin = bound(start, step > 0 ? 0 : size - 1);
  const int64_t end = bound(stop, step > 0 ? size : -1);
  if (is_string) {
    std::u32string out;
    for (int64_t i = begin; step > 0 ? i < end : i > end; i += step) out += chars[size_t(i)];
    return encode_utf8(out);
  }
  Array out;
  for (int64_t i = begin; step > 0 ? i < end : i > end; i += step) out.push_back(object.array()[size_t(i)]);
  return out;
}

std::vector<Value> iterate(const Value& value) {
  if (value.is_array()) return value.array();
  if (value.is_undefined()) return {};
  if (value.is_object() && !value.object().is_namespace) {
    std::vector<Value> keys;
    for (const auto& [k, v] : value.object().items) keys.emplace_back(k);
    return keys;
  }
  if (value.is_string()) {
    std::vector<Value> chars;
    for (char32_t c : decode_utf8(value.str())) chars.emplace_back(encode_utf8(std::u32string(1, c)));
    return chars;
  }
  fail(fmt::format("'{}' object is not iterable", type_name(value)));
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) fail(fmt::format("'in <string>' requires string as left operand, not {}", type_name(item)));
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_object() && !container.object().is_namespace) {
    return item.is_string() && container.object().find(item.str()) != nullptr;
  }
  if (container.is_array() || container.is_undefined()) {
    for (const Value& element : iterate(container)) {
      if (equal(element, item)) return true;
    }
    return false;
  }
  fail(fmt::format("argument of type '{}' is not iterable", type_name(container)));
}

Value binary_operator(std::string_view op, const Value& left, const Value& right, SizeLimit limit) {
  if (op == "~") return checked(to_str(left) + to_str(right), limit);
  if (op == "==") return equal(left, right);
  if (op == "!=") return !equal(left, right);
  if (op == "<") return compare(left, right) < 0;
  if (op == "<=") return compare(left, right) <= 0;
  if (op == ">") return compare(left, right) > 0;
  if (op == ">=") return compare(left, right) >= 0;
  if (op == "in") return contains(right, left);
  for (const Value* operand : {&left, &right}) {
    if (operand->is_undefined()) fail(std::get<Undefined>(operand->data).name);
  }
  if (op == "+") {
    if (left.is_string() && right.is_string()) return checked(left.str() + right.str(), limit);
    if (left.is_array() && right.is_array()) {
      Array joined = left.array();
      joined.insert(joined.end(), right.array().begin(), right.array().end());
      return joined;
    }
  }
  if (op == "*") {
    const bool string_times = left.is_string() && (right.is_int() || right.is_bool());
    const bool times_string = right.is_string() && (left.is_int() || left.is_bool());
    if (string_times || times_string || (left.is_array() && right.is_int())) {
      const Value& sequence = string_times || left.is_array() ? left : right;
      const int64_t count = std::max<int64_t>(0, (string_times || left.is_array() ? right : left).as_int());
      if (sequence.is_string()) {
        if (sequence.str().size() * uint64_t(count) > limit.max_bytes)
          checked(std::string(limit.max_bytes + 1, ' '), limit);
        std::string out;
        for (int64_t i = 0; i < count; ++i) out += sequence.str();
        return out;
      }
      if (sequence.array().size() * uint64_t(count) > kMaxListItems) fail("a list grew past 1048576 items");
      Array out;
      for (int64_t i = 0; i < count; ++i) out.insert(out.end(), sequence.array().begin(), sequence.array().end());
      return out;
    }
  }
  if (op == "%" && left.is_string()) {
    return percent_format(left.str(), right.is_array() ? right.array() : Array{right}, limit);
  }
  if (!left.is_number() || !right.is_number()) {
    fail(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(left), type_name(right)));
  }
  const bool integers = !left.is_float() && !right.is_float();
  if (op == "/") {
    if (right.as_double() == 0.0) fail("division by zero");
    return left.as_double() / right.as_double();
  }
  if (integers) {
    const int64_t a = left.as_int(), b = right.as_int();
    int64_t result = 0;
    bool overflow = false;
    if (op == "+") overflow = __builtin_add_overflow(a, b, &result);
    if (op == "-") overflow = __builtin_sub_overflow(a, b, &result);
    if (op == "*") overflow = __builtin_mul_overflow(a, b, &result);
    if (op == "//" || op == "%") {
      if (b == 0) fail("integer division or modulo by zero");
      if (a == INT64_MIN && b == -1) fail("integer overflow");
      int64_t q = a / b, r = a % b;
      if (r != 0 && ((r < 0) != (b < 0))) {
        --q;
        r += b;
      }
      result = op == "//" ? q : r;
    }
    if (op == "**") {
      if (b < 0) return std::pow(double(a), double(b));
      result = 1;
      for (int64_t i = 0; i < b && !overflow; ++i) overflow = __builtin_mul_overflow(result, a, &result);
    }
    if (overflow) fail(fmt::format("integer overflow in {}", op));
    return result;
  }
  const double a = left.as_double(), b = right.as_double();
  if (op == "+") return a + b;
  if (op == "-") return a - b;
  if (op == "*") return a * b;
  if (op == "**") return std::pow(a, b);
  if (b == 0.0) fail("float division by zero");
  if (op == "//") return std::floor(a / b);
  const double r = std::fmod(a, b);
  return r != 0.0 && ((r < 0) != (b < 0)) ? r + b : r;
}

Value call_method(const Value& object, std::string_view name, const CallArgs& args, SizeLimit limit) {
  if (object.is_string()) {
    const std::string& text = object.str();
    if (name == "startswith" || name == "endswith") {
      const Value* affix = args.get(0, "");
      if (affix == nullptr) fail(fmt::format("{}() takes at least 1 argument", name));
      const std::vector<Value> options = affix->is_array() ? affix->array() : std::vector<Value>{*affix};
      for (const Value& option : options) {
        const std::string& s =
            string_argument(&option, name == "startswith" ? "startswith's prefix" : "endswith's suffix");
        if (name == "startswith" ? text.starts_with(s) : text.ends_with(s)) return true;
      }
      return false;
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      return strip(text, args.get(0, "chars"), name != "rstrip", name != "lstrip");
    }
    if (name == "split" || name == "rsplit") {
      return split(text, args.get(0, "sep"), int_argument(args.get(1, "maxsplit"), -1), name == "rsplit");
    }
    if (name == "splitlines") {
      Array lines;
      for (auto& line : split_lines(text, bool_argument(args.get(0, "keepends"), false)))
        lines.push_back(std::move(line));
      return lines;
    }
    if (name == "upper" || name == "lower") return map_case(text, name == "upper");
    if (name == "capitalize") return capitalize(text);
    if (name == "title") return title(text);
    if (name == "swapcase") {
      std::string out;
      for (char32_t c : decode_utf8(text)) {
        const std::string one = encode_utf8(std::u32string(1, c));
        const std::string upper = map_case(one, true);
        out += upper != one ? upper : map_case(one, false);
      }
      return out;
    }
    if (name == "replace") {
      return replace(text, string_argument(args.get(0, "old"), "replace's old"),
                     string_argument(args.get(1, "new"), "replace's new"), int_argument(args.get(2, "count"), -1),
                     limit);
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
      const std::u32string haystack = decode_utf8(text);
      const std::u32string needle = decode_utf8(string_argument(args.get(0, "sub"), "the substring"));
      if (name == "count") {
        if (needle.empty()) return int64_t(haystack.size() + 1);
        int64_t count = 0;
        for (size_t at = haystack.find(needle); at != std::u32string::npos;
             at = haystack.find(needle, at + needle.size())) {
          ++count;
        }
        return count;
      }
      const size_t at = name == "find" || name == "index" ? haystack.find(needle) : haystack.rfind(needle);
      if (at == std::u32string::npos) {
        if (name == "index" || name == "rindex") fail("substring not found");
        return int64_t{-1};
      }
      return int64_t(at);
    }
    if (name == "join") {
      std::string out;
      bool first = true;
      for (const Value& item : iterate(*args.get(0, "iterable"))) {
        if (!first) out += text;
        first = false;
        out += string_argument(&item, "join's items");
        if (out.size() > limit.max_bytes) break;
      }
      return checked(std::move(out), limit);
    }
    if (name == "format") return brace_format(text, args, limit);
    if (name == "removeprefix" || name == "removesuffix") {
      const std::string& affix = string_argument(args.get(0, ""), "the affix");
      if (name == "removeprefix" && text.starts_with(affix)) return text.substr(affix.size());
      if (name == "removesuffix" && text.ends_with(affix)) return text.substr(0, text.size() - affix.size());
      return text;
    }
    if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
        name == "isupper") {
      const std::u32string chars = decode_utf8(text);
      if (chars.empty()) return false;
      if (name == "islower" || name == "isupper") {
        const bool upper = name == "isupper";
        return map_case(text, !upper) != text && map_case(text, upper) == text;
      }
      return std::all_of(chars.begin(), chars.end(), [&](char32_t c) {
        const auto category = utf8proc_category(utf8proc_int32_t(c));
        const bool digit = category == UTF8PROC_CATEGORY_ND;
        const bool alpha = category >= UTF8PROC_CATEGORY_LU && category <= UTF8PROC_CATEGORY_LO;
        if (name == "isdigit") return digit;
        if (name == "isalpha") return alpha;
        if (name == "isalnum") return digit || alpha;
        return is_python_space(c);
      });
    }
  } else if (object.is_object() && !object.object().is_namespace) {
    const Object& dict = object.object();
    if (name == "get") {
      const Value* key = args.get(0, "key");
      if (key == nullptr) fail("get expected at least 1 argument, got 0");
      const Value* found = key->is_string() ? dict.find(key->str()) : nullptr;
      if (found != nullptr) return *found;
      const Value* fallback = args.get(1, "default");
      return fallback != nullptr ? *fallback : Value(None{});
    }
    if (name == "items" || name == "keys" || name == "values") {
      Array out;
      for (const auto& [k, v] : dict.items) {
        if (name == "items") out.push_back(make_tuple(Array{Value(k), v}));
        if (name == "keys") out.emplace_back(k);
        if (name == "values") out.push_back(v);
      }
      return out;
    }
    if (name == "update" || name == "pop" || name == "setdefault" || name == "clear" || name == "popitem") {
      fail(fmt::format("dict.{} is not allowed: chat templates cannot change a dict (use namespace())", name));
    }
  } else if (object.is_array()) {
    const Array& items = object.array();
    if (name == "index" || name == "count") {
      const Value* item = args.get(0, "value");
      if (item == nullptr) fail(fmt::format("{}() takes exactly one argument", name));
      int64_t count = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!equal(items[i], *item)) continue;
        if (name == "index") return int64_t(i);
        ++count;
      }
      if (name == "index") fail(fmt::format("{} is not in list", to_repr(*item)));
      return count;
    }
    if (name == "append" || name == "extend" || name == "insert" || name == "pop" || name == "remove" ||
        name == "clear" || name == "sort" || name == "reverse") {
      fail(fmt::format("list.{} is not allowed: chat templates cannot change a list (use namespace())", name));
    }
  }
  if (object.is_undefined()) fail(std::get<Undefined>(object.data).name);
  fail(fmt::format("'{}' object has no attribute '{}'", type_name(object), name));
}

}  // namespace chronos::jinja::detail
