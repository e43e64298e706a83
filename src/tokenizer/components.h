// The tokenizer.json pipeline components: normalizers, pre-tokenizers, post-processors, decoders.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace chronos::tokenizer_detail {

// A piece of text on its way to the model. at_start: it begins at offset 0 of the original input
// (Metaspace's prepend_scheme "first" only prepends to such a piece).
struct Piece {
  std::string text;
  bool at_start = false;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces the pieces with their finer split.
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

// Where a decode call sits in the whole sequence: decoders that treat the first token or the
// start/end of the text specially (Metaspace, Strip after Fuse) need to know, so that a
// streaming decoder can decode a window in the middle.
struct DecodeContext {
  bool at_start = true;
  bool at_end = true;
};

// Up to `count` characters `content` that a decoder removes from the end of the whole text once
// the sequence ends (a Strip after a Fuse): until then, a streaming decoder must hold them back.
struct EndStrip {
  char32_t content = 0;
  size_t count = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // `fused` is true once an earlier decoder has joined all tokens into one string.
  virtual void decode_chain(std::vector<std::string>& tokens, const DecodeContext& context, bool& fused) const = 0;
  // Appends this decoder's EndStrip, if any; `fused` is tracked as in decode_chain.
  virtual void end_strips(bool& /*fused*/, std::vector<EndStrip>& /*out*/) const {}
};

// Tokens added around the model's ids when add_special_tokens is true.
struct PostProcessor {
  std::vector<int32_t> prefix_ids;
  std::vector<int32_t> suffix_ids;
};

// Each parser throws Error naming the component type it does not support.
std::unique_ptr<Normalizer> parse_normalizer(const nlohmann::json& node);
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const nlohmann::json& node);
std::unique_ptr<Decoder> parse_decoder(const nlohmann::json& node);
PostProcessor parse_post_processor(const nlohmann::json& node);

// True for the "<0xXX>" tokens of byte fallback; stores the byte.
bool parse_byte_token(std::string_view token, unsigned char& byte);

// The largest token id a tokenizer.json may use. Ids index dense tables, which a single id of two
// billion would size to tens of gigabytes; 2^22 is 16 times the largest vocabularies in use.
inline constexpr int32_t kMaxTokenId = (1 << 22) - 1;

// Numbers of tokenizer.json are checked before they are converted: the JSON library's get<int>()
// of 4.3e84 is undefined behaviour and of 1.5 a silent truncation. `what` names the value.
// A token id: an integer in [0, kMaxTokenId]; throws Error "<what> <value> is not a token id ...".
int32_t parse_token_id(const nlohmann::json& value, std::string_view what);
// A count (Strip's start and stop): a non-negative integer.
size_t parse_count(const nlohmann::json& value, std::string_view what);

// Metaspace's replacement ("replacement", or "str_rep" in older files, default U+2581), for the
// pre-tokenizer and the decoder alike. HF holds it in a char: anything but one character throws
// Error (an empty one never advanced the decoder).
std::string parse_metaspace_replacement(const nlohmann::json& node);

}  // namespace chronos::tokenizer_detail
