// Helpers for the tokenizer tests: fixture paths, JSON reading, an independent UTF-8 check.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace chronos::test {

inline std::filesystem::path tokenizer_fixture(const std::string& name) {
  return std::filesystem::path(CHRONOS_TEST_DATA_DIR) / "tokenizers" / name;
}

inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Every fixture directory that has HF reference cases.
inline std::vector<std::string> tokenizer_fixture_names() {
  return {"qwen2",
          "mistral",
          "mistral_metaspace",
          "deepseek_v3",
          "kimi_k2",
          "gpt_oss",
          "synth_bytelevel",
          "synth_ignore_merges",
          "synth_metaspace",
          "synth_affixes",
          "synth_split_isolated",
          "synth_split_merged_prev",
          "synth_split_merged_next",
          "synth_split_contiguous",
          "synth_split_invert",
          "synth_o200k",
          "synth_glm4"};
}

// Written from the UTF-8 definition (RFC 3629), independent of the tokenizer's own check.
inline bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated sequence
    for (size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    const uint32_t min_cp[] = {0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

}  // namespace chronos::test
