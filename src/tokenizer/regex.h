// Regex: a PCRE2 (UTF + UCP, JIT when available) pattern that finds all matches in a string.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace chronos::tokenizer_detail {

// Byte ranges [begin, end) in the searched text.
using Span = std::pair<size_t, size_t>;

class Regex {
 public:
  // Throws Error naming the pattern when PCRE2 rejects it.
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping matches left to right; an empty match advances by one character.
  std::vector<Span> find_all(std::string_view text) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// All non-overlapping occurrences of a literal (none when the literal is empty).
std::vector<Span> find_all_literal(std::string_view text, std::string_view literal);

}  // namespace chronos::tokenizer_detail
