// Python semantics of the interpreter's values: truth, equality, order, str(), repr(), json.dumps.
#include "tokenizer/jinja/value.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace chronos::jinja::detail {

void fail(std::string message) { throw RenderError{std::move(message)}; }

int64_t Value::as_int() const {
  if (const auto* b = std::get_if<bool>(&data)) return *b ? 1 : 0;
  if (const auto* i = std::get_if<int64_t>(&data)) return *i;
  fail(fmt::format("expected an integer, got {}", type_name(*this)));
}

double Value::as_double() const {
  if (const auto* d = std::get_if<double>(&data)) return *d;
  if (is_int() || is_bool()) return double(as_int());
  fail(fmt::format("expected a number, got {}", type_name(*this)));
}

const Value* Object::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Object::set(const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

ObjectPtr make_object(bool is_namespace) {
  auto object = std::make_shared<Object>();
  object->is_namespace = is_namespace;
  return object;
}

const Value* CallArgs::get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : keywords) {
    if (k == name) return &v;
  }
  return nullptr;
}

void CallArgs::check(std::string_view function, size_t max_positional,
                     std::initializer_list<std::string_view> allowed) const {
  if (positional.size() > max_positional) {
    fail(fmt::format("{}() takes at most {} positional arguments ({} given)", function, max_positional,
                     positional.size()));
  }
  for (const auto& [k, v] : keywords) {
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
      fail(fmt::format("{}() got an unexpected keyword argument '{}'", function, k));
    }
  }
}

Value make_tuple(Array items) {
  Value value(std::move(items));
  value.is_tuple = true;
  return value;
}

FunctionPtr make_function(std::string name, std::function<Value(const CallArgs&)> call) {
  return std::make_shared<const Function>(Function{std::move(name), std::move(call)});
}

const char* type_name(const Value& value) {
  switch (value.data.index()) {
    case 0: return "undefined";
    case 1: return "NoneType";
    case 2: return "bool";
    case 3: return "int";
    case 4: return "float";
    case 5: return "str";
    case 6: return "list";
    case 7: return value.object().is_namespace ? "Namespace" : "dict";
    default: return "function";
  }
}

bool truthy(const Value& value) {
  switch (value.data.index()) {
    case 0:
    case 1: return false;
    case 2: return std::get<bool>(value.data);
    case 3: return std::get<int64_t>(value.data) != 0;
    case 4: return std::get<double>(value.data) != 0.0;
    case 5: return !value.str().empty();
    case 6: return !value.array().empty();
    case 7: return value.object().is_namespace || !value.object().items.empty();
    default: return true;
  }
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.data.index() != b.data.index()) return false;
  if (a.is_undefined() || a.is_none()) return true;
  if (a.is_string()) return a.str() == b.str();
  if (a.is_array()) {
    const Array &x = a.array(), &y = b.array();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!equal(x[i], y[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    const Object &x = a.object(), &y = b.object();
    if (&x == &y) return true;
    if (x.is_namespace || y.is_namespace || x.items.size() != y.items.size()) return false;
    for (const auto& [k, v] : x.items) {
      const Value* other = y.find(k);
      if (other == nullptr || !equal(v, *other)) return false;
    }
    return true;
  }
  return &a.function() == &b.function();
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    const int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.str().compare(b.str());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_array() && b.is_array()) {
    const Array &x = a.array(), &y = b.array();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (const int c = compare(x[i], y[i]); c != 0) return c;
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  fail(fmt::format("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b)));
}

std::string format_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  // The shortest digits that round-trip, laid out as Python's repr lays them out.
  char buffer[64];
  const auto end = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific).ptr;
  const std::string_view text(buffer, size_t(end - buffer));
  const size_t e_pos = text.find('e');
  const bool negative = text[0] == '-';
  std::string digits;
  for (char c : text.substr(negative ? 1 : 0, e_pos - (negative ? 1 : 0))) {
    if (c != '.') digits += c;
  }
  int exponent = 0;
  std::from_chars(text.data() + e_pos + (text[e_pos + 1] == '+' ? 2 : 1), text.data() + text.size(), exponent);
  if (exponent < -4 || exponent >= 16) {
    return fmt::format("{}{}{}{}e{}{:02d}", negative ? "-" : "", digits[0], digits.size() > 1 ? "." : "",
                       std::string_view(digits).substr(1), exponent < 0 ? '-' : '+', std::abs(exponent));
  }
  if (exponent < 0) {
    return fmt::format("{}0.{:0>{}}{}", negative ? "-" : "", "", size_t(-exponent - 1), digits);
  }
  const size_t integer_digits = size_t(exponent) + 1;
  if (integer_digits >= digits.size()) {
    return fmt::format("{}{}{:0>{}}.0", negative ? "-" : "", digits, "", integer_digits - digits.size());
  }
  return fmt::format("{}{}.{}", negative ? "-" : "", std::string_view(digits).substr(0, integer_digits),
                     std::string_view(digits).substr(integer_digits));
}

namespace {

// Python's str.isprintable for one code point: not a control, format, surrogate, private-use,
// unassigned or separator character (the space excepted).
bool printable(char32_t c) {
  if (c == ' ') return true;
  switch (utf8proc_category(utf8proc_int32_t(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
  }
}

std::string repr_string(const std::string& text) {
  const bool has_single = text.find('\'') != std::string::npos;
  const char quote = has_single && text.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : decode_utf8(text)) {
    if (c == '\\' || c == char32_t(quote)) {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (printable(c)) {
      append_utf8(out, c);
    } else if (c < 0x100) {
      out += fmt::format("\\x{:02x}", uint32_t(c));
    } else if (c < 0x10000) {
      out += fmt::format("\\u{:04x}", uint32_t(c));
    } else {
      out += fmt::format("\\U{:08x}", uint32_t(c));
    }
  }
  out += quote;
  return out;
}

void json_string(std::string& out, const std::string& text) {
  out += '"';
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", unsigned(c));
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

void json_value(std::string& out, const Value& value, const JsonStyle& style, int depth) {
  if (depth > 512) fail("tojson: the value nests too deeply");
  const std::string item_sep = !style.item_separator.empty() ? style.item_separator : style.indent >= 0 ? "," : ", ";
  const std::string key_sep = !style.key_separator.empty() ? style.key_separator : ": ";
  const auto newline = [&](int level) {
    if (style.indent < 0) return;
    out += '\n';
    out.append(size_t(style.indent) * size_t(level), ' ');
  };
  switch (value.data.index()) {
    case 0: fail("Object of type Undefined is not JSON serializable");
    case 1: out += "null"; return;
    case 2: out += std::get<bool>(value.data) ? "true" : "false"; return;
    case 3: out += std::to_string(std::get<int64_t>(value.data)); return;
    case 4: {
      const double d = std::get<double>(value.data);
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : format_float(d);
      return;
    }
    case 5: json_string(out, value.str()); return;
    case 6: {
      const Array& items = value.array();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_sep;
        newline(depth + 1);
        json_value(out, items[i], style, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case 7: {
      const Object& object = value.object();
      if (object.is_namespace) fail("Object of type Namespace is not JSON serializable");
      if (object.items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : object.items) items.push_back(&item);
      if (style.sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_sep;
        newline(depth + 1);
        json_string(out, items[i]->first);
        out += key_sep;
        json_value(out, items[i]->second, style, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default: fail("Object of type function is not JSON serializable");
  }
}

}  // namespace

std::string to_str(const Value& value) {
  switch (value.data.index()) {
    case 0: return "";
    case 5: return value.str();
    default: return to_repr(value);
  }
}

std::string to_repr(const Value& value) {
  switch (value.data.index()) {
    case 0: return "Undefined";
    case 1: return "None";
    case 2: return std::get<bool>(value.data) ? "True" : "False";
    case 3: return std::to_string(std::get<int64_t>(value.data));
    case 4: return format_float(std::get<double>(value.data));
    case 5: return repr_string(value.str());
    case 6: {
      std::string out = value.is_tuple ? "(" : "[";
      for (const Value& item : value.array()) out += (out.size() > 1 ? ", " : "") + to_repr(item);
      if (value.is_tuple && value.array().size() == 1) out += ",";
      return out + (value.is_tuple ? ")" : "]");
    }
    case 7: {
      std::string out = "{";
      for (const auto& [k, v] : value.object().items) {
        out += (out.size() > 1 ? ", " : "") + repr_string(k) + ": " + to_repr(v);
      }
      out += "}";
      return value.object().is_namespace ? "<Namespace " + out + ">" : out;
    }
    default: return "<function " + value.function().name + ">";
  }
}

std::string to_json(const Value& value, const JsonStyle& style) {
  std::string out;
  json_value(out, value, style, 0);
  return out;
}

Value from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return None{};
    case nlohmann::ordered_json::value_t::boolean: return json.get<bool>();
    case nlohmann::ordered_json::value_t::number_integer: return json.get<int64_t>();
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      return u <= uint64_t(INT64_MAX) ? Value(int64_t(u)) : Value(double(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return json.get<double>();
    case nlohmann::ordered_json::value_t::string: return json.get<std::string>();
    case nlohmann::ordered_json::value_t::array: {
      Array items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item));
      return items;
    }
    case nlohmann::ordered_json::value_t::object: {
      auto object = make_object();
      object->items.reserve(json.size());
      for (const auto& [k, v] : json.items()) object->items.emplace_back(k, from_json(v));
      return object;
    }
    default: fail("binary JSON values are not supported");
  }
}

std::u32string decode_utf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    utf8proc_int32_t c = 0;
    const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + i),
                                    utf8proc_ssize_t(text.size() - i), &c);
    if (n <= 0) {  // invalid UTF-8 (already refused at the input); keep the byte as U+FFFD
      out += U'\uFFFD';
      ++i;
      continue;
    }
    out += char32_t(c);
    i += size_t(n);
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  utf8proc_uint8_t buffer[4];
  const auto n = utf8proc_encode_char(utf8proc_int32_t(c), buffer);
  out.append(reinterpret_cast<const char*>(buffer), size_t(n));
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) append_utf8(out, c);
  return out;
}

}  // namespace chronos::jinja::detail
