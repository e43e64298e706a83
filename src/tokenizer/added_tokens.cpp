// Added-token extraction (HF added_vocabulary.rs find_matches): leftmost-longest, single_word,
// lstrip/rstrip.
#include <algorithm>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace chronos::tokenizer_detail {
namespace {

// The code point that ends text[0, end).
char32_t last_codepoint(std::string_view text, size_t end) {
  size_t begin = end - 1;
  while (begin > 0 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) --begin;
  return next_codepoint(text, begin);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<const AddedToken*> tokens) : tokens_(std::move(tokens)) {
  for (const auto* token : tokens_) {
    if (token->content.empty()) continue;
    by_first_byte_[static_cast<unsigned char>(token->content[0])].push_back(token);
  }
  for (auto& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(),
                     [](const AddedToken* a, const AddedToken* b) { return a->content.size() > b->content.size(); });
  }
}

std::vector<Segment> AddedTokenMatcher::split(std::string_view text) const {
  std::vector<Segment> segments;
  size_t emitted = 0;  // end of the last segment pushed
  size_t pos = 0;      // where the search resumes (the end of the last raw match)
  while (pos < text.size()) {
    const AddedToken* match = nullptr;
    for (const auto* token : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
      if (text.substr(pos).starts_with(token->content)) {
        match = token;
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + match->content.size();
    pos = stop;
    if (match->single_word) {
      const bool start_ok = start == 0 || !is_word_char(last_codepoint(text, start));
      size_t after = stop;
      const bool stop_ok = stop == text.size() || !is_word_char(next_codepoint(text, after));
      if (!start_ok || !stop_ok) continue;
    }
    if (match->lstrip) {
      size_t new_start = start;
      while (new_start > 0) {
        size_t b = new_start - 1;
        while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
        size_t probe = b;
        if (!is_unicode_whitespace(next_codepoint(text, probe))) break;
        new_start = b;
      }
      // The previous match may already have taken those spaces.
      start = std::max(new_start, emitted);
    }
    if (match->rstrip) {
      size_t probe = stop;
      while (probe < text.size()) {
        size_t next = probe;
        if (!is_unicode_whitespace(next_codepoint(text, next))) break;
        probe = next;
      }
      stop = probe;
    }
    if (emitted < start) segments.push_back({emitted, start, -1});
    segments.push_back({start, stop, match->id});
    emitted = stop;
  }
  if (emitted < text.size()) segments.push_back({emitted, text.size(), -1});
  return segments;
}

}  // namespace chronos::tokenizer_detail
