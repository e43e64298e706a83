// ReasoningSplitter: tag scanning over streamed pieces, holding back a possible partial tag.
#include "chronos/reasoning.h"

#include <algorithm>

namespace chronos {
namespace {

// The length of the longest suffix of `text` that is a proper prefix of `tag`.
size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

bool is_blank(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

}  // namespace

ReasoningSplitter::ReasoningSplitter(bool inside, std::string open_tag, std::string close_tag)
    : open_(std::move(open_tag)), close_(std::move(close_tag)), inside_(inside) {}

ReasoningParts ReasoningSplitter::push(std::string_view text) {
  pending_.append(text);
  return drain(false);
}

ReasoningParts ReasoningSplitter::finish() { return drain(true); }

ReasoningParts ReasoningSplitter::drain(bool final) {
  ReasoningParts out;
  std::string_view rest = pending_;
  while (!rest.empty()) {
    if (after_close_) {
      size_t blanks = 0;
      while (blanks < rest.size() && is_blank(rest[blanks])) ++blanks;
      rest.remove_prefix(blanks);
      if (rest.empty()) break;
      after_close_ = false;
    }
    const std::string& tag = inside_ ? close_ : open_;
    std::string& sink = inside_ ? out.reasoning : out.content;
    const size_t at = rest.find(tag);
    if (at != std::string_view::npos) {
      sink.append(rest.substr(0, at));
      rest.remove_prefix(at + tag.size());
      after_close_ = inside_;
      inside_ = !inside_;
      continue;
    }
    const size_t held = final ? 0 : partial_tag_suffix(rest, tag);
    sink.append(rest.substr(0, rest.size() - held));
    rest.remove_prefix(rest.size() - held);
    break;
  }
  pending_.erase(0, pending_.size() - rest.size());  // at the end nothing is held back
  return out;
}

bool prompt_opens_reasoning(std::string_view prompt, std::string_view open_tag, std::string_view close_tag) {
  const size_t open = prompt.rfind(open_tag);
  if (open == std::string_view::npos) return false;
  const size_t close = prompt.rfind(close_tag);
  return close == std::string_view::npos || close < open;
}

}  // namespace chronos
