// libFuzzer target: encode and decode of arbitrary bytes with the fixture tokenizers (byte-level
// BPE, SentencePiece byte fallback, Metaspace, no decoder, Fuse). Input: byte 0 picks the
// tokenizer, byte 1 the mode (bit 0: the rest is ids, not text; bit 1: add special tokens), the
// rest is text, or ids of 3 little-endian bytes each, mapped onto [-4, vocab_size + 4).
#include <filesystem>

#include "fuzz/tokenizer_properties.h"

namespace {

const std::vector<chronos::Tokenizer>& tokenizers() {
  static const std::vector<chronos::Tokenizer> loaded = [] {
    std::vector<chronos::Tokenizer> out;
    const std::filesystem::path root = std::filesystem::path(CHRONOS_TEST_DATA_DIR) / "tokenizers";
    for (const char* name : {"qwen2", "mistral", "synth_metaspace", "synth_affixes", "synth_bytelevel",
                             "synth_split_contiguous", "mistral_metaspace"}) {
      out.push_back(chronos::Tokenizer::load(root / name));
    }
    return out;
  }();
  return loaded;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chronos;
  if (size < 2) return 0;
  const auto& all = tokenizers();
  const Tokenizer& tokenizer = all[data[0] % all.size()];
  const bool as_ids = (data[1] & 1) != 0;
  const bool add_special_tokens = (data[1] & 2) != 0;
  data += 2;
  size -= 2;
  if (!as_ids) {
    fuzz::check_encode(tokenizer, std::string_view(reinterpret_cast<const char*>(data), size), add_special_tokens);
    return 0;
  }
  std::vector<int32_t> ids;
  const uint32_t range = uint32_t(tokenizer.vocab_size()) + 8;
  for (size_t i = 0; i + 3 <= size; i += 3) {
    const uint32_t value = uint32_t(data[i]) | uint32_t(data[i + 1]) << 8 | uint32_t(data[i + 2]) << 16;
    ids.push_back(int32_t(value % range) - 4);
  }
  fuzz::check_decode(tokenizer, ids);
  return 0;
}
