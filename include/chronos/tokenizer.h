// Tokenizer: Hugging Face tokenizer.json (byte-level and SentencePiece-style BPE), chat templates,
// and the incremental detokenizer used for streaming output.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chronos/jinja.h"

namespace chronos {

struct ChatMessage {
  std::string role;
  std::string content;
};

// A conversation as transformers' apply_chat_template takes it. The JSON keeps its key order:
// a template's tojson prints tools and arguments in the order they were given.
struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // OpenAI-style message objects
  nlohmann::ordered_json tools;                                       // null, or a list of tool definitions
  nlohmann::ordered_json documents;                                   // null, or a list of documents
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();   // enable_thinking, reasoning_effort, ...
  bool add_generation_prompt = true;
};

namespace tokenizer_detail {
struct TokenizerImpl;
}

class GgufFile;
struct TokenizerFiles {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
};
// The tokenizer.json / tokenizer_config.json equivalent to a GGUF file's tokenizer.* key-values
// (Tokenizer::from_json loads them; chronos pack writes them into a pack folder). Models "gpt2"
// (byte-level BPE; tokenizer.ggml.pre qwen2, olmo, gpt-2, llama-bpe or default) and "llama"
// (SentencePiece BPE, merges derived from the scores as transformers' converter derives them).
// Throws chronos::Error naming the file and the key for anything missing, unsupported or out of range.
TokenizerFiles tokenizer_files_from_gguf(const GgufFile& file);

// Immutable after load and safe to share between threads (the BPE word cache is locked).
// Copies are cheap: they share the loaded tables.
class Tokenizer {
 public:
  // Reads <dir>/tokenizer.json and, when present, tokenizer_config.json (bos/eos tokens,
  // add_bos_token, chat_template) and chat_template.jinja. Throws chronos::Error naming the file.
  static Tokenizer load(const std::filesystem::path& model_dir);

  // Builds a tokenizer from the text of a tokenizer.json and (optionally) of a
  // tokenizer_config.json; `source` names them in error messages.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json = {},
                             std::string_view source = "tokenizer.json");

  // The tokenizer of a GGUF file's tokenizer.* key-values (see tokenizer_files_from_gguf).
  static Tokenizer from_gguf(const GgufFile& file);

  // Throws chronos::Error("prompt is not valid UTF-8 (byte offset N)") on invalid UTF-8.
  // add_special_tokens applies tokenizer.json's post_processor (e.g. Mistral's BOS), as HF does;
  // add_bos_token/add_eos_token in tokenizer_config.json do not change it (transformers 5 keeps
  // the tokenizer.json post-processor too).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;

  // Ids that are neither in the model vocab nor added tokens are skipped, as HF does.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  int32_t vocab_size() const;  // max id + 1 over model vocab and added tokens
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string_view id_to_token(int32_t id) const;  // throws Error on out-of-range
  bool is_special(int32_t id) const;
  std::optional<int32_t> bos_id() const;
  std::vector<int32_t> eos_ids() const;  // from tokenizer_config eos_token (may be empty)

  bool has_chat_template() const;
  // Renders the conversation with the model's own chat template (its "tool_use" template when
  // tools are given and it has one), or with `template_override` when that is not empty, exactly
  // as transformers' apply_chat_template(..., tokenize=False) renders it (see
  // render_chat_template). A missing template, an error in the template or a conversation the
  // template rejects (raise_exception) throws Error naming the template line.
  //
  // The result already holds BOS where the template puts it: encode it with
  // add_special_tokens=false, or the BOS is doubled.
  std::string apply_chat_template(const ChatRequest& request, std::string_view template_override = {},
                                  const jinja::RenderOptions& options = {}) const;
  // The same for plain {role, content} messages.
  std::string apply_chat_template(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

  // The default template's text (empty when there is none).
  const std::string& chat_template() const;
  // The named special tokens a chat template sees as variables ("bos_token" -> "<s>", ...).
  const std::vector<std::pair<std::string, std::string>>& special_tokens() const;

 private:
  friend class TokenStreamDecoder;
  explicit Tokenizer(std::shared_ptr<tokenizer_detail::TokenizerImpl> impl);
  std::shared_ptr<tokenizer_detail::TokenizerImpl> impl_;
};

// Renders `request` with the Jinja template `template_text` as transformers 5 does: the template
// sees `messages` (each with its null-valued keys dropped, and its reasoning, from
// reasoning_content, thinking or reasoning, under both "thinking" and "reasoning_content"),
// `tools` and `documents` (none when not given), `add_generation_prompt`, the special tokens and
// the kwargs. Throws Error for a missing template, malformed request fields, or an error in the
// template (naming its line).
std::string render_chat_template(std::string_view template_text, const ChatRequest& request,
                                 std::span<const std::pair<std::string, std::string>> special_tokens,
                                 const jinja::RenderOptions& options = {});

// Incremental detokenizer for streaming: push ids one by one, get back only complete UTF-8
// text (never half a character). The concatenation of all push() outputs and finish() equals
// Tokenizer::decode of all ids. Text is held back while it could still change: a trailing
// incomplete UTF-8 sequence, and a run of byte-fallback tokens (<0xXX>) until a non-byte token
// ends it (HF turns a whole run into U+FFFD when any part is invalid). finish() flushes the rest,
// invalid bytes becoming U+FFFD as HF does.
class TokenStreamDecoder {
 public:
  TokenStreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens);
  std::string push(int32_t id);
  std::string finish();

 private:
  std::shared_ptr<const tokenizer_detail::TokenizerImpl> impl_;
  bool skip_special_tokens_;
  std::vector<int32_t> window_;  // ids since the last point where all text was final
  size_t emitted_ = 0;           // bytes of the window's text already returned
  bool at_start_ = true;         // no decoded token has gone out yet
};

}  // namespace chronos
