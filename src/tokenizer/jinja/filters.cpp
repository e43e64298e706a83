// Jinja's filters and tests, with Jinja 3.1's argument names and semantics.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/strings.h"

namespace chronos::jinja::detail {
namespace {

// ---- lists and attributes ----

// Jinja's attribute paths of sort/map/selectattr/...: "a.b.0".
Value attribute_path(const Value& item, const std::string& path) {
  Value current = item;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    int64_t index = 0;
    const auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), index);
    if (!part.empty() && ec == std::errc() && ptr == part.data() + part.size() && !current.is_object()) {
      current = get_item(current, Value(index));
    } else {
      current = get_attribute(current, part);
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return current;
}

Value lower_if_string(const Value& value, bool case_sensitive) {
  return !case_sensitive && value.is_string() ? Value(map_case(value.str(), false)) : value;
}

// The items select/reject/selectattr/rejectattr keep: args are (attribute?, test, test args...).
Value select_items(const Value& input, const CallArgs& args, bool by_attribute, bool keep) {
  size_t next = 0;
  std::string attribute;
  if (by_attribute) attribute = string_argument(args.get(next++, "attribute"), "the attribute");
  const Value* test = args.get(next++, "");
  CallArgs test_args;
  for (size_t i = next; i < args.positional.size(); ++i) test_args.positional.push_back(args.positional[i]);
  Array kept;
  for (const Value& item : iterate(input)) {
    const Value subject = by_attribute ? attribute_path(item, attribute) : item;
    const bool passed =
        test == nullptr ? truthy(subject) : call_test(string_argument(test, "the test"), subject, test_args);
    if (passed == keep) kept.push_back(item);
  }
  return kept;
}

Value map_items(const Value& input, const CallArgs& args, SizeLimit limit) {
  Array mapped;
  if (const Value* attribute = args.get(99, "attribute"); attribute != nullptr) {
    args.check("map", 0, {"attribute", "default"});
    const Value* fallback = args.get(99, "default");
    for (const Value& item : iterate(input)) {
      Value value = attribute_path(item, string_argument(attribute, "the attribute"));
      mapped.push_back(value.is_undefined() && fallback != nullptr ? *fallback : value);
    }
    return mapped;
  }
  const std::string& filter = string_argument(args.get(0, ""), "map's filter name");
  CallArgs filter_args;
  filter_args.positional.assign(args.positional.begin() + 1, args.positional.end());
  filter_args.keywords = args.keywords;
  for (const Value& item : iterate(input)) mapped.push_back(call_filter(filter, item, filter_args, limit));
  return mapped;
}

Value sort_items(const Value& input, const CallArgs& args) {
  args.check("sort", 3, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = bool_argument(args.get(0, "reverse"), false);
  const bool case_sensitive = bool_argument(args.get(1, "case_sensitive"), false);
  const Value* attribute = args.get(2, "attribute");
  std::vector<Value> items = iterate(input);
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    Value key = attribute != nullptr ? attribute_path(item, to_str(*attribute)) : item;
    keyed.emplace_back(lower_if_string(key, case_sensitive), std::move(item));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? compare(b.first, a.first) < 0 : compare(a.first, b.first) < 0;
  });
  Array sorted;
  for (auto& [key, item] : keyed) sorted.push_back(std::move(item));
  return sorted;
}

Value min_max(const Value& input, const CallArgs& args, bool want_max) {
  args.check(want_max ? "max" : "min", 2, {"case_sensitive", "attribute"});
  const bool case_sensitive = bool_argument(args.get(0, "case_sensitive"), false);
  const Value* attribute = args.get(1, "attribute");
  const std::vector<Value> items = iterate(input);
  if (items.empty()) return Undefined{"No aggregated item, sequence was empty."};
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    Value key =
        lower_if_string(attribute != nullptr ? attribute_path(items[i], to_str(*attribute)) : items[i], case_sensitive);
    if (i == 0 || (want_max ? compare(key, best_key) > 0 : compare(key, best_key) < 0)) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

Value to_int(const Value& value, const Value* fallback_value, int64_t base) {
  const Value fallback = fallback_value != nullptr ? *fallback_value : Value(int64_t{0});
  if (value.is_int() || value.is_bool()) return value.as_int();
  if (value.is_float()) {
    const double d = value.as_double();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
    return int64_t(d);
  }
  if (!value.is_string()) return fallback;
  std::string text = strip(value.str(), nullptr, true, true);
  std::erase(text, '_');
  int64_t result = 0;
  const char* begin = text.data() + (text.starts_with('+') ? 1 : 0);
  if (base == 16 && (text.starts_with("0x") || text.starts_with("0X"))) begin += 2;
  const auto [ptr, ec] = std::from_chars(begin, text.data() + text.size(), result, int(base));
  if (ec == std::errc() && ptr == text.data() + text.size() && !text.empty()) return result;
  char* end = nullptr;
  const double d = std::strtod(text.c_str(), &end);
  if (!text.empty() && end == text.c_str() + text.size() && std::isfinite(d) && std::fabs(d) < 9.2e18)
    return int64_t(d);
  return fallback;
}

Value to_float(const Value& value, const Value* fallback_value) {
  const Value fallback = fallback_value != nullptr ? *fallback_value : Value(0.0);
  if (value.is_number()) return value.as_double();
  if (!value.is_string()) return fallback;
  const std::string text = strip(value.str(), nullptr, true, true);
  char* end = nullptr;
  const double d = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) return fallback;
  return d;
}

std::string indent(const std::string& text, const CallArgs& args) {
  args.check("indent", 3, {"width", "first", "blank"});
  const Value* width = args.get(0, "width");
  const std::string indention =
      width != nullptr && width->is_string() ? width->str() : std::string(size_t(int_argument(width, 4)), ' ');
  const bool first = bool_argument(args.get(1, "first"), false);
  const bool blank = bool_argument(args.get(2, "blank"), false);
  const std::vector<std::string> lines = split_lines(text + "\n", false);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    if (i > 0 && (blank || !lines[i].empty())) out += indention;
    out += lines[i];
  }
  return first ? indention + out : out;
}

Value json_filter(const Value& input, const CallArgs& args, SizeLimit limit) {
  args.check("tojson", 0, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonStyle style;
  if (const Value* indent_value = args.get(99, "indent"); indent_value != nullptr && !indent_value->is_none()) {
    style.indent = int(indent_value->as_int());
  }
  if (const Value* separators = args.get(99, "separators"); separators != nullptr && !separators->is_none()) {
    if (!separators->is_array() || separators->array().size() != 2) fail("tojson: separators must be a pair");
    style.item_separator = to_str(separators->array()[0]);
    style.key_separator = to_str(separators->array()[1]);
    if (style.item_separator.empty()) style.item_separator = "\x01";  // an explicit "" is not the default
  }
  style.sort_keys = bool_argument(args.get(99, "sort_keys"), false);
  std::string text = to_json(input, style);
  if (style.item_separator == "\x01") std::erase(text, '\x01');
  if (bool_argument(args.get(99, "ensure_ascii"), false)) {
    std::string ascii;
    for (char32_t c : decode_utf8(text)) {
      if (c < 0x80) {
        ascii += char(c);
      } else if (c < 0x10000) {
        ascii += fmt::format("\\u{:04x}", uint32_t(c));
      } else {
        const uint32_t v = uint32_t(c) - 0x10000;
        ascii += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      }
    }
    text = std::move(ascii);
  }
  return checked(std::move(text), limit);
}

// Python's round(x, n): half to even on the decimal value.
double python_round(double value, int64_t digits) {
  const double scale = std::pow(10.0, double(digits));
  const double scaled = value * scale;
  double rounded = std::nearbyint(scaled);  // the default rounding mode is half to even
  return rounded / scale;
}

}  // namespace

bool is_filter_name(std::string_view name) {
  static constexpr std::string_view kNames[] = {
      "abs",    "attr",       "batch",       "capitalize", "center",   "count",
      "d",      "default",    "dictsort",    "e",          "escape",   "filesizeformat",
      "first",  "float",      "forceescape", "format",     "groupby",  "indent",
      "int",    "items",      "join",        "last",       "length",   "list",
      "lower",  "map",        "max",         "min",        "pprint",   "random",
      "reject", "rejectattr", "replace",     "reverse",    "round",    "safe",
      "select", "selectattr", "slice",       "sort",       "string",   "striptags",
      "sum",    "title",      "tojson",      "trim",       "truncate", "unique",
      "upper",  "urlencode",  "urlize",      "wordcount",  "wordwrap", "xmlattr"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

bool is_test_name(std::string_view name) {
  static constexpr std::string_view kNames[] = {
      "boolean",  "callable", "defined",  "divisibleby", "eq",          "equalto", "escaped", "even",
      "false",    "filter",   "float",    "ge",          "greaterthan", "gt",      "in",      "integer",
      "iterable", "le",       "lessthan", "lower",       "lt",          "mapping", "ne",      "none",
      "number",   "odd",      "sameas",   "sequence",    "string",      "test",    "true",    "undefined",
      "upper",    "==",       "!=",       "<",           "<=",          ">",       ">="};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

Value call_filter(std::string_view name, const Value& input, const CallArgs& args, SizeLimit limit) {
  const auto needs_string = [&]() -> std::string {
    if (input.is_undefined()) fail(std::get<Undefined>(input.data).name);
    return to_str(input);
  };
  if (name == "tojson") return json_filter(input, args, limit);
  if (name == "default" || name == "d") {
    args.check(name, 2, {"default_value", "boolean"});
    const bool boolean = bool_argument(args.get(1, "boolean"), false);
    const Value* fallback = args.get(0, "default_value");
    if (input.is_undefined() || (boolean && !truthy(input))) return fallback != nullptr ? *fallback : Value("");
    return input;
  }
  if (name == "length" || name == "count") {
    if (input.is_string()) return int64_t(decode_utf8(input.str()).size());
    if (input.is_array()) return int64_t(input.array().size());
    if (input.is_object() && !input.object().is_namespace) return int64_t(input.object().items.size());
    if (input.is_undefined()) return int64_t{0};
    fail(fmt::format("object of type '{}' has no len()", type_name(input)));
  }
  if (name == "trim") {
    args.check("trim", 1, {"chars"});
    return strip(needs_string(), args.get(0, "chars"), true, true);
  }
  if (name == "upper") return map_case(needs_string(), true);
  if (name == "lower") return map_case(needs_string(), false);
  if (name == "capitalize") return capitalize(needs_string());
  if (name == "title") return title(needs_string());
  if (name == "string") return input.is_undefined() ? Value("") : Value(to_str(input));
  if (name == "safe") return input;
  if (name == "escape" || name == "e" || name == "forceescape") return html_escape(to_str(input));
  if (name == "replace") {
    args.check("replace", 3, {"old", "new", "count"});
    return replace(needs_string(), string_argument(args.get(0, "old"), "replace's old"),
                   to_str(args.get(1, "new") != nullptr ? *args.get(1, "new") : Value("")),
                   int_argument(args.get(2, "count"), -1), limit);
  }
  if (name == "items") {
    if (input.is_undefined()) return Array{};
    if (!input.is_object() || input.object().is_namespace)
      fail(fmt::format("items: expected a dict, got {}", type_name(input)));
    Array pairs;
    for (const auto& [k, v] : input.object().items) pairs.push_back(make_tuple(Array{Value(k), v}));
    return pairs;
  }
  if (name == "first" || name == "last") {
    std::vector<Value> items = iterate(input);
    if (items.empty()) return Undefined{fmt::format("No {} item, sequence was empty.", name)};
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Array(iterate(input));
  if (name == "reverse") {
    if (input.is_string()) {
      std::u32string chars = decode_utf8(input.str());
      std::reverse(chars.begin(), chars.end());
      return encode_utf8(chars);
    }
    std::vector<Value> items = iterate(input);
    std::reverse(items.begin(), items.end());
    return Array(std::move(items));
  }
  if (name == "join") {
    args.check("join", 2, {"d", "attribute"});
    const Value* separator = args.get(0, "d");
    const Value* attribute = args.get(1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(input)) {
      if (!first && separator != nullptr) out += to_str(*separator);
      first = false;
      out += to_str(attribute != nullptr ? attribute_path(item, to_str(*attribute)) : item);
      if (out.size() > limit.max_bytes) break;
    }
    return checked(std::move(out), limit);
  }
  if (name == "map") return map_items(input, args, limit);
  if (name == "select" || name == "reject") return select_items(input, args, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return select_items(input, args, true, name == "selectattr");
  if (name == "sort") return sort_items(input, args);
  if (name == "unique") {
    args.check("unique", 2, {"case_sensitive", "attribute"});
    const bool case_sensitive = bool_argument(args.get(0, "case_sensitive"), false);
    const Value* attribute = args.get(1, "attribute");
    Array kept;
    std::vector<Value> seen;
    for (const Value& item : iterate(input)) {
      Value key =
          lower_if_string(attribute != nullptr ? attribute_path(item, to_str(*attribute)) : item, case_sensitive);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) {
        seen.push_back(std::move(key));
        kept.push_back(item);
      }
    }
    return kept;
  }
  if (name == "dictsort") {
    args.check("dictsort", 3, {"case_sensitive", "by", "reverse"});
    if (!input.is_object()) fail("dictsort: expected a dict");
    const bool case_sensitive = bool_argument(args.get(0, "case_sensitive"), false);
    const bool by_value = args.get(1, "by") != nullptr && to_str(*args.get(1, "by")) == "value";
    const bool reverse = bool_argument(args.get(2, "reverse"), false);
    std::vector<std::pair<std::string, Value>> items = input.object().items;
    std::stable_sort(items.begin(), items.end(), [&](const auto& a, const auto& b) {
      const Value ka = lower_if_string(by_value ? a.second : Value(a.first), case_sensitive);
      const Value kb = lower_if_string(by_value ? b.second : Value(b.first), case_sensitive);
      return reverse ? compare(kb, ka) < 0 : compare(ka, kb) < 0;
    });
    Array pairs;
    for (auto& [k, v] : items) pairs.push_back(make_tuple(Array{Value(k), v}));
    return pairs;
  }
  if (name == "min" || name == "max") return min_max(input, args, name == "max");
  if (name == "sum") {
    args.check("sum", 2, {"attribute", "start"});
    const Value* attribute = args.get(0, "attribute");
    Value total = args.get(1, "start") != nullptr ? *args.get(1, "start") : Value(int64_t{0});
    for (const Value& item : iterate(input)) {
      total =
          binary_operator("+", total, attribute != nullptr ? attribute_path(item, to_str(*attribute)) : item, limit);
    }
    return total;
  }
  if (name == "int") {
    args.check("int", 2, {"default", "base"});
    return to_int(input, args.get(0, "default"), int_argument(args.get(1, "base"), 10));
  }
  if (name == "float") {
    args.check("float", 1, {"default"});
    return to_float(input, args.get(0, "default"));
  }
  if (name == "abs") {
    if (input.is_float()) return std::fabs(input.as_double());
    const int64_t value = input.as_int();
    if (value == INT64_MIN) fail("integer overflow in abs");
    return value < 0 ? -value : value;
  }
  if (name == "round") {
    args.check("round", 2, {"precision", "method"});
    const int64_t precision = int_argument(args.get(0, "precision"), 0);
    const std::string method = args.get(1, "method") != nullptr ? to_str(*args.get(1, "method")) : "common";
    const double value = input.as_double(), scale = std::pow(10.0, double(precision));
    if (method == "common") return python_round(value, precision);
    if (method == "floor") return std::floor(value * scale) / scale;
    if (method == "ceil") return std::ceil(value * scale) / scale;
    fail("round: method must be 'common', 'ceil' or 'floor'");
  }
  if (name == "indent") return indent(needs_string(), args);
  if (name == "format") {
    Array values(args.positional.begin(), args.positional.end());
    return percent_format(needs_string(), values, limit);
  }
  if (name == "center") {
    const int64_t width = int_argument(args.get(0, "width"), 80);
    const std::string text = needs_string();
    const int64_t length = int64_t(decode_utf8(text).size());
    if (width <= length) return text;
    if (width > int64_t(limit.max_bytes)) fail("center: width past the size limit");
    const int64_t margin = width - length;
    const int64_t left = margin / 2 + (margin & width & 1);  // Python's str.center
    return std::string(size_t(left), ' ') + text + std::string(size_t(margin - left), ' ');
  }
  if (name == "wordcount") {
    int64_t words = 0;
    bool in_word = false;
    for (char32_t c : decode_utf8(needs_string())) {
      const bool word_char = c == '_' || (c < 0x80 ? std::isalnum(int(c)) != 0 : !is_python_space(c));
      if (word_char && !in_word) ++words;
      in_word = word_char;
    }
    return words;
  }
  if (name == "attr") return get_attribute(input, string_argument(args.get(0, "name"), "attr's name"));
  if (is_filter_name(name)) fail(fmt::format("the filter '{}' is not supported", name));
  fail(fmt::format("unknown filter '{}'", name));
}

bool call_test(std::string_view name, const Value& input, const CallArgs& args) {
  const Value* argument = args.get(0, "");
  const auto other = [&]() -> const Value& {
    if (argument == nullptr) fail(fmt::format("the test '{}' needs an argument", name));
    return *argument;
  };
  if (name == "defined") return !input.is_undefined();
  if (name == "undefined") return input.is_undefined();
  if (name == "none") return input.is_none();
  if (name == "boolean") return input.is_bool();
  if (name == "true") return input.is_bool() && std::get<bool>(input.data);
  if (name == "false") return input.is_bool() && !std::get<bool>(input.data);
  if (name == "integer") return input.is_int();
  if (name == "float") return input.is_float();
  if (name == "number") return input.is_number();
  if (name == "string") return input.is_string();
  if (name == "mapping") return input.is_object() && !input.object().is_namespace;
  if (name == "iterable")
    return input.is_array() || input.is_string() || (input.is_object() && !input.object().is_namespace);
  if (name == "sequence")
    return input.is_array() || input.is_string() || (input.is_object() && !input.object().is_namespace);
  if (name == "callable") return input.is_function();
  if (name == "odd") return input.as_int() % 2 != 0;
  if (name == "even") return input.as_int() % 2 == 0;
  if (name == "divisibleby") {
    const int64_t divisor = other().as_int();
    if (divisor == 0) fail("integer division or modulo by zero");
    return input.as_int() % divisor == 0;
  }
  if (name == "lower") return input.is_string() && map_case(input.str(), false) == input.str();
  if (name == "upper") return input.is_string() && map_case(input.str(), true) == input.str();
  if (name == "escaped") return false;
  if (name == "in") return contains(other(), input);
  if (name == "sameas") {
    const Value& b = other();
    if (input.data.index() != b.data.index()) return false;
    if (input.is_none() || input.is_bool() || input.is_int() || input.is_float()) return equal(input, b);
    if (input.is_array()) return std::get<ArrayPtr>(input.data) == std::get<ArrayPtr>(b.data);
    if (input.is_object()) return std::get<ObjectPtr>(input.data) == std::get<ObjectPtr>(b.data);
    return false;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(input, other());
  if (name == "ne" || name == "!=") return !equal(input, other());
  if (name == "lt" || name == "lessthan" || name == "<") return compare(input, other()) < 0;
  if (name == "le" || name == "<=") return compare(input, other()) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(input, other()) > 0;
  if (name == "ge" || name == ">=") return compare(input, other()) >= 0;
  if (is_test_name(name)) fail(fmt::format("the test '{}' is not supported", name));
  fail(fmt::format("unknown test '{}'", name));
}

}  // namespace chronos::jinja::detail
