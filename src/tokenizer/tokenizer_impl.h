// TokenizerImpl: the loaded tokenizer.json pipeline shared by Tokenizer and TokenStreamDecoder.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chronos/tokenizer.h"
#include "tokenizer/bpe.h"
#include "tokenizer/components.h"

namespace chronos::tokenizer_detail {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

// One piece of input after added-token extraction: either plain text or an added token's id.
struct Segment {
  size_t begin = 0, end = 0;  // byte range in the searched text
  int32_t added_id = -1;      // -1 for plain text
};

// Leftmost-longest matching of a set of added tokens, honouring single_word/lstrip/rstrip.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<const AddedToken*> tokens);
  std::vector<Segment> split(std::string_view text) const;
  bool empty() const { return tokens_.empty(); }

 private:
  std::vector<const AddedToken*> tokens_;
  std::array<std::vector<const AddedToken*>, 256> by_first_byte_;  // longest first
};

struct TokenizerImpl {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  PostProcessor post_processor;
  std::unique_ptr<Decoder> decoder;
  bool decoder_has_byte_fallback = false;  // the stream decoder must hold <0xXX> runs
  std::vector<EndStrip> end_strips;        // ... and the characters the end may strip

  std::vector<AddedToken> added_tokens;
  AddedTokenMatcher raw_matcher;         // normalized: false, matched on the raw input
  AddedTokenMatcher normalized_matcher;  // normalized: true, matched after normalization
  TokenMap added_by_content;
  std::vector<int32_t> added_index_by_id;  // index into added_tokens, -1 when not added
  int32_t vocab_size = 0;

  std::optional<int32_t> bos_id;
  std::vector<int32_t> eos_ids;
  std::string bos_token, eos_token;
  // The named special tokens transformers passes to a chat template as variables: those of
  // bos_token, eos_token, unk_token, sep_token, pad_token, cls_token and mask_token the config sets.
  std::vector<std::pair<std::string, std::string>> special_tokens;
  std::string chat_template;      // the default template
  std::string tool_use_template;  // a template named "tool_use", preferred when tools are given

  const AddedToken* added(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= added_index_by_id.size()) return nullptr;
    const int32_t index = added_index_by_id[static_cast<size_t>(id)];
    return index < 0 ? nullptr : &added_tokens[static_cast<size_t>(index)];
  }
  // The token's text, or nullptr for an id that is neither added nor in the model vocab.
  const std::string* token_text(int32_t id) const;

  // ids -> token strings (skipping special added tokens if asked) -> decoder chain.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens, const DecodeContext& context) const;
};

}  // namespace chronos::tokenizer_detail
