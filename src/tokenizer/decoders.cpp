// Decoders (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence) and
// post-processors (ByteLevel, TemplateProcessing, Sequence), as HF tokenizers applies them.
#include "chronos/error.h"
#include "tokenizer/components.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace chronos::tokenizer_detail {
namespace {

using nlohmann::json;

std::string join(const std::vector<std::string>& tokens) {
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens, const DecodeContext&, bool& fused) const override {
    const auto& table = byte_level_table();
    std::string bytes;
    for (const auto& token : tokens) {
      // A token with any character outside the byte table is taken as its own UTF-8 bytes.
      std::string mapped;
      bool all_mapped = true;
      size_t pos = 0;
      while (pos < token.size()) {
        const char32_t cp = next_codepoint(token, pos);
        if (cp >= table.codepoint_to_byte.size() || table.codepoint_to_byte[cp] < 0) {
          all_mapped = false;
          break;
        }
        mapped += static_cast<char>(table.codepoint_to_byte[cp]);
      }
      bytes += all_mapped ? mapped : token;
    }
    tokens.assign(1, utf8_lossy(bytes));
    fused = true;
  }
  void end_strips(bool& fused, std::vector<EndStrip>&) const override { fused = true; }
};

class ReplaceDecoder final : public Decoder {
 public:
  explicit ReplaceDecoder(const json& node) : content_(node.at("content").get<std::string>()) {
    const auto& pattern = node.at("pattern");
    if (pattern.contains("String")) {
      literal_ = pattern.at("String").get<std::string>();
    } else if (pattern.contains("Regex")) {
      regex_ = std::make_unique<Regex>(pattern.at("Regex").get<std::string>());
    } else {
      throw_error("Replace decoder pattern {} is neither String nor Regex", pattern.dump());
    }
  }
  void decode_chain(std::vector<std::string>& tokens, const DecodeContext&, bool&) const override {
    for (auto& token : tokens) {
      const auto spans = regex_ ? regex_->find_all(token) : find_all_literal(token, literal_);
      if (spans.empty()) continue;
      std::string out;
      size_t prev = 0;
      for (const auto& [begin, end] : spans) {
        out.append(token, prev, begin - prev);
        out += content_;
        prev = end;
      }
      out.append(token, prev);
      token = std::move(out);
    }
  }

 private:
  std::string content_;
  std::string literal_;
  std::unique_ptr<Regex> regex_;
};

class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens, const DecodeContext&, bool&) const override {
    std::vector<std::string> out;
    std::string run;  // bytes of consecutive <0xXX> tokens
    size_t run_tokens = 0;
    auto flush = [&] {
      if (run_tokens == 0) return;
      if (!find_invalid_utf8(run)) {
        out.push_back(run);
      } else {
        // HF: an invalid run becomes one U+FFFD per byte token.
        std::string replacement;
        for (size_t i = 0; i < run_tokens; ++i) replacement += "\xEF\xBF\xBD";
        out.push_back(std::move(replacement));
      }
      run.clear();
      run_tokens = 0;
    };
    for (auto& token : tokens) {
      unsigned char byte = 0;
      if (parse_byte_token(token, byte)) {
        run += static_cast<char>(byte);
        ++run_tokens;
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens, const DecodeContext&, bool& fused) const override {
    tokens.assign(1, join(tokens));
    fused = true;
  }
  void end_strips(bool& fused, std::vector<EndStrip>&) const override { fused = true; }
};

class StripDecoder final : public Decoder {
 public:
  explicit StripDecoder(const json& node)
      : start_(node.contains("start") ? parse_count(node.at("start"), "Strip decoder \"start\"") : 0),
        stop_(node.contains("stop") ? parse_count(node.at("stop"), "Strip decoder \"stop\"") : 0) {
    const auto content = node.at("content").get<std::string>();
    size_t pos = 0;
    if (content.empty() || (content_ = next_codepoint(content, pos), pos != content.size())) {
      throw_error("Strip decoder content '{}' is not one character", content);
    }
  }
  void decode_chain(std::vector<std::string>& tokens, const DecodeContext& context, bool& fused) const override {
    // After a Fuse the single token is the whole text: its start (end) is only the start (end)
    // of the sequence when the context says so.
    const size_t start = fused && !context.at_start ? 0 : start_;
    const size_t stop = fused && !context.at_end ? 0 : stop_;
    for (auto& token : tokens) {
      std::vector<std::pair<size_t, char32_t>> chars;  // (byte offset, code point)
      size_t pos = 0;
      while (pos < token.size()) {
        const size_t at = pos;
        chars.emplace_back(at, next_codepoint(token, pos));
      }
      size_t start_cut = 0;
      for (size_t i = 0; i < chars.size() && i < start && chars[i].second == content_; ++i) start_cut = i + 1;
      size_t stop_cut = chars.size();
      for (size_t i = 0; i < stop && i < chars.size(); ++i) {
        const size_t index = chars.size() - i - 1;
        if (chars[index].second != content_) break;
        stop_cut = index;
      }
      if (stop_cut < start_cut) stop_cut = start_cut;
      const size_t begin = start_cut < chars.size() ? chars[start_cut].first : token.size();
      const size_t end = stop_cut < chars.size() ? chars[stop_cut].first : token.size();
      token = token.substr(begin, end - begin);
    }
  }
  void end_strips(bool& fused, std::vector<EndStrip>& out) const override {
    if (fused && stop_ > 0) out.push_back({content_, stop_});
  }

 private:
  size_t start_, stop_;
  char32_t content_ = 0;
};

class MetaspaceDecoder final : public Decoder {
 public:
  explicit MetaspaceDecoder(const json& node) : replacement_(parse_metaspace_replacement(node)) {
    if (node.contains("prepend_scheme")) {
      drop_first_ = node.at("prepend_scheme").get<std::string>() != "never";
    } else {
      drop_first_ = node.value("add_prefix_space", true);
    }
  }
  void decode_chain(std::vector<std::string>& tokens, const DecodeContext& context, bool&) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      // HF drops every replacement character of the first token, not only a leading one.
      const bool drop = i == 0 && drop_first_ && context.at_start;
      std::string out;
      size_t pos = 0;
      const auto& token = tokens[i];
      while (pos < token.size()) {
        if (token.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!drop) out += ' ';
          pos += replacement_.size();
        } else {
          out += token[pos++];
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool drop_first_ = true;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> items) : items_(std::move(items)) {}
  void decode_chain(std::vector<std::string>& tokens, const DecodeContext& context, bool& fused) const override {
    for (const auto& item : items_) item->decode_chain(tokens, context, fused);
  }
  void end_strips(bool& fused, std::vector<EndStrip>& out) const override {
    for (const auto& item : items_) item->end_strips(fused, out);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> items_;
};

void append_template(const json& node, PostProcessor& out) {
  const auto& specials = node.contains("special_tokens") ? node.at("special_tokens") : json::object();
  bool seen_sequence = false;
  for (const auto& item : node.at("single")) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
    } else if (item.contains("SpecialToken")) {
      const auto name = item.at("SpecialToken").at("id").get<std::string>();
      if (!specials.contains(name)) throw_error("TemplateProcessing: special token '{}' has no ids", name);
      auto& target = seen_sequence ? out.suffix_ids : out.prefix_ids;
      for (const auto& id : specials.at(name).at("ids")) {
        target.push_back(parse_token_id(id, fmt::format("TemplateProcessing '{}' id", name)));
      }
    } else {
      throw_error("TemplateProcessing: unknown template piece {}", item.dump());
    }
  }
}

}  // namespace

bool parse_byte_token(std::string_view token, unsigned char& byte) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return false;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(token[3]), lo = hex(token[4]);
  if (hi < 0 || lo < 0) return false;
  byte = static_cast<unsigned char>(hi * 16 + lo);
  return true;
}

std::unique_ptr<Decoder> parse_decoder(const json& node) {
  if (node.is_null()) return nullptr;
  if (!node.is_object() || !node.contains("type")) throw_error("decoder without a \"type\": {}", node.dump());
  const auto type = node.at("type").get<std::string>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(node);
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") return std::make_unique<StripDecoder>(node);
  if (type == "Metaspace") return std::make_unique<MetaspaceDecoder>(node);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> items;
    for (const auto& item : node.at("decoders")) {
      if (auto d = parse_decoder(item)) items.push_back(std::move(d));
    }
    return std::make_unique<SequenceDecoder>(std::move(items));
  }
  throw_error("unsupported decoder type '{}'", type);
}

PostProcessor parse_post_processor(const json& node) {
  PostProcessor out;
  if (node.is_null()) return out;
  if (!node.is_object() || !node.contains("type")) {
    throw_error("post_processor without a \"type\": {}", node.dump());
  }
  const auto type = node.at("type").get<std::string>();
  if (type == "ByteLevel") return out;  // offsets only
  if (type == "TemplateProcessing") {
    append_template(node, out);
    return out;
  }
  if (type == "Sequence") {
    for (const auto& item : node.at("processors")) {
      const auto part = parse_post_processor(item);
      // A later processor wraps what the earlier ones produced.
      out.prefix_ids.insert(out.prefix_ids.begin(), part.prefix_ids.begin(), part.prefix_ids.end());
      out.suffix_ids.insert(out.suffix_ids.end(), part.suffix_ids.begin(), part.suffix_ids.end());
    }
    return out;
  }
  throw_error("unsupported post_processor type '{}'", type);
}

}  // namespace chronos::tokenizer_detail
