// TokenStreamDecoder: incremental detokenization that only ever returns final, whole characters.
//
// The decoder keeps a window of ids since the last point where everything decoded so far was
// final. Each push re-decodes only that window (with a context telling the decoders whether the
// window is the start of the sequence), returns the new text up to the part that could still
// change, and drops the window once nothing is pending. Because every decoder here is a per-token
// map plus concatenation, with first-token rules, byte merging and the ends of a Strip after a
// Fuse as the only couplings, decoding window by window reproduces the full decode exactly. Ids
// that decode to nothing never enter the window.
#include "chronos/error.h"
#include "chronos/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace chronos {

using tokenizer_detail::DecodeContext;

TokenStreamDecoder::TokenStreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : impl_(tokenizer.impl_), skip_special_tokens_(skip_special_tokens) {}

namespace {

bool is_decoded(const tokenizer_detail::TokenizerImpl& impl, int32_t id, bool skip_special_tokens) {
  const auto* added = impl.added(id);
  if (skip_special_tokens && added != nullptr && added->special) return false;
  return impl.token_text(id) != nullptr;
}

// `text` without the trailing characters that the strips could remove at the end of the sequence
// (at most the sum of their counts, each one of their contents).
std::string_view without_end_strips(const std::vector<tokenizer_detail::EndStrip>& strips, std::string_view text) {
  size_t budget = 0;
  for (const auto& strip : strips) budget += strip.count;
  while (budget > 0 && !text.empty()) {
    size_t begin = text.size() - 1;
    while (begin > 0 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) --begin;
    size_t pos = begin;
    const char32_t last = tokenizer_detail::next_codepoint(text, pos);
    bool strippable = false;
    for (const auto& strip : strips) strippable = strippable || strip.content == last;
    if (!strippable) break;
    text = text.substr(0, begin);
    --budget;
  }
  return text;
}

}  // namespace

std::string TokenStreamDecoder::push(int32_t id) {
  const auto& impl = *impl_;
  // An id the decode drops (outside the vocabulary, a skipped special token) changes no text. It
  // stays out of the window, so it can neither end a byte-fallback run it sits inside (the full
  // decode never sees it there) nor release text that is still pending.
  if (!is_decoded(impl, id, skip_special_tokens_)) return {};
  window_.push_back(id);
  const DecodeContext context{at_start_, /*at_end=*/false};
  const std::string text = impl.decode(window_, skip_special_tokens_, context);
  size_t safe = text.size();
  bool pending = false;

  // A run of byte-fallback tokens decodes as a unit (all U+FFFD if any byte is invalid), so none
  // of it is final until a non-byte token ends the run.
  if (impl.decoder_has_byte_fallback) {
    size_t run_start = window_.size();
    unsigned char byte = 0;
    while (run_start > 0 && tokenizer_detail::parse_byte_token(*impl.token_text(window_[run_start - 1]), byte)) {
      --run_start;
    }
    if (run_start < window_.size()) {
      const auto before = std::span<const int32_t>(window_).first(run_start);
      safe = impl.decode(before, skip_special_tokens_, context).size();
      pending = true;
    }
  }
  // A trailing U+FFFD may be an incomplete UTF-8 sequence that the next token completes.
  while (safe >= 3 && tokenizer_detail::ends_with_replacement_char(std::string_view(text).substr(0, safe))) {
    safe -= 3;
    pending = true;
  }
  // Characters a Strip after a Fuse removes if the sequence ends here.
  const size_t before_end_strip = safe;
  safe = without_end_strips(impl.end_strips, std::string_view(text).substr(0, safe)).size();
  pending = pending || safe < before_end_strip;
  // Nothing is final while the text is empty: a Strip after a Fuse has not finished with the
  // start of the sequence (it strips the start of the whole text, past this window).
  pending = pending || text.empty();

  std::string out;
  if (safe > emitted_) {
    out = text.substr(emitted_, safe - emitted_);
    emitted_ = safe;
  }
  if (!pending) {
    at_start_ = false;  // the window held at least the id just pushed
    window_.clear();
    emitted_ = 0;
  }
  return out;
}

std::string TokenStreamDecoder::finish() {
  const DecodeContext context{at_start_, /*at_end=*/true};
  const std::string text = impl_->decode(window_, skip_special_tokens_, context);
  std::string out = text.size() > emitted_ ? text.substr(emitted_) : std::string();
  if (!window_.empty()) at_start_ = false;
  window_.clear();
  emitted_ = 0;
  return out;
}

}  // namespace chronos
