// BpeModel: the tokenizer.json "BPE" model (ranks, byte fallback, unk, affixes) with a word cache.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace chronos::tokenizer_detail {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // Throws Error on a malformed model (merge tokens missing from vocab, dropout, ...).
  explicit BpeModel(const nlohmann::json& node);

  // Appends the ids of one pre-tokenized word.
  void tokenize(std::string_view word, std::vector<int32_t>& ids) const;

  const TokenMap& vocab() const { return vocab_; }
  // Token text per id ("" where the vocab has a gap).
  const std::vector<std::string>& id_to_token() const { return id_to_token_; }

 private:
  struct MergeTarget {
    uint32_t rank;
    int32_t new_id;
  };
  std::vector<int32_t> merge_word(std::string_view word) const;

  TokenMap vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<uint64_t, MergeTarget> merges_;  // key: (left id << 32) | right id
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::array<int32_t, 256> byte_ids_{};  // id of "<0xXX>" per byte, -1 when absent

  // Word cache: encoding is dominated by repeated words, so results are memoized.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace chronos::tokenizer_detail
