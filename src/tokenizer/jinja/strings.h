// Python's str operations over UTF-8 text, by code point, and the argument helpers of the
// filters and methods.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/builtins.h"

namespace chronos::jinja::detail {

bool is_python_space(char32_t c);
// `text`, or a failure when it is longer than the limit.
std::string checked(std::string text, SizeLimit limit);

std::string map_case(const std::string& text, bool upper);  // str.upper / str.lower
std::string capitalize(const std::string& text);
std::string title(const std::string& text);
// str.strip / lstrip / rstrip: `chars` null or None strips whitespace.
std::string strip(const std::string& text, const Value* chars, bool left, bool right);
// str.split / rsplit: `separator` null or None splits on runs of whitespace.
Array split(const std::string& text, const Value* separator, int64_t max_split, bool from_right);
std::vector<std::string> split_lines(const std::string& text, bool keep_ends);
std::string replace(const std::string& text, const std::string& old, const std::string& with, int64_t count,
                    SizeLimit limit);
// printf-style formatting (the % operator and the format filter): %s %r %d %i %f %x %%.
std::string percent_format(const std::string& format, const Array& values, SizeLimit limit);
// str.format with {} / {0} / {name} fields and no format specs.
std::string brace_format(const std::string& format, const CallArgs& args, SizeLimit limit);
std::string html_escape(const std::string& text);

// Arguments: a string (fails otherwise), an int or a bool with a fallback when absent.
const std::string& string_argument(const Value* value, std::string_view what);
int64_t int_argument(const Value* value, int64_t fallback);
bool bool_argument(const Value* value, bool fallback);
// Python's index normalization for a sequence of `size` items: negative counts from the end.
int64_t normalize_index(int64_t index, size_t size);

}  // namespace chronos::jinja::detail
