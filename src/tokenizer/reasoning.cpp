// ReasoningSplitter: tag scanning over streamed pieces, holding back a possible partial tag;
// HarmonySplitter: the same over harmony's markers.
#include "chronos/reasoning.h"

#include <algorithm>
#include <tuple>
#include <utility>

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

namespace {

constexpr std::string_view kStart = "<|start|>", kChannel = "<|channel|>", kMessage = "<|message|>";
constexpr std::string_view kEnds[] = {"<|end|>", "<|return|>", "<|call|>"};

// The channel a harmony header names ("analysis" from "assistant<|channel|>analysis to=..."), empty
// when it names none.
std::string_view header_channel(std::string_view header) {
  const size_t at = header.find(kChannel);
  if (at == std::string_view::npos) return {};
  std::string_view rest = header.substr(at + kChannel.size());
  const size_t stop = std::min(rest.find(' '), rest.find("<|"));
  return rest.substr(0, stop);
}

// Where a possible marker starts in `text`'s tail ("<" or "<|..." without its "|>"), or npos.
size_t partial_marker(std::string_view text) {
  const size_t open = text.rfind('<');
  if (open == std::string_view::npos) return std::string_view::npos;
  const std::string_view tail = text.substr(open);
  if (tail.size() >= 2 && tail[1] != '|') return std::string_view::npos;
  return tail.find("|>") == std::string_view::npos ? open : std::string_view::npos;
}

}  // namespace

HarmonySplitter::HarmonySplitter(bool in_body, std::string channel)
    : in_body_(in_body), analysis_(channel == "analysis") {}

ReasoningParts HarmonySplitter::drain(bool final) {
  ReasoningParts out;
  std::string_view rest = pending_;
  while (!rest.empty()) {
    if (in_body_) {  // up to the first end marker
      size_t end = std::string_view::npos, end_size = 0;
      for (const std::string_view marker : kEnds)
        if (const size_t at = rest.find(marker); at < end) std::tie(end, end_size) = std::pair(at, marker.size());
      std::string& sink = analysis_ ? out.reasoning : out.content;
      if (end != std::string_view::npos) {
        sink.append(rest.substr(0, end));
        rest.remove_prefix(end + end_size);
        in_body_ = false;
        header_.clear();
        continue;
      }
      const size_t held = final ? std::string_view::npos : partial_marker(rest);
      const size_t keep = held == std::string_view::npos ? rest.size() : held;
      sink.append(rest.substr(0, keep));
      rest.remove_prefix(keep);
      break;
    }
    // A header: up to <|message|>. A reply that stops inside one has shown nothing.
    const size_t message = rest.find(kMessage);
    if (message == std::string_view::npos) {
      const size_t keep = final ? rest.size() : std::min(rest.size(), partial_marker(rest));
      header_.append(rest.substr(0, keep));
      rest.remove_prefix(keep);
      break;
    }
    header_.append(rest.substr(0, message));
    rest.remove_prefix(message + kMessage.size());
    std::string_view header = header_;
    if (const size_t start = header.rfind(kStart); start != std::string_view::npos)
      header.remove_prefix(start + kStart.size());
    analysis_ = header_channel(header) == "analysis";
    in_body_ = true;
  }
  pending_.erase(0, pending_.size() - rest.size());
  return out;
}

bool is_harmony_prompt(std::string_view prompt) {
  return prompt.find(kStart) != std::string_view::npos && prompt.find(kMessage) != std::string_view::npos;
}

std::unique_ptr<ReplySplitter> make_reply_splitter(std::string_view prompt) {
  if (!is_harmony_prompt(prompt)) return std::make_unique<ReasoningSplitter>(prompt_opens_reasoning(prompt));
  const size_t start = prompt.rfind(kStart);
  const std::string_view last = prompt.substr(start + kStart.size());
  const size_t message = last.find(kMessage);
  if (message == std::string_view::npos) return std::make_unique<HarmonySplitter>();
  return std::make_unique<HarmonySplitter>(true, std::string(header_channel(last.substr(0, message))));
}

bool prompt_opens_reasoning(std::string_view prompt, std::string_view open_tag, std::string_view close_tag) {
  const size_t open = prompt.rfind(open_tag);
  if (open == std::string_view::npos) return false;
  const size_t close = prompt.rfind(close_tag);
  return close == std::string_view::npos || close < open;
}

}  // namespace chronos
