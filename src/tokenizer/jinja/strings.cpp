// Python's str operations over UTF-8 text, by code point: case mapping, strip, split, replace,
// printf-style and str.format formatting.
#include "tokenizer/jinja/strings.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

namespace chronos::jinja::detail {
namespace {

bool is_cased_letter(char32_t c) {
  const auto category = utf8proc_category(utf8proc_int32_t(c));
  return category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LL || category == UTF8PROC_CATEGORY_LT;
}

}  // namespace

bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string checked(std::string text, SizeLimit limit) {
  if (text.size() > limit.max_bytes) fail(fmt::format("a string grew past the limit of {} bytes", limit.max_bytes));
  return text;
}

// str.upper / str.lower: utf8proc's one-to-one mappings plus Python's common one-to-many ones
// (German sharp s, the Latin ligatures, dotted capital I).
std::string map_case(const std::string& text, bool upper) {
  static constexpr std::pair<char32_t, std::u32string_view> kUpperSpecial[] = {
      {0x00DF, U"SS"},  {0xFB00, U"FF"},  {0xFB01, U"FI"}, {0xFB02, U"FL"},
      {0xFB03, U"FFI"}, {0xFB04, U"FFL"}, {0xFB05, U"ST"}, {0xFB06, U"ST"}};
  std::u32string out;
  for (char32_t c : decode_utf8(text)) {
    if (upper) {
      const auto* special = std::find_if(std::begin(kUpperSpecial), std::end(kUpperSpecial),
                                         [c](const auto& entry) { return entry.first == c; });
      if (special != std::end(kUpperSpecial)) {
        out += special->second;
        continue;
      }
      out += char32_t(utf8proc_toupper(utf8proc_int32_t(c)));
    } else if (c == 0x0130) {
      out += U"i\u0307";
    } else {
      out += char32_t(utf8proc_tolower(utf8proc_int32_t(c)));
    }
  }
  return encode_utf8(out);
}

std::string capitalize(const std::string& text) {
  std::u32string chars = decode_utf8(text);
  for (size_t i = 0; i < chars.size(); ++i) {
    const auto c = utf8proc_int32_t(chars[i]);
    chars[i] = char32_t(i == 0 ? utf8proc_toupper(c) : utf8proc_tolower(c));
  }
  return encode_utf8(chars);
}

// str.title(): a cased letter after an uncased character starts a word.
std::string title(const std::string& text) {
  std::u32string chars = decode_utf8(text);
  bool previous_cased = false;
  for (char32_t& c : chars) {
    const bool cased = is_cased_letter(c);
    c = char32_t(previous_cased ? utf8proc_tolower(utf8proc_int32_t(c)) : utf8proc_toupper(utf8proc_int32_t(c)));
    previous_cased = cased;
  }
  return encode_utf8(chars);
}

// str.strip / lstrip / rstrip: chars None strips whitespace.
std::string strip(const std::string& text, const Value* chars, bool left, bool right) {
  const std::u32string s = decode_utf8(text);
  std::u32string set;
  const bool whitespace = chars == nullptr || chars->is_none() || chars->is_undefined();
  if (!whitespace) {
    if (!chars->is_string()) fail("strip arg must be None or str");
    set = decode_utf8(chars->str());
  }
  const auto strippable = [&](char32_t c) {
    return whitespace ? is_python_space(c) : set.find(c) != std::u32string::npos;
  };
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end && strippable(s[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strippable(s[end - 1])) --end;
  }
  return encode_utf8(std::u32string_view(s).substr(begin, end - begin));
}

// str.split / rsplit with Python's rules: no separator splits on runs of whitespace.
Array split(const std::string& text, const Value* separator, int64_t max_split, bool from_right) {
  Array parts;
  if (separator == nullptr || separator->is_none()) {
    const std::u32string s = decode_utf8(text);
    std::vector<std::pair<size_t, size_t>> words;
    for (size_t i = 0; i < s.size();) {
      while (i < s.size() && is_python_space(s[i])) ++i;
      if (i == s.size()) break;
      size_t j = i;
      while (j < s.size() && !is_python_space(s[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (max_split >= 0 && words.size() > size_t(max_split)) {
      // Keep max_split splits from the chosen side; the rest stays one piece, inner whitespace kept.
      std::vector<std::pair<size_t, size_t>> kept;
      // The unsplit rest keeps its inner and outer whitespace on the far side.
      if (!from_right) {
        kept.assign(words.begin(), words.begin() + max_split);
        kept.emplace_back(words[size_t(max_split)].first, s.size());
      } else {
        const size_t first_kept = words.size() - size_t(max_split);
        kept.emplace_back(0, words[first_kept - 1].second);
        kept.insert(kept.end(), words.begin() + long(first_kept), words.end());
      }
      words = std::move(kept);
    }
    for (auto [b, e] : words) parts.push_back(encode_utf8(std::u32string_view(s).substr(b, e - b)));
    return parts;
  }
  if (!separator->is_string()) fail("must be str or None");
  const std::string& sep = separator->str();
  if (sep.empty()) fail("empty separator");
  std::vector<std::string> pieces;
  if (!from_right) {
    size_t start = 0;
    while (true) {
      const size_t found = text.find(sep, start);
      if (found == std::string::npos || (max_split >= 0 && int64_t(pieces.size()) >= max_split)) break;
      pieces.push_back(text.substr(start, found - start));
      start = found + sep.size();
    }
    pieces.push_back(text.substr(start));
  } else {
    size_t end = text.size();
    std::vector<std::string> reversed;
    while (true) {
      if (max_split >= 0 && int64_t(reversed.size()) >= max_split) break;
      if (end < sep.size()) break;
      const size_t found = text.rfind(sep, end - sep.size());
      if (found == std::string::npos) break;
      reversed.push_back(text.substr(found + sep.size(), end - found - sep.size()));
      end = found;
    }
    reversed.push_back(text.substr(0, end));
    pieces.assign(reversed.rbegin(), reversed.rend());
  }
  for (auto& piece : pieces) parts.push_back(std::move(piece));
  return parts;
}

// str.splitlines() on \n, \r\n and \r (and the rarer line breaks Python also knows).
std::vector<std::string> split_lines(const std::string& text, bool keep_ends) {
  std::vector<std::string> lines;
  const std::u32string s = decode_utf8(text);
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char32_t c = s[i];
    const bool is_break = c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                          c == 0x2028 || c == 0x2029;
    if (!is_break) continue;
    size_t end = i;
    if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
    lines.push_back(encode_utf8(std::u32string_view(s).substr(start, (keep_ends ? i + 1 : end) - start)));
    start = i + 1;
  }
  if (start < s.size()) lines.push_back(encode_utf8(std::u32string_view(s).substr(start)));
  return lines;
}

std::string replace(const std::string& text, const std::string& old, const std::string& with, int64_t count,
                    SizeLimit limit) {
  std::string out;
  if (old.empty()) {  // Python inserts `with` between every code point and at both ends
    const std::u32string s = decode_utf8(text);
    int64_t done = 0;
    for (size_t i = 0; i <= s.size(); ++i) {
      if (count < 0 || done < count) {
        out += with;
        ++done;
      }
      if (i < s.size()) append_utf8(out, s[i]);
      if (out.size() > limit.max_bytes) break;
    }
    return checked(std::move(out), limit);
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t found = text.find(old, start);
    if (found == std::string::npos) break;
    out.append(text, start, found - start);
    out += with;
    if (out.size() > limit.max_bytes) break;
    start = found + old.size();
    ++done;
  }
  out.append(text, start);
  return checked(std::move(out), limit);
}

std::string percent_format(const std::string& format, const Array& values, SizeLimit limit) {
  std::string out;
  size_t next_value = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    size_t j = i + 1;
    std::string spec;
    while (j < format.size() && std::string_view("0123456789.-+ ").find(format[j]) != std::string_view::npos) {
      spec += format[j++];
    }
    if (j >= format.size()) fail("incomplete format");
    const char conversion = format[j];
    i = j;
    if (conversion == '%') {
      out += '%';
      continue;
    }
    if (next_value >= values.size()) fail("not enough arguments for format string");
    const Value& value = values[next_value++];
    std::string text;
    switch (conversion) {
      case 's': text = to_str(value); break;
      case 'r': text = to_repr(value); break;
      case 'd':
      case 'i': text = std::to_string(value.is_float() ? int64_t(value.as_double()) : value.as_int()); break;
      case 'x': text = fmt::format("{:x}", value.as_int()); break;
      case 'f': {
        int precision = 6;
        if (const size_t dot = spec.find('.'); dot != std::string::npos) precision = std::atoi(spec.c_str() + dot + 1);
        text = fmt::format("{:.{}f}", value.as_double(), precision);
        spec = spec.substr(0, spec.find('.'));
        break;
      }
      default: fail(fmt::format("unsupported format character '{}'", conversion));
    }
    const bool left_align = !spec.empty() && spec[0] == '-';
    const int width = std::atoi(spec.c_str() + (left_align ? 1 : 0));
    const size_t length = decode_utf8(text).size();
    if (width > 0 && size_t(width) > length) {
      const std::string pad(size_t(width) - length, !left_align && spec[0] == '0' ? '0' : ' ');
      text = left_align ? text + pad : pad + text;
    }
    out += text;
  }
  if (next_value < values.size()) fail("not all arguments converted during string formatting");
  return checked(std::move(out), limit);
}

// str.format with {} / {0} / {name} fields and no format specs.
std::string brace_format(const std::string& format, const CallArgs& args, SizeLimit limit) {
  std::string out;
  size_t automatic = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}' && i + 1 < format.size() && format[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{' && i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '{') {
      const size_t end = format.find('}', i);
      if (end == std::string::npos) fail("Single '{' encountered in format string");
      const std::string field = format.substr(i + 1, end - i - 1);
      if (field.find_first_of(":!") != std::string::npos) fail("format specs in str.format are not supported");
      const Value* value = nullptr;
      if (field.empty()) {
        value = args.get(automatic++, "");
      } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
        value = args.get(size_t(std::stoul(field)), "");
      } else {
        for (const auto& [k, v] : args.keywords) {
          if (k == field) value = &v;
        }
      }
      if (value == nullptr) fail(fmt::format("format field '{}' has no argument", field));
      out += to_str(*value);
      i = end;
    } else {
      out += c;
    }
  }
  return checked(std::move(out), limit);
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

const std::string& string_argument(const Value* value, std::string_view what) {
  if (value == nullptr || !value->is_string()) {
    fail(fmt::format("{} must be a string, got {}", what, value == nullptr ? "nothing" : type_name(*value)));
  }
  return value->str();
}

int64_t int_argument(const Value* value, int64_t fallback) {
  if (value == nullptr || value->is_none()) return fallback;
  return value->as_int();
}

bool bool_argument(const Value* value, bool fallback) { return value == nullptr ? fallback : truthy(*value); }

int64_t normalize_index(int64_t index, size_t size) { return index < 0 ? index + int64_t(size) : index; }

}  // namespace chronos::jinja::detail
