// PCRE2 wrapper used for Split pre-tokenizers and Replace normalizers/decoders.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "chronos/error.h"
#include "tokenizer/utf8.h"

namespace chronos::tokenizer_detail {

namespace {

// HF tokenizers runs Oniguruma, whose Unicode \w is Letter|Mark|Number|Connector_Punctuation;
// PCRE2's UCP \w lacks marks (before 10.43) and non-decimal numbers, so \w is spelled out.
std::string oniguruma_to_pcre2(const std::string& pattern) {
  constexpr const char* kWordClass = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 'w') {
        out += in_class ? std::string(kWordClass) : "[" + std::string(kWordClass) + "]";
      } else if (next == 'W' && !in_class) {
        out += "[^" + std::string(kWordClass) + "]";
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

struct Regex::State {
  pcre2_code* code = nullptr;
  bool jit = false;
};

Regex::Regex(const std::string& pattern) : state_(std::make_unique<State>()) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  const std::string translated = oniguruma_to_pcre2(pattern);
  state_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                               PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (state_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    throw_error("regex '{}' does not compile at offset {}: {}", pattern, error_offset,
                reinterpret_cast<const char*>(message));
  }
  state_->jit = pcre2_jit_compile(state_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() {
  if (state_ && state_->code) pcre2_code_free(state_->code);
}

std::vector<Span> Regex::find_all(std::string_view text) const {
  std::vector<Span> spans;
  // Match data is per call so that one Regex can be used from several threads.
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(state_->code, nullptr);
  CHRONOS_CHECK(data != nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    // The text was validated as UTF-8 up front, so PCRE2's own check is skipped.
    const int rc = state_->jit
                       ? pcre2_jit_match(state_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, data, nullptr)
                       : pcre2_match(state_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(data);
      throw_error("regex match failed with PCRE2 error {}", rc);
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t begin = ovector[0], end = ovector[1];
    spans.emplace_back(begin, end);
    if (end > begin) {
      pos = end;
    } else {
      if (end >= text.size()) break;
      pos = end + utf8_char_length(text, end);
    }
  }
  pcre2_match_data_free(data);
  return spans;
}

std::vector<Span> find_all_literal(std::string_view text, std::string_view literal) {
  std::vector<Span> spans;
  if (literal.empty()) return spans;
  size_t pos = 0;
  while ((pos = text.find(literal, pos)) != std::string_view::npos) {
    spans.emplace_back(pos, pos + literal.size());
    pos += literal.size();
  }
  return spans;
}

}  // namespace chronos::tokenizer_detail
