// Properties the tokenizer harnesses check on any tokenizer that loads: encode gives ids of the
// vocabulary or an Error, decode and each streamed piece are valid UTF-8, and the streaming
// decoder's pieces concatenate to the full decode (the contract in chronos/tokenizer.h).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chronos/error.h"
#include "chronos/tokenizer.h"
#include "fuzz/fuzz_util.h"
#include "tokenizer/utf8.h"

namespace chronos::fuzz {

inline std::string ids_string(std::span<const int32_t> ids) {
  std::string out;
  for (const int32_t id : ids) out += std::to_string(id) + " ";
  return out;
}

inline void check_decode(const Tokenizer& tokenizer, std::span<const int32_t> ids) {
  for (const bool skip : {false, true}) {
    const std::string full = tokenizer.decode(ids, skip);
    CHRONOS_FUZZ_CHECK(!tokenizer_detail::find_invalid_utf8(full), "decode is not UTF-8 for ids %s",
                       ids_string(ids).c_str());
    TokenStreamDecoder stream(tokenizer, skip);
    std::string streamed;
    for (const int32_t id : ids) {
      const std::string piece = stream.push(id);
      CHRONOS_FUZZ_CHECK(!tokenizer_detail::find_invalid_utf8(piece), "streamed piece is not UTF-8 for ids %s",
                         ids_string(ids).c_str());
      streamed += piece;
    }
    streamed += stream.finish();
    CHRONOS_FUZZ_CHECK(streamed == full, "skip %d ids %s: streamed '%s' != decoded '%s'", int(skip),
                       ids_string(ids).c_str(), streamed.c_str(), full.c_str());
  }
}

// Encodes `text` and checks the ids and their decodes. Invalid UTF-8 must be refused with an Error.
inline void check_encode(const Tokenizer& tokenizer, std::string_view text, bool add_special_tokens) {
  std::vector<int32_t> ids;
  try {
    ids = tokenizer.encode(text, add_special_tokens);
  } catch (const Error&) {
    return;  // invalid UTF-8, or a pattern PCRE2 gave up on
  }
  CHRONOS_FUZZ_CHECK(!tokenizer_detail::find_invalid_utf8(text), "invalid UTF-8 was encoded");
  if (!add_special_tokens) {
    for (const int32_t id : ids) {
      CHRONOS_FUZZ_CHECK(id >= 0 && id < tokenizer.vocab_size(), "encode gave id %d, vocab size %d", id,
                         tokenizer.vocab_size());
    }
  }
  check_decode(tokenizer, ids);
}

}  // namespace chronos::fuzz
