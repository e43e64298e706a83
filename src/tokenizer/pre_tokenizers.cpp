// Normalizers (NFC, Prepend, Replace, Sequence) and pre-tokenizers (Split, ByteLevel, Metaspace,
// Sequence), following the semantics of HF tokenizers' normalizer.rs / pre_tokenizers.
#include <algorithm>

#include "chronos/error.h"
#include "tokenizer/components.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace chronos::tokenizer_detail {
namespace {

using nlohmann::json;

// A Split/Replace pattern: {"String": "..."} or {"Regex": "..."}.
class Pattern {
 public:
  explicit Pattern(const json& node) {
    if (node.contains("String")) {
      literal_ = node.at("String").get<std::string>();
    } else if (node.contains("Regex")) {
      regex_ = std::make_unique<Regex>(node.at("Regex").get<std::string>());
    } else {
      throw_error("pattern {} is neither String nor Regex", node.dump());
    }
  }
  std::vector<Span> find_all(std::string_view text) const {
    return regex_ ? regex_->find_all(text) : find_all_literal(text, literal_);
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
};

std::string replace_all(std::string_view text, const std::vector<Span>& spans, std::string_view with) {
  std::string out;
  out.reserve(text.size());
  size_t prev = 0;
  for (const auto& [begin, end] : spans) {
    out.append(text.substr(prev, begin - prev));
    out.append(with);
    prev = end;
  }
  out.append(text.substr(prev));
  return out;
}

class NfcNormalizer final : public Normalizer {
 public:
  std::string normalize(std::string text) const override { return nfc(text); }
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  std::string normalize(std::string text) const override { return text.empty() ? text : prepend_ + text; }

 private:
  std::string prepend_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  explicit ReplaceNormalizer(const json& node)
      : pattern_(node.at("pattern")), content_(node.at("content").get<std::string>()) {}
  std::string normalize(std::string text) const override {
    return replace_all(text, pattern_.find_all(text), content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> items) : items_(std::move(items)) {}
  std::string normalize(std::string text) const override {
    for (const auto& item : items_) text = item->normalize(std::move(text));
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> items_;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

SplitBehavior parse_behavior(const std::string& name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  throw_error("unsupported Split behavior '{}'", name);
}

struct Range {
  size_t begin, end;
  bool is_match;
};

// Covers the whole piece with alternating unmatched/matched ranges (HF find_matches).
std::vector<Range> cover(std::string_view text, const std::vector<Span>& matches, bool invert) {
  std::vector<Range> ranges;
  if (text.empty()) return {{0, 0, invert}};
  size_t prev = 0;
  for (const auto& [begin, end] : matches) {
    if (prev != begin) ranges.push_back({prev, begin, invert});
    ranges.push_back({begin, end, !invert});
    prev = end;
  }
  if (prev != text.size()) ranges.push_back({prev, text.size(), invert});
  return ranges;
}

// Applies a split behaviour to the covering ranges; returns the kept [begin, end) ranges.
std::vector<Span> apply_behavior(std::vector<Range> ranges, SplitBehavior behavior) {
  std::vector<Range> merged;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (auto& r : ranges) merged.push_back({r.begin, r.end, false});
      break;
    case SplitBehavior::kRemoved: merged = std::move(ranges); break;
    case SplitBehavior::kContiguous:
      for (const auto& r : ranges) {
        if (r.is_match == previous_match && !merged.empty()) {
          merged.back().end = r.end;
        } else {
          merged.push_back({r.begin, r.end, false});
        }
        previous_match = r.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& r : ranges) {
        if (r.is_match && !previous_match && !merged.empty()) {
          merged.back().end = r.end;
        } else {
          merged.push_back({r.begin, r.end, false});
        }
        previous_match = r.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = ranges.rbegin(); it != ranges.rend(); ++it) {
        if (it->is_match && !previous_match && !merged.empty()) {
          merged.back().begin = it->begin;
        } else {
          merged.push_back({it->begin, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
  }
  std::vector<Span> kept;
  for (const auto& r : merged) {
    if (!r.is_match && r.end > r.begin) kept.emplace_back(r.begin, r.end);
  }
  return kept;
}

// Splits every piece at the spans `find` returns, with the given behaviour.
template <typename Find>
void split_pieces(std::vector<Piece>& pieces, SplitBehavior behavior, bool invert, Find&& find) {
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (auto& piece : pieces) {
    const auto spans = apply_behavior(cover(piece.text, find(piece.text), invert), behavior);
    for (const auto& [begin, end] : spans) {
      out.push_back({piece.text.substr(begin, end - begin), piece.at_start && begin == 0});
    }
  }
  pieces = std::move(out);
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  explicit SplitPreTokenizer(const json& node)
      : pattern_(node.at("pattern")),
        behavior_(parse_behavior(node.at("behavior").get<std::string>())),
        invert_(node.value("invert", false)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, behavior_, invert_, [&](std::string_view t) { return pattern_.find_all(t); });
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  explicit ByteLevelPreTokenizer(const json& node) : add_prefix_space_(node.value("add_prefix_space", true)) {
    if (node.value("use_regex", true)) regex_ = std::make_unique<Regex>(kGpt2Pattern);
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_) {
      for (auto& piece : pieces) {
        if (!piece.text.empty() && piece.text[0] != ' ') piece.text = " " + piece.text;
      }
    }
    if (regex_) {
      split_pieces(pieces, SplitBehavior::kIsolated, false, [&](std::string_view t) { return regex_->find_all(t); });
    }
    const auto& table = byte_level_table();
    for (auto& piece : pieces) {
      std::string mapped;
      mapped.reserve(piece.text.size() * 2);
      for (char c : piece.text) mapped += table.byte_to_utf8[static_cast<unsigned char>(c)];
      piece.text = std::move(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

PrependScheme parse_prepend_scheme(const json& node) {
  if (node.contains("prepend_scheme")) {
    const auto scheme = node.at("prepend_scheme").get<std::string>();
    if (scheme == "always") return PrependScheme::kAlways;
    if (scheme == "first") return PrependScheme::kFirst;
    if (scheme == "never") return PrependScheme::kNever;
    throw_error("unsupported Metaspace prepend_scheme '{}'", scheme);
  }
  // Files written before prepend_scheme existed carry add_prefix_space instead.
  return node.value("add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
}

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  explicit MetaspacePreTokenizer(const json& node)
      : replacement_(parse_metaspace_replacement(node)),
        scheme_(parse_prepend_scheme(node)),
        split_(node.value("split", true)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (auto& piece : pieces) {
      piece.text = replace_all(piece.text, find_all_literal(piece.text, " "), replacement_);
      const bool prepend = scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && piece.at_start);
      if (prepend && !piece.text.empty() && !piece.text.starts_with(replacement_)) {
        piece.text = replacement_ + piece.text;
      }
    }
    if (split_) {
      split_pieces(pieces, SplitBehavior::kMergedWithNext, false,
                   [&](std::string_view t) { return find_all_literal(t, replacement_); });
    }
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> items) : items_(std::move(items)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& item : items_) item->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> items_;
};

std::string type_of(const json& node, const char* kind) {
  if (!node.is_object() || !node.contains("type")) throw_error("{} without a \"type\": {}", kind, node.dump());
  return node.at("type").get<std::string>();
}

}  // namespace

std::string parse_metaspace_replacement(const json& node) {
  const char* key = node.contains("replacement") ? "replacement" : node.contains("str_rep") ? "str_rep" : nullptr;
  if (key == nullptr) return "\xE2\x96\x81";  // U+2581
  const auto replacement = node.at(key).get<std::string>();
  size_t end = 0;
  if (replacement.empty() || (next_codepoint(replacement, end), end != replacement.size())) {
    throw_error("Metaspace replacement '{}' is not one character", replacement);
  }
  return replacement;
}

std::unique_ptr<Normalizer> parse_normalizer(const json& node) {
  if (node.is_null()) return nullptr;
  const auto type = type_of(node, "normalizer");
  if (type == "NFC") return std::make_unique<NfcNormalizer>();
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(node.at("prepend").get<std::string>());
  if (type == "Replace") return std::make_unique<ReplaceNormalizer>(node);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> items;
    for (const auto& item : node.at("normalizers")) {
      if (auto n = parse_normalizer(item)) items.push_back(std::move(n));
    }
    return std::make_unique<SequenceNormalizer>(std::move(items));
  }
  throw_error("unsupported normalizer type '{}'", type);
}

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const json& node) {
  if (node.is_null()) return nullptr;
  const auto type = type_of(node, "pre_tokenizer");
  if (type == "Split") return std::make_unique<SplitPreTokenizer>(node);
  if (type == "ByteLevel") return std::make_unique<ByteLevelPreTokenizer>(node);
  if (type == "Metaspace") return std::make_unique<MetaspacePreTokenizer>(node);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> items;
    for (const auto& item : node.at("pretokenizers")) {
      if (auto p = parse_pre_tokenizer(item)) items.push_back(std::move(p));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(items));
  }
  throw_error("unsupported pre_tokenizer type '{}'", type);
}

}  // namespace chronos::tokenizer_detail
