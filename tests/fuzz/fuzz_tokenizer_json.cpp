// libFuzzer target: tokenizer.json text loaded by Tokenizer::from_json. Bad input must be a
// chronos::Error; a tokenizer that loads must encode and decode sample texts, its own special
// tokens and id sequences around the vocabulary's edges with the properties of
// tokenizer_properties.h.
#include <algorithm>
#include <optional>

#include "fuzz/tokenizer_properties.h"

namespace {

constexpr const char* kSamples[] = {
    "Hello world",
    "  two  spaces\tand a tab\nand a line",
    "h\xC3\xA9llo w\xC3\xB6rld \xE6\x97\xA5\xE6\x9C\xAC",
    "\xF0\x9F\x99\x82 emoji",
    "a\u2581b \u2581",
    "<s>abc</s>",
    "123 4567, x.y!",
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chronos;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::optional<Tokenizer> loaded;
  try {
    loaded = Tokenizer::from_json(text);
  } catch (const Error&) {
    return 0;
  }
  const Tokenizer& tokenizer = *loaded;
  for (const char* sample : kSamples) {
    fuzz::check_encode(tokenizer, sample, false);
    fuzz::check_encode(tokenizer, sample, true);
  }
  // The first ids of the vocabulary (byte tokens and specials live there), then the same with
  // ids outside the vocabulary woven in, then the specials' own text.
  const int32_t n = std::min(tokenizer.vocab_size(), 300);
  std::vector<int32_t> ids, woven;
  for (int32_t id = 0; id < n; ++id) {
    ids.push_back(id);
    woven.push_back(id);
    if (id % 3 == 1) woven.push_back(id % 2 ? -1 : tokenizer.vocab_size());
  }
  fuzz::check_decode(tokenizer, ids);
  fuzz::check_decode(tokenizer, woven);
  std::reverse(ids.begin(), ids.end());
  fuzz::check_decode(tokenizer, ids);
  for (int32_t id = 0; id < n; ++id) {
    try {
      if (tokenizer.is_special(id))
        fuzz::check_encode(tokenizer, "x" + std::string(tokenizer.id_to_token(id)) + "y", false);
    } catch (const Error&) {
      // A gap in the vocabulary.
    }
  }
  return 0;
}
