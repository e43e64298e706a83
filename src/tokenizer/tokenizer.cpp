// Tokenizer: loading tokenizer.json / tokenizer_config.json, encode and decode.
#include "chronos/tokenizer.h"

#include <fstream>
#include <sstream>

#include "chronos/error.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace chronos {
namespace tokenizer_detail {
namespace {

using nlohmann::json;

std::optional<std::string> read_file_if_exists(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error("{}: cannot open", path.string());
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// bos_token/eos_token are a string or an AddedToken object {"content": ...}.
std::string token_string(const json& config, const char* key) {
  if (!config.contains(key)) return {};
  const auto& node = config.at(key);
  if (node.is_string()) return node.get<std::string>();
  if (node.is_object() && node.contains("content")) return node.at("content").get<std::string>();
  return {};
}

// chat_template is a string or a list of {"name", "template"}: the one named `name` ("default"
// is also the plain string).
std::string chat_template_of(const json& config, std::string_view name) {
  if (!config.contains("chat_template")) return {};
  const auto& node = config.at("chat_template");
  if (node.is_string()) return name == "default" ? node.get<std::string>() : std::string();
  if (!node.is_array()) throw_error("chat_template is neither a string nor a list of named templates");
  for (const auto& item : node) {
    if (!item.is_object() || !item.contains("name") || !item.contains("template") || !item.at("name").is_string() ||
        !item.at("template").is_string()) {
      throw_error("chat_template: each named template needs a string \"name\" and a string \"template\"");
    }
    if (item.at("name").get<std::string>() == name) return item.at("template").get<std::string>();
  }
  return {};
}

void load_added_tokens(const json& root, TokenizerImpl& impl) {
  if (!root.contains("added_tokens")) return;
  for (const auto& node : root.at("added_tokens")) {
    AddedToken token;
    token.content = node.at("content").get<std::string>();
    token.id = parse_token_id(node.at("id"), fmt::format("added token '{}' id", token.content));
    token.single_word = node.value("single_word", false);
    token.lstrip = node.value("lstrip", false);
    token.rstrip = node.value("rstrip", false);
    token.normalized = node.value("normalized", false);
    token.special = node.value("special", false);
    impl.added_tokens.push_back(std::move(token));
  }
  std::vector<const AddedToken*> raw, normalized;
  int32_t max_id = -1;
  for (const auto& token : impl.added_tokens) {
    (token.normalized ? normalized : raw).push_back(&token);
    impl.added_by_content[token.content] = token.id;
    max_id = std::max(max_id, token.id);
  }
  impl.added_index_by_id.assign(static_cast<size_t>(max_id + 1), -1);
  for (size_t i = 0; i < impl.added_tokens.size(); ++i) {
    impl.added_index_by_id[static_cast<size_t>(impl.added_tokens[i].id)] = static_cast<int32_t>(i);
  }
  impl.raw_matcher = AddedTokenMatcher(std::move(raw));
  impl.normalized_matcher = AddedTokenMatcher(std::move(normalized));
}

bool contains_decoder_type(const json& node, std::string_view type) {
  if (!node.is_object()) return false;
  if (node.value("type", "") == type) return true;
  if (node.contains("decoders")) {
    for (const auto& item : node.at("decoders")) {
      if (contains_decoder_type(item, type)) return true;
    }
  }
  return false;
}

void load_pipeline(const json& root, TokenizerImpl& impl) {
  if (!root.is_object()) throw_error("not a JSON object");
  if (root.contains("version") && root.at("version") != "1.0") {
    throw_error("unsupported version {}", root.at("version").dump());
  }
  if (!root.contains("model")) throw_error("no \"model\"");
  const auto& model = root.at("model");
  const auto model_type = model.value("type", std::string("BPE"));
  if (model_type != "BPE") throw_error("unsupported model type '{}'", model_type);
  impl.model = std::make_unique<BpeModel>(model);
  load_added_tokens(root, impl);
  impl.normalizer = parse_normalizer(root.value("normalizer", json()));
  impl.pre_tokenizer = parse_pre_tokenizer(root.value("pre_tokenizer", json()));
  impl.post_processor = parse_post_processor(root.value("post_processor", json()));
  impl.decoder = parse_decoder(root.value("decoder", json()));
  impl.decoder_has_byte_fallback = contains_decoder_type(root.value("decoder", json()), "ByteFallback");
  if (impl.decoder) {
    bool fused = false;
    impl.decoder->end_strips(fused, impl.end_strips);
  }
  impl.vocab_size = std::max(static_cast<int32_t>(impl.model->id_to_token().size()),
                             static_cast<int32_t>(impl.added_index_by_id.size()));
}

void load_config(const json& config, TokenizerImpl& impl) {
  if (!config.is_object()) throw_error("not a JSON object");
  impl.bos_token = token_string(config, "bos_token");
  impl.eos_token = token_string(config, "eos_token");
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (std::string token = token_string(config, key); !token.empty()) impl.special_tokens.emplace_back(key, token);
  }
  impl.chat_template = chat_template_of(config, "default");
  impl.tool_use_template = chat_template_of(config, "tool_use");
}

std::optional<int32_t> lookup(const TokenizerImpl& impl, std::string_view token) {
  if (const auto it = impl.added_by_content.find(token); it != impl.added_by_content.end()) return it->second;
  const auto& vocab = impl.model->vocab();
  if (const auto it = vocab.find(token); it != vocab.end()) return it->second;
  return std::nullopt;
}

void resolve_special_ids(TokenizerImpl& impl) {
  if (!impl.bos_token.empty()) impl.bos_id = lookup(impl, impl.bos_token);
  if (!impl.eos_token.empty()) {
    if (const auto id = lookup(impl, impl.eos_token)) impl.eos_ids.push_back(*id);
  }
}

json parse_json(std::string_view text, std::string_view source) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw_error("{}: invalid JSON: {}", source, e.what());
  }
}

}  // namespace

int32_t parse_token_id(const json& value, std::string_view what) {
  // Non-negative integers parse as unsigned; negative ones and floats never are.
  if (!value.is_number_unsigned() || value.get<uint64_t>() > uint64_t{kMaxTokenId}) {
    throw_error("{} {} is not a token id (an integer in [0, {}])", what, value.dump(), kMaxTokenId);
  }
  return static_cast<int32_t>(value.get<uint64_t>());
}

size_t parse_count(const json& value, std::string_view what) {
  static_assert(sizeof(size_t) == sizeof(uint64_t), "every unsigned JSON number fits a size_t");
  if (!value.is_number_unsigned()) {
    throw_error("{} {} is not a non-negative integer", what, value.dump());
  }
  return static_cast<size_t>(value.get<uint64_t>());
}

const std::string* TokenizerImpl::token_text(int32_t id) const {
  if (const auto* token = added(id)) return &token->content;
  const auto& vocab = model->id_to_token();
  if (id < 0 || static_cast<size_t>(id) >= vocab.size() || vocab[static_cast<size_t>(id)].empty()) {
    return nullptr;
  }
  return &vocab[static_cast<size_t>(id)];
}

std::string TokenizerImpl::decode(std::span<const int32_t> ids, bool skip_special_tokens,
                                  const DecodeContext& context) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    const auto* token = added(id);
    if (skip_special_tokens && token != nullptr && token->special) continue;
    if (const auto* text = token_text(id)) tokens.push_back(*text);
  }
  std::string out;
  if (decoder) {
    bool fused = false;
    decoder->decode_chain(tokens, context, fused);
    for (const auto& t : tokens) out += t;
  } else {
    // HF joins the tokens with spaces when there is no decoder.
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0 || !context.at_start) out += ' ';
      out += tokens[i];
    }
  }
  return out;
}

}  // namespace tokenizer_detail

using tokenizer_detail::TokenizerImpl;

Tokenizer::Tokenizer(std::shared_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}

namespace tokenizer_detail {
namespace {

std::shared_ptr<TokenizerImpl> build(std::string_view tokenizer_json, const std::string& source,
                                     std::string_view config_json, const std::string& config_source) {
  auto impl = std::make_shared<TokenizerImpl>();
  const auto root = parse_json(tokenizer_json, source);
  try {
    load_pipeline(root, *impl);
  } catch (const nlohmann::json::exception& e) {
    throw_error("{}: malformed: {}", source, e.what());
  } catch (const Error& e) {
    throw_error("{}: {}", source, e.what());
  }
  if (!config_json.empty()) {
    const auto config = parse_json(config_json, config_source);
    try {
      load_config(config, *impl);
    } catch (const std::exception& e) {
      throw_error("{}: malformed: {}", config_source, e.what());
    }
  }
  return impl;
}

}  // namespace
}  // namespace tokenizer_detail

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                               std::string_view source) {
  auto impl =
      tokenizer_detail::build(tokenizer_json, std::string(source), tokenizer_config_json, "tokenizer_config.json");
  tokenizer_detail::resolve_special_ids(*impl);
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::load(const std::filesystem::path& model_dir) {
  const auto tokenizer_path = model_dir / "tokenizer.json";
  const auto config_path = model_dir / "tokenizer_config.json";
  const auto tokenizer_json = tokenizer_detail::read_file_if_exists(tokenizer_path);
  if (!tokenizer_json) throw_error("{}: no such file", tokenizer_path.string());
  const auto config_json = tokenizer_detail::read_file_if_exists(config_path);
  auto impl =
      tokenizer_detail::build(*tokenizer_json, tokenizer_path.string(), config_json.value_or(""), config_path.string());
  // Newer checkpoints keep the template in its own file, which then wins; transformers 5 writes
  // the other named templates to additional_chat_templates/NAME.jinja.
  if (const auto jinja = tokenizer_detail::read_file_if_exists(model_dir / "chat_template.jinja")) {
    impl->chat_template = *jinja;
  }
  if (const auto jinja =
          tokenizer_detail::read_file_if_exists(model_dir / "additional_chat_templates" / "tool_use.jinja")) {
    impl->tool_use_template = *jinja;
  }
  for (const std::string* text : {&impl->chat_template, &impl->tool_use_template}) {
    if (const auto bad = tokenizer_detail::find_invalid_utf8(*text)) {
      throw_error("{}: the chat template is not valid UTF-8 (byte offset {})", model_dir.string(), *bad);
    }
  }
  tokenizer_detail::resolve_special_ids(*impl);
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (const auto bad = tokenizer_detail::find_invalid_utf8(text)) {
    throw_error("prompt is not valid UTF-8 (byte offset {})", *bad);
  }
  const auto& impl = *impl_;
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = impl.post_processor.prefix_ids;

  auto encode_normalized = [&](std::string_view normalized, bool segment_at_start) {
    const auto segments = impl.normalized_matcher.empty()
                              ? std::vector<tokenizer_detail::Segment>{{0, normalized.size(), -1}}
                              : impl.normalized_matcher.split(normalized);
    for (const auto& segment : segments) {
      if (segment.added_id >= 0) {
        ids.push_back(segment.added_id);
        continue;
      }
      std::vector<tokenizer_detail::Piece> pieces;
      pieces.push_back({std::string(normalized.substr(segment.begin, segment.end - segment.begin)),
                        segment_at_start && segment.begin == 0});
      if (impl.pre_tokenizer) impl.pre_tokenizer->pre_tokenize(pieces);
      for (const auto& piece : pieces) impl.model->tokenize(piece.text, ids);
    }
  };

  const auto segments = impl.raw_matcher.empty() ? std::vector<tokenizer_detail::Segment>{{0, text.size(), -1}}
                                                 : impl.raw_matcher.split(text);
  for (const auto& segment : segments) {
    if (segment.added_id >= 0) {
      ids.push_back(segment.added_id);
      continue;
    }
    std::string piece(text.substr(segment.begin, segment.end - segment.begin));
    if (impl.normalizer) piece = impl.normalizer->normalize(std::move(piece));
    if (!piece.empty()) encode_normalized(piece, segment.begin == 0);
  }
  if (add_special_tokens) {
    ids.insert(ids.end(), impl.post_processor.suffix_ids.begin(), impl.post_processor.suffix_ids.end());
  }
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return impl_->decode(ids, skip_special_tokens, tokenizer_detail::DecodeContext{});
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  return tokenizer_detail::lookup(*impl_, token);
}

std::string_view Tokenizer::id_to_token(int32_t id) const {
  const auto* text = impl_->token_text(id);
  if (text == nullptr) throw_error("token id {} is outside the vocabulary (size {})", id, impl_->vocab_size);
  return *text;
}

bool Tokenizer::is_special(int32_t id) const {
  const auto* token = impl_->added(id);
  return token != nullptr && token->special;
}

std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos_id; }

std::vector<int32_t> Tokenizer::eos_ids() const { return impl_->eos_ids; }

bool Tokenizer::has_chat_template() const { return !impl_->chat_template.empty(); }

const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

const std::vector<std::pair<std::string, std::string>>& Tokenizer::special_tokens() const {
  return impl_->special_tokens;
}

std::string Tokenizer::apply_chat_template(const ChatRequest& request, std::string_view template_override,
                                           const jinja::RenderOptions& options) const {
  std::string_view text = impl_->chat_template;
  if (!template_override.empty()) {
    text = template_override;
  } else if (!request.tools.is_null() && !impl_->tool_use_template.empty()) {
    text = impl_->tool_use_template;  // as transformers picks a "tool_use" template when tools are given
  }
  return render_chat_template(text, request, impl_->special_tokens, options);
}

std::string Tokenizer::apply_chat_template(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  ChatRequest request;
  for (const ChatMessage& message : messages) {
    request.messages.push_back({{"role", message.role}, {"content", message.content}});
  }
  request.add_generation_prompt = add_generation_prompt;
  return apply_chat_template(request);
}

}  // namespace chronos
