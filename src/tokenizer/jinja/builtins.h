// Jinja's built-in filters and tests, Python's str/dict/list methods, and the operators, over the
// interpreter's values. Names follow Jinja 3.1 and Python; what a chat template cannot use in
// transformers' sandbox (mutating a list or dict) fails as it does there.
#pragma once

#include <string_view>
#include <vector>

#include "chronos/jinja.h"
#include "tokenizer/jinja/value.h"

namespace chronos::jinja::detail {

// The largest string or list an operation may build (the render's output limit).
struct SizeLimit {
  size_t max_bytes;
};

Value get_attribute(const Value& object, const std::string& name);  // object.name
Value get_item(const Value& object, const Value& key);              // object[key]
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step);
std::vector<Value> iterate(const Value& value);  // what a for loop walks
Value binary_operator(std::string_view op, const Value& left, const Value& right, SizeLimit limit);
bool contains(const Value& container, const Value& item);  // item in container

// Jinja's filter and test names, for the parser: an unknown name is an error at parse time, as
// in Jinja; a known one this interpreter does not implement fails when it runs.
bool is_filter_name(std::string_view name);
bool is_test_name(std::string_view name);

Value call_filter(std::string_view name, const Value& input, const CallArgs& args, SizeLimit limit);
bool call_test(std::string_view name, const Value& input, const CallArgs& args);
// object.name(args) for Python's str, dict and list methods; fails when the object has no such
// method (or one transformers' sandbox forbids, such as list.append).
Value call_method(const Value& object, std::string_view name, const CallArgs& args, SizeLimit limit);

}  // namespace chronos::jinja::detail
