// BPE merge loop (lowest rank first, leftmost on ties) as in HF tokenizers' models/bpe/word.rs.
#include "tokenizer/bpe.h"

#include <fmt/format.h>

#include <queue>
#include <utility>

#include "chronos/error.h"
#include "tokenizer/components.h"
#include "tokenizer/utf8.h"

namespace chronos::tokenizer_detail {
namespace {

constexpr size_t kCacheCapacity = 10000;
constexpr size_t kMaxCachedWordBytes = 256;

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

std::string optional_string(const nlohmann::json& node, const char* key) {
  if (!node.contains(key) || node.at(key).is_null()) return {};
  return node.at(key).get<std::string>();
}

struct Symbol {
  int32_t id;
  int32_t prev;  // index of the previous live symbol, -1 at the start
  int32_t next;  // index of the next live symbol, -1 at the end
  bool live;
};

struct Candidate {
  uint32_t rank;
  int32_t pos;
  int32_t new_id;
  // Lowest rank first, then leftmost: priority_queue pops the "largest".
  bool operator<(const Candidate& other) const { return rank != other.rank ? rank > other.rank : pos > other.pos; }
};

}  // namespace

BpeModel::BpeModel(const nlohmann::json& node) {
  if (node.contains("dropout") && !node.at("dropout").is_null() && node.at("dropout").get<double>() != 0.0) {
    throw_error("BPE dropout is not supported for inference");
  }
  continuing_subword_prefix_ = optional_string(node, "continuing_subword_prefix");
  end_of_word_suffix_ = optional_string(node, "end_of_word_suffix");
  fuse_unk_ = node.value("fuse_unk", false);
  byte_fallback_ = node.value("byte_fallback", false);
  ignore_merges_ = node.value("ignore_merges", false);

  int32_t max_id = -1;
  vocab_.reserve(node.at("vocab").size());
  for (const auto& [token, id_json] : node.at("vocab").items()) {
    const int32_t id = parse_token_id(id_json, fmt::format("BPE vocab id of '{}'", token));
    vocab_.emplace(token, id);
    max_id = std::max(max_id, id);
  }
  id_to_token_.resize(static_cast<size_t>(max_id + 1));
  for (const auto& [token, id] : vocab_) id_to_token_[static_cast<size_t>(id)] = token;

  const auto unk = optional_string(node, "unk_token");
  if (!unk.empty()) {
    const auto it = vocab_.find(unk);
    if (it == vocab_.end()) throw_error("BPE unk_token '{}' is not in the vocab", unk);
    unk_id_ = it->second;
  }
  byte_ids_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab_.find(fmt::format("<0x{:02X}>", b));
    if (it != vocab_.end()) byte_ids_[static_cast<size_t>(b)] = it->second;
  }

  auto lookup = [&](const std::string& token) {
    const auto it = vocab_.find(token);
    if (it == vocab_.end()) throw_error("BPE merge token '{}' is not in the vocab", token);
    return it->second;
  };
  const auto& merges = node.at("merges");
  merges_.reserve(merges.size());
  uint32_t rank = 0;
  for (const auto& merge : merges) {
    std::string left, right;
    if (merge.is_string()) {
      const auto text = merge.get<std::string>();
      const auto space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        throw_error("BPE merge '{}' is not two tokens separated by one space", text);
      }
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      throw_error("BPE merge {} is neither \"a b\" nor [\"a\", \"b\"]", merge.dump());
    }
    std::string merged = left;
    merged += std::string_view(right).substr(
        right.starts_with(continuing_subword_prefix_) ? continuing_subword_prefix_.size() : 0);
    // As in HF (a map built in order), a repeated pair keeps its last rank.
    const int32_t left_id = lookup(left);
    const int32_t right_id = lookup(right);
    const int32_t merged_id = lookup(merged);
    merges_[pair_key(left_id, right_id)] = {rank++, merged_id};
  }
}

std::vector<int32_t> BpeModel::merge_word(std::string_view word) const {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id) {
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, -1, true});
    if (index > 0) symbols[static_cast<size_t>(index - 1)].next = index;
  };
  std::optional<int32_t> pending_unk;
  std::string piece;
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t begin = pos;
    pos += utf8_char_length(word, pos);
    piece.assign(word.substr(begin, pos - begin));
    if (begin > 0) piece = continuing_subword_prefix_ + piece;
    if (pos == word.size()) piece += end_of_word_suffix_;
    if (const auto it = vocab_.find(piece); it != vocab_.end()) {
      if (pending_unk) add(*std::exchange(pending_unk, std::nullopt));
      add(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : piece) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        // HF leaves a pending unk in place here; it is flushed by the next known character.
        for (char c : piece) add(byte_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk && !fuse_unk_) add(*pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk) add(*pending_unk);

  std::priority_queue<Candidate> queue;
  auto push_pair = [&](int32_t left_pos) {
    const auto& left = symbols[static_cast<size_t>(left_pos)];
    if (left.next < 0) return;
    const auto it = merges_.find(pair_key(left.id, symbols[static_cast<size_t>(left.next)].id));
    if (it != merges_.end()) queue.push({it->second.rank, left_pos, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    auto& left = symbols[static_cast<size_t>(top.pos)];
    if (!left.live || left.next < 0) continue;
    auto& right = symbols[static_cast<size_t>(left.next)];
    // Skip stale candidates: the pair at this position changed since it was queued.
    const auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    left.id = top.new_id;
    right.live = false;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  std::vector<int32_t> ids;
  for (const auto& s : symbols) {
    if (s.live) ids.push_back(s.id);
  }
  return ids;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto it = vocab_.find(word); it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (const auto it = cache_.find(word); it != cache_.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  auto word_ids = merge_word(word);
  ids.insert(ids.end(), word_ids.begin(), word_ids.end());
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity) cache_.emplace(std::string(word), std::move(word_ids));
  }
}

}  // namespace chronos::tokenizer_detail
