// The tokenizer.json / tokenizer_config.json equivalent to a GGUF file's tokenizer.* key-values:
// byte-level BPE ("gpt2", with a pre-tokenizer chosen by tokenizer.ggml.pre) and SentencePiece BPE
// ("llama", in the form transformers' converter gives it: byte fallback, merges from the scores).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "chronos/error.h"
#include "chronos/gguf.h"
#include "chronos/tokenizer.h"
#include "tokenizer/components.h"
#include "tokenizer/utf8.h"

namespace chronos {
namespace {

using nlohmann::json;

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// The tokenizer.* key-values of one file, read and checked.
struct GgufVocab {
  std::string source;  // the file's path, for error messages
  std::string model;   // "gpt2" or "llama"
  std::string pre;     // tokenizer.ggml.pre ("" when absent)
  std::vector<std::string> tokens;
  std::vector<float> scores;   // empty when absent
  std::vector<int32_t> types;  // one per token (kNormal when the key is absent)
  std::vector<std::string> merges;
  std::optional<int32_t> bos_id, eos_id, unk_id, pad_id;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  std::string chat_template;
  std::string tool_use_template;  // tokenizer.chat_template.tool_use, as llama.cpp's converter names it
};

bool is_llama3_pre(std::string_view pre) { return pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3"; }
// GLM-4.5 to GLM-5: the llama3 regex, merges ignored for whole-word tokens, no BOS.
bool is_glm4_pre(std::string_view pre) { return pre == "glm4" || pre == "glm5"; }

std::optional<int32_t> read_token_id(const GgufFile& file, const std::string& key, size_t n_tokens) {
  const auto value = file.get_int(key);
  if (!value) return std::nullopt;
  if (*value < 0 || static_cast<uint64_t>(*value) >= n_tokens) {
    throw_error("{}: {} {} is outside the vocabulary ({} tokens)", file.path().string(), key, *value, n_tokens);
  }
  return static_cast<int32_t>(*value);
}

GgufVocab read_vocab(const GgufFile& file) {
  GgufVocab v;
  v.source = file.path().string();
  const auto model = file.get_string("tokenizer.ggml.model");
  if (!model) throw_error("{}: no tokenizer.ggml.model (the file carries no tokenizer)", v.source);
  v.model = *model;
  if (v.model != "gpt2" && v.model != "llama") {
    throw_error("{}: tokenizer.ggml.model '{}' is not supported (gpt2 and llama are)", v.source, v.model);
  }
  v.pre = file.get_string("tokenizer.ggml.pre").value_or("");

  v.tokens = file.get_string_array("tokenizer.ggml.tokens");
  if (v.tokens.empty()) throw_error("{}: tokenizer.ggml.tokens is missing or empty", v.source);
  if (v.tokens.size() > static_cast<size_t>(tokenizer_detail::kMaxTokenId) + 1) {
    throw_error("{}: tokenizer.ggml.tokens has {} tokens (at most {})", v.source, v.tokens.size(),
                tokenizer_detail::kMaxTokenId + 1);
  }
  const size_t n = v.tokens.size();
  for (size_t i = 0; i < n; ++i) {
    if (v.tokens[i].empty() || tokenizer_detail::find_invalid_utf8(v.tokens[i])) {
      throw_error("{}: tokenizer.ggml.tokens[{}] is {}", v.source, i,
                  v.tokens[i].empty() ? "empty" : "not valid UTF-8");
    }
  }
  v.scores = file.get_f32_array("tokenizer.ggml.scores");
  if (!v.scores.empty() && v.scores.size() != n) {
    throw_error("{}: tokenizer.ggml.scores has {} values for {} tokens", v.source, v.scores.size(), n);
  }
  v.types = file.get_i32_array("tokenizer.ggml.token_type");
  if (v.types.empty()) v.types.assign(n, kNormal);
  if (v.types.size() != n) {
    throw_error("{}: tokenizer.ggml.token_type has {} values for {} tokens", v.source, v.types.size(), n);
  }
  for (size_t i = 0; i < n; ++i) {
    if (v.types[i] < kNormal || v.types[i] > kByte) {
      throw_error("{}: tokenizer.ggml.token_type[{}] is {} (1 normal .. 6 byte)", v.source, i, v.types[i]);
    }
  }
  v.merges = file.get_string_array("tokenizer.ggml.merges");
  if (v.model == "gpt2" && v.merges.empty()) {
    throw_error("{}: tokenizer.ggml.merges is missing (a gpt2 tokenizer needs its merges)", v.source);
  }

  // llama.cpp's defaults for a SentencePiece vocabulary: <unk> 0, <s> 1, </s> 2, BOS added, and a
  // space in front of the text.
  const bool spm = v.model == "llama";
  v.bos_id = read_token_id(file, "tokenizer.ggml.bos_token_id", n);
  v.eos_id = read_token_id(file, "tokenizer.ggml.eos_token_id", n);
  v.unk_id = read_token_id(file, "tokenizer.ggml.unknown_token_id", n);
  v.pad_id = read_token_id(file, "tokenizer.ggml.padding_token_id", n);
  if (spm) {
    const auto default_id = [&](std::optional<int32_t>& id, int32_t value, std::string_view key) {
      if (id) return;
      if (static_cast<size_t>(value) >= n) {
        throw_error("{}: no {} and the default id {} is outside the vocabulary ({} tokens)", v.source, key, value, n);
      }
      id = value;
    };
    default_id(v.unk_id, 0, "tokenizer.ggml.unknown_token_id");
    default_id(v.bos_id, 1, "tokenizer.ggml.bos_token_id");
    default_id(v.eos_id, 2, "tokenizer.ggml.eos_token_id");
  }
  v.add_bos = file.get_bool("tokenizer.ggml.add_bos_token").value_or(spm || is_llama3_pre(v.pre));
  v.add_eos = file.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  v.add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix").value_or(spm);
  v.chat_template = file.get_string("tokenizer.chat_template").value_or("");
  v.tool_use_template = file.get_string("tokenizer.chat_template.tool_use").value_or("");
  for (const auto& [text, key] : {std::pair{&v.chat_template, "tokenizer.chat_template"},
                                  std::pair{&v.tool_use_template, "tokenizer.chat_template.tool_use"}}) {
    if (const auto bad = tokenizer_detail::find_invalid_utf8(*text)) {
      throw_error("{}: {} is not valid UTF-8 (byte offset {})", v.source, key, *bad);
    }
  }
  return v;
}

// Token text -> id over the tokens that take part in the model (duplicates are an error).
std::unordered_map<std::string_view, int32_t> index_tokens(const GgufVocab& v, bool skip_unused) {
  std::unordered_map<std::string_view, int32_t> index;
  index.reserve(v.tokens.size());
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (skip_unused && v.types[i] == kUnused) continue;
    if (!index.emplace(v.tokens[i], static_cast<int32_t>(i)).second) {
      throw_error("{}: tokenizer.ggml.tokens[{}] '{}' repeats token {}", v.source, i, v.tokens[i],
                  index.at(v.tokens[i]));
    }
  }
  return index;
}

// Control and unknown tokens become special added tokens, user-defined ones plain added tokens:
// matched in the raw text before the model sees it, as llama.cpp does.
json added_tokens_json(const GgufVocab& v) {
  json added = json::array();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const int32_t type = v.types[i];
    if (type != kControl && type != kUnknown && type != kUserDefined) continue;
    added.push_back({{"id", i},
                     {"content", v.tokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", type != kUserDefined}});
  }
  return added;
}

// BOS/EOS around the text when add_bos_token/add_eos_token say so.
json post_processor_json(const GgufVocab& v) {
  if (!v.add_bos && !v.add_eos) return nullptr;
  json single = json::array();
  json specials = json::object();
  const auto special = [&](const std::optional<int32_t>& id, std::string_view flag, std::string_view id_key) {
    if (!id) throw_error("{}: tokenizer.ggml.{} is true but there is no tokenizer.ggml.{}", v.source, flag, id_key);
    const auto& text = v.tokens[static_cast<size_t>(*id)];
    single.push_back({{"SpecialToken", {{"id", text}, {"type_id", 0}}}});
    specials[text] = {{"id", text}, {"ids", {*id}}, {"tokens", {text}}};
  };
  if (v.add_bos) special(v.bos_id, "add_bos_token", "bos_token_id");
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (v.add_eos) special(v.eos_id, "add_eos_token", "eos_token_id");
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", single}, {"special_tokens", specials}};
}

// The pre-tokenizer regexes of llama.cpp's pre-tokenizer names (llama-vocab.cpp), written as the
// Hugging Face tokenizer.json of the same family writes them.
constexpr const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// deepseek-v3 (DeepSeek-V3/R1/V3.1, as their tokenizer.json has it): digit runs of at most three, runs of
// CJK ideographs and kana, then words with a leading punctuation mark, punctuation, newlines, spaces.
constexpr const char* kDeepseekV3Regexes[] = {
    R"(\p{N}{1,3})",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
// gpt-4o (GPT-4o, gpt-oss) and minimax-m2: o200k's regex, which splits words at case changes and keeps
// a contraction on its word.
constexpr const char* kO200kRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// kimi-k2 (Kimi-K2, K2.5): tokenization_kimi.py's pattern, its Han-less letter classes (class
// intersection there) written with a negative lookahead; Han runs split first.
constexpr const char* kKimiK2Regex =
    R"([\p{Han}]+|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

json split(const char* regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}

json byte_level(bool add_prefix_space, bool use_regex) {
  return {
      {"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

// Fills the normalizer and pre-tokenizer of a gpt2 vocabulary from tokenizer.ggml.pre.
void byte_level_pipeline(const GgufVocab& v, json& root) {
  const std::string pre = v.pre.empty() ? "default" : v.pre;
  json splits = json::array();
  bool gpt2_regex = false, nfc = false;
  if (pre == "qwen2") {
    splits.push_back(split(kQwen2Regex));
    nfc = true;  // Qwen2's tokenizer.json normalizes to NFC
  } else if (pre == "deepseek-v3") {
    for (const char* regex : kDeepseekV3Regexes) splits.push_back(split(regex));
  } else if (is_llama3_pre(pre) || is_glm4_pre(pre) || pre == "chatglm-bpe") {
    splits.push_back(split(kLlama3Regex));  // llama.cpp's regex for GLM-4's names too
  } else if (pre == "gpt-4o" || pre == "minimax-m2") {
    splits.push_back(split(kO200kRegex));
  } else if (pre == "kimi-k2") {
    splits.push_back(split(kKimiK2Regex));
  } else if (pre == "olmo") {
    gpt2_regex = nfc = true;  // GPT-NeoX's tokenizer.json, which OLMo and OLMoE use: NFC, GPT-2 regex
  } else if (pre == "gpt-2") {
    gpt2_regex = true;
  } else if (pre == "default") {
    // llama.cpp's fallback: four regexes, each splitting the pieces of the one before.
    for (const char* regex : {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2Regex, R"(\p{N}+)", "[0-9][0-9][0-9]"}) {
      splits.push_back(split(regex));
    }
  } else {
    throw_error(
        "{}: tokenizer.ggml.pre '{}' is not supported (qwen2, deepseek-v3, kimi-k2, gpt-4o, minimax-m2, glm4, "
        "glm5, chatglm-bpe, olmo, gpt-2, llama-bpe, default are)",
        v.source, pre);
  }
  if (v.add_space_prefix && !gpt2_regex) {
    throw_error(
        "{}: tokenizer.ggml.add_space_prefix is only supported with the GPT-2 regex pre-tokenizers "
        "(olmo, gpt-2), not with '{}'",
        v.source, pre);
  }
  root["normalizer"] = nfc ? json{{"type", "NFC"}} : json(nullptr);
  if (gpt2_regex) {
    root["pre_tokenizer"] = byte_level(v.add_space_prefix, true);
  } else {
    splits.push_back(byte_level(false, false));
    root["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", splits}};
  }
  root["decoder"] = byte_level(true, true);
}

json byte_level_model(const GgufVocab& v) {
  // Unused tokens (the converter's padding rows) are left out as gaps, so that decode skips them as
  // Hugging Face skips ids it does not know. Control and user-defined tokens are stored as their
  // text, not byte-level encoded; they are in the vocabulary as tokenizer.json has them, but the
  // added-token pass reaches them first.
  json vocab = json::object();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.types[i] != kUnused) vocab[v.tokens[i]] = i;
  }
  json merges = json::array();
  for (size_t i = 0; i < v.merges.size(); ++i) {
    const auto& merge = v.merges[i];
    const auto space = merge.find(' ', 1);  // as llama.cpp splits them
    if (space == std::string::npos || space + 1 == merge.size()) {
      throw_error("{}: tokenizer.ggml.merges[{}] '{}' is not two tokens separated by a space", v.source, i, merge);
    }
    std::string left = merge.substr(0, space), right = merge.substr(space + 1);
    for (const std::string& token : {left, right, left + right}) {
      if (!vocab.contains(token)) {
        throw_error("{}: tokenizer.ggml.merges[{}] '{}': '{}' is not a token", v.source, i, merge, token);
      }
    }
    merges.push_back({std::move(left), std::move(right)});
  }
  return {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"ignore_merges", is_llama3_pre(v.pre) || is_glm4_pre(v.pre)},
          {"vocab", std::move(vocab)},
          {"merges", std::move(merges)}};
}

// The merges transformers' SentencePiece converter derives from a vocabulary with scores: every
// split of a token into two tokens, by split position within the token, then all of them ordered by
// the token's score, highest first (a stable sort, so equal scores keep the vocabulary order).
json sentencepiece_merges(const GgufVocab& v, const std::unordered_map<std::string_view, int32_t>& index) {
  struct Merge {
    uint32_t left_len;
    int32_t token;
    float score;
  };
  std::vector<Merge> merges;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const std::string_view token = v.tokens[i];
    const float score = v.scores.empty() ? 0.0f : v.scores[i];
    for (size_t pos = tokenizer_detail::utf8_char_length(token, 0); pos < token.size();
         pos += tokenizer_detail::utf8_char_length(token, pos)) {
      if (index.contains(token.substr(0, pos)) && index.contains(token.substr(pos))) {
        merges.push_back({static_cast<uint32_t>(pos), static_cast<int32_t>(i), score});
      }
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) { return a.score > b.score; });
  json out = json::array();
  for (const auto& merge : merges) {
    const std::string_view token = v.tokens[static_cast<size_t>(merge.token)];
    out.push_back({token.substr(0, merge.left_len), token.substr(merge.left_len)});
  }
  return out;
}

// transformers' form of a SentencePiece BPE vocabulary (the Mixtral tokenizer.json): "▁" for
// spaces, one in front of the text (add_space_prefix), byte fallback, unknown runs fused.
void sentencepiece_pipeline(const GgufVocab& v, json& root) {
  const auto index = index_tokens(v, false);
  json vocab = json::object();
  for (size_t i = 0; i < v.tokens.size(); ++i) vocab[v.tokens[i]] = i;
  root["model"] = {{"type", "BPE"},
                   {"dropout", nullptr},
                   {"unk_token", v.tokens[static_cast<size_t>(*v.unk_id)]},
                   {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr},
                   {"fuse_unk", true},
                   {"byte_fallback", true},
                   {"ignore_merges", false},
                   {"vocab", std::move(vocab)},
                   {"merges", sentencepiece_merges(v, index)}};
  const std::string space = "\u2581";
  json normalizers = json::array();
  if (v.add_space_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", space}});
  normalizers.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}});
  root["normalizer"] = {{"type", "Sequence"}, {"normalizers", normalizers}};
  root["pre_tokenizer"] = nullptr;
  json decoders = json::array({{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
                               {{"type", "ByteFallback"}},
                               {{"type", "Fuse"}}});
  if (v.add_space_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  root["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
}

}  // namespace

TokenizerFiles tokenizer_files_from_gguf(const GgufFile& file) {
  const GgufVocab v = read_vocab(file);
  json root = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}};
  root["added_tokens"] = added_tokens_json(v);
  if (v.model == "gpt2") {
    index_tokens(v, true);  // duplicate check
    byte_level_pipeline(v, root);
    root["model"] = byte_level_model(v);
  } else {
    sentencepiece_pipeline(v, root);
  }
  root["post_processor"] = post_processor_json(v);

  json config = {{"add_bos_token", v.add_bos}, {"add_eos_token", v.add_eos}, {"clean_up_tokenization_spaces", false}};
  const auto token_or_null = [&](const std::optional<int32_t>& id) {
    return id ? json(v.tokens[static_cast<size_t>(*id)]) : json(nullptr);
  };
  config["bos_token"] = token_or_null(v.bos_id);
  config["eos_token"] = token_or_null(v.eos_id);
  config["unk_token"] = token_or_null(v.unk_id);
  config["pad_token"] = token_or_null(v.pad_id);
  if (!v.tool_use_template.empty()) {
    config["chat_template"] = json::array({{{"name", "default"}, {"template", v.chat_template}},
                                           {{"name", "tool_use"}, {"template", v.tool_use_template}}});
  } else if (!v.chat_template.empty()) {
    config["chat_template"] = v.chat_template;
  }
  return {root.dump(), config.dump()};
}

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
  const auto files = tokenizer_files_from_gguf(file);
  return from_json(files.tokenizer_json, files.tokenizer_config_json, file.path().string());
}

}  // namespace chronos
