// measure_perplexity: windows of held-out text, prefill half, teacher-forced decode half.
#include "chronos/perplexity.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "chronos/error.h"
#include "chronos/file_util.h"

namespace chronos {
namespace {

// log(sum(exp(x))) in double, max-subtracted.
double log_sum_exp(std::span<const float> x) {
  const double max = *std::max_element(x.begin(), x.end());
  double sum = 0.0;
  for (const float v : x) sum += std::exp(double(v) - max);
  return max + std::log(sum);
}

int32_t argmax(std::span<const float> x) { return int32_t(std::max_element(x.begin(), x.end()) - x.begin()); }

// Logits of positions half .. n_ctx - 2 of `window` (each predicting the next token), into
// out[(n_ctx - half - 1) * n_vocab]: a prefill of window[0, half), then one step per token.
void run_window(const Engine& m, std::span<const int32_t> window, int64_t half, int64_t n_vocab,
                std::vector<float>& out) {
  const int64_t n_ctx = std::ssize(window), scored = n_ctx - half;
  out.resize(size_t(scored * n_vocab));
  m.begin_request();
  m.forward(window.subspan(0, size_t(half)), 0, out.data());  // predicts window[half]
  for (int64_t i = 1; i < scored; ++i) {
    const int64_t pos = half + i - 1;
    m.forward(window.subspan(size_t(pos), 1), pos, out.data() + i * n_vocab);
  }
}

constexpr char kLogitsMagic[8] = {'C', 'H', 'R', 'L', 'G', 'T', '0', '1'};

// The row's top k (ids and log-probabilities, most likely first, ties to the lower id) and the
// log-probability of `target`, appended to `saved`.
void save_row(std::span<const float> row, int32_t target, SavedLogits& saved, std::vector<int32_t>& order) {
  const double lse = log_sum_exp(row);
  const auto k = size_t(saved.top_k);
  order.resize(row.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(k), order.end(), [&](int32_t a, int32_t b) {
    return row[size_t(a)] > row[size_t(b)] || (row[size_t(a)] == row[size_t(b)] && a < b);
  });
  for (size_t i = 0; i < k; ++i) {
    saved.top_ids.push_back(order[i]);
    saved.top_logp.push_back(float(double(row[size_t(order[i])]) - lse));
  }
  saved.target_logp.push_back(float(double(row[size_t(target)]) - lse));
  double rest = 0.0;  // summed over the other tokens, not 1 - the top's mass (which would cancel)
  for (size_t i = k; i < order.size(); ++i) rest += std::exp(double(row[size_t(order[i])]) - lse);
  saved.rest_logp.push_back(k < order.size() && rest > 0.0 ? float(std::log(rest))
                                                           : -std::numeric_limits<float>::infinity());
}

template <typename T>
void append(std::string& out, std::span<const T> values) {
  out.append(reinterpret_cast<const char*>(values.data()), values.size_bytes());
}

}  // namespace

uint64_t hash_bytes(std::span<const std::byte> bytes) { return XXH64(bytes.data(), bytes.size(), 0); }

void save_logits(const std::filesystem::path& path, const SavedLogits& saved) {
  CHRONOS_CHECK(std::ssize(saved.top_ids) == saved.positions() * saved.top_k &&
                saved.top_logp.size() == saved.top_ids.size() && saved.rest_logp.size() == saved.target_logp.size());
  const nlohmann::json header = {{"text_hash", fmt::format("{:016x}", saved.text_hash)},
                                 {"tokens_hash", fmt::format("{:016x}", saved.tokens_hash)},
                                 {"n_ctx", saved.n_ctx},
                                 {"windows", saved.windows},
                                 {"n_vocab", saved.n_vocab},
                                 {"top_k", saved.top_k},
                                 {"positions", saved.positions()},
                                 {"source", saved.source}};
  const std::string text = header.dump();
  std::string out(kLogitsMagic, sizeof(kLogitsMagic));
  const uint64_t header_bytes = text.size();
  out.append(reinterpret_cast<const char*>(&header_bytes), sizeof(header_bytes));
  out += text;
  append(out, std::span<const int32_t>(saved.top_ids));
  append(out, std::span<const float>(saved.top_logp));
  append(out, std::span<const float>(saved.target_logp));
  append(out, std::span<const float>(saved.rest_logp));
  const uint64_t digest = XXH64(out.data(), out.size(), 0);
  out.append(reinterpret_cast<const char*>(&digest), sizeof(digest));
  write_file_atomically(path, out);
}

SavedLogits load_saved_logits(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error("{}: cannot open the saved logits", path.string());
  const std::string bytes(std::istreambuf_iterator<char>(in), {});
  if (in.bad()) throw_error("{}: cannot read the saved logits", path.string());
  const auto bad = [&](std::string_view what) {
    throw_error("{}: not a saved-logits file of chronos perplexity --save-logits ({})", path.string(), what);
  };
  if (bytes.size() < sizeof(kLogitsMagic) + 16 || std::memcmp(bytes.data(), kLogitsMagic, sizeof(kLogitsMagic)) != 0)
    bad("no CHRLGT01 header");
  uint64_t digest, header_bytes;
  std::memcpy(&digest, bytes.data() + bytes.size() - 8, 8);
  if (XXH64(bytes.data(), bytes.size() - 8, 0) != digest) bad("its checksum does not match: truncated or changed");
  std::memcpy(&header_bytes, bytes.data() + 8, 8);
  if (header_bytes > bytes.size() - 24) bad("header size");
  const auto header = nlohmann::json::parse(bytes.begin() + 16, bytes.begin() + 16 + std::ptrdiff_t(header_bytes),
                                            nullptr, /*allow_exceptions=*/false);
  SavedLogits saved;
  int64_t positions = 0;
  try {
    saved.text_hash = std::stoull(header.at("text_hash").get<std::string>(), nullptr, 16);
    saved.tokens_hash = std::stoull(header.at("tokens_hash").get<std::string>(), nullptr, 16);
    saved.n_ctx = header.at("n_ctx").get<int64_t>();
    saved.windows = header.at("windows").get<int64_t>();
    saved.n_vocab = header.at("n_vocab").get<int64_t>();
    saved.top_k = header.at("top_k").get<int64_t>();
    saved.source = header.at("source").get<std::string>();
    positions = header.at("positions").get<int64_t>();
  } catch (const std::exception&) {
    bad("header");
  }
  if (saved.top_k <= 0 || saved.top_k > saved.n_vocab || positions <= 0 || positions > (int64_t(1) << 32)) bad("sizes");
  const size_t pairs = size_t(positions * saved.top_k);
  if (bytes.size() != 24 + header_bytes + pairs * 8 + size_t(positions) * 8) bad("its size does not match its header");
  const char* p = bytes.data() + 16 + header_bytes;
  saved.top_ids.resize(pairs);
  saved.top_logp.resize(pairs);
  saved.target_logp.resize(size_t(positions));
  saved.rest_logp.resize(size_t(positions));
  std::memcpy(saved.top_ids.data(), p, pairs * 4);
  std::memcpy(saved.top_logp.data(), p + pairs * 4, pairs * 4);
  std::memcpy(saved.target_logp.data(), p + pairs * 8, size_t(positions) * 4);
  std::memcpy(saved.rest_logp.data(), p + pairs * 8 + size_t(positions) * 4, size_t(positions) * 4);
  for (const int32_t id : saved.top_ids)
    if (id < 0 || id >= saved.n_vocab) bad("a token id outside its vocabulary");
  return saved;
}

namespace {

// kl_divergence_top with `top`, q_logits.size() zeros, as scratch (left zeroed).
double kl_divergence_top(std::span<const int32_t> ids, std::span<const float> logp, float rest_logp,
                         std::span<const float> q_logits, std::vector<uint8_t>& top) {
  CHRONOS_CHECK(ids.size() == logp.size() && !q_logits.empty() && top.size() == q_logits.size());
  const double lq = log_sum_exp(q_logits);
  double kl = 0.0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const double log_p = logp[i], log_q = double(q_logits[size_t(ids[i])]) - lq;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  // The other tokens as one bucket on each side; q's summed directly (1 - its top mass would cancel).
  if (std::isfinite(rest_logp)) {
    for (const int32_t id : ids) top[size_t(id)] = 1;
    double q_rest = 0.0;
    for (size_t i = 0; i < q_logits.size(); ++i)
      if (top[i] == 0) q_rest += std::exp(double(q_logits[i]) - lq);
    for (const int32_t id : ids) top[size_t(id)] = 0;
    kl += std::exp(double(rest_logp)) * (double(rest_logp) - std::log(std::max(q_rest, 1e-300)));
  }
  return std::max(kl, 0.0);
}

}  // namespace

double kl_divergence_top(std::span<const int32_t> ids, std::span<const float> logp, float rest_logp,
                         std::span<const float> q_logits) {
  std::vector<uint8_t> top(q_logits.size(), 0);
  return kl_divergence_top(ids, logp, rest_logp, q_logits, top);
}

double negative_log_likelihood(std::span<const float> logits, int32_t target) {
  CHRONOS_CHECK(target >= 0 && target < std::ssize(logits));
  return log_sum_exp(logits) - double(logits[size_t(target)]);
}

double kl_divergence(std::span<const float> p_logits, std::span<const float> q_logits) {
  CHRONOS_CHECK(p_logits.size() == q_logits.size() && !p_logits.empty());
  const double lp = log_sum_exp(p_logits), lq = log_sum_exp(q_logits);
  double kl = 0.0;
  for (size_t i = 0; i < p_logits.size(); ++i) {
    const double log_p = double(p_logits[i]) - lp, log_q = double(q_logits[i]) - lq;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  return std::max(kl, 0.0);  // rounding can leave -1e-17 for identical distributions
}

double PerplexityResult::perplexity() const { return tokens > 0 ? std::exp(nll_sum / double(tokens)) : 0.0; }
double PerplexityResult::reference_perplexity() const {
  return tokens > 0 && has_reference ? std::exp(ref_nll_sum / double(tokens)) : 0.0;
}
double PerplexityResult::perplexity_change() const {
  return has_reference && tokens > 0 ? perplexity() / reference_perplexity() - 1.0 : 0.0;
}
double PerplexityResult::mean_kl() const { return has_reference && tokens > 0 ? kl_sum / double(tokens) : 0.0; }
double PerplexityResult::top1_agreement() const {
  return has_reference && tokens > 0 ? double(top1_agree) / double(tokens) : 0.0;
}

PerplexityResult measure_perplexity(std::span<const int32_t> text, const PerplexityOptions& options,
                                    const Engine& model, const Engine& reference,
                                    const std::function<void(int64_t, int64_t)>& on_window) {
  CHRONOS_CHECK(model.runner() != nullptr);
  CHRONOS_CHECK(options.base == nullptr || reference.runner() == nullptr);
  const int64_t n_ctx = options.n_ctx;
  if (n_ctx < 4) throw_error("a perplexity window must hold at least 4 tokens (got {})", n_ctx);
  int64_t windows = std::ssize(text) / n_ctx;
  if (windows == 0)
    throw_error("the text is {} tokens, shorter than one window of {} (give more text or a smaller window)",
                text.size(), n_ctx);
  if (options.max_windows > 0) windows = std::min(windows, options.max_windows);

  PerplexityResult result;
  result.has_reference = reference.runner() != nullptr || options.base != nullptr;
  const int64_t half = n_ctx / 2, scored = n_ctx - half;
  const int64_t n_vocab = options.n_vocab;
  CHRONOS_CHECK(n_vocab > 0);
  for (const int32_t id : text)
    if (id < 0 || id >= n_vocab) throw_error("token id {} is outside the vocabulary [0, {})", id, n_vocab);
  const SavedLogits* base = options.base;
  if (base != nullptr) {
    if (base->n_vocab != n_vocab)
      throw_error("{}: saved from a vocabulary of {} tokens, the model's is {}", base->source, base->n_vocab, n_vocab);
    if (base->n_ctx != n_ctx || base->windows != windows || base->positions() != windows * scored)
      throw_error("{}: saved over {} windows of {} tokens, this run scores {} windows of {} (--ctx-size, --windows)",
                  base->source, base->windows, base->n_ctx, windows, n_ctx);
  }
  SavedLogits* save = options.save;
  std::vector<int32_t> order;
  if (save != nullptr) {
    save->n_ctx = n_ctx;
    save->windows = windows;
    save->n_vocab = n_vocab;
    save->top_k = std::clamp<int64_t>(options.save_top_k, 1, n_vocab);
    save->top_ids.clear();
    save->top_logp.clear();
    save->target_logp.clear();
    save->rest_logp.clear();
  }
  std::vector<float> logits, ref_logits;
  std::vector<uint8_t> top(base != nullptr ? size_t(n_vocab) : 0, 0);  // kl_divergence_top's scratch
  int64_t position = 0;
  for (int64_t w = 0; w < windows; ++w) {
    const std::span<const int32_t> window = text.subspan(size_t(w * n_ctx), size_t(n_ctx));
    run_window(model, window, half, n_vocab, logits);
    if (reference.runner() != nullptr) run_window(reference, window, half, n_vocab, ref_logits);
    for (int64_t i = 0; i < scored; ++i, ++position) {
      const int32_t target = window[size_t(half + i)];
      const std::span<const float> row(logits.data() + i * n_vocab, size_t(n_vocab));
      result.nll_sum += negative_log_likelihood(row, target);
      if (save != nullptr) save_row(row, target, *save, order);
      if (reference.runner() != nullptr) {
        const std::span<const float> ref_row(ref_logits.data() + i * n_vocab, size_t(n_vocab));
        result.ref_nll_sum += negative_log_likelihood(ref_row, target);
        result.kl_sum += kl_divergence(ref_row, row);
        result.top1_agree += argmax(ref_row) == argmax(row);
      } else if (base != nullptr) {
        const size_t k = size_t(base->top_k), at = size_t(position) * k;
        result.ref_nll_sum -= base->target_logp[size_t(position)];
        result.kl_sum += kl_divergence_top({base->top_ids.data() + at, k}, {base->top_logp.data() + at, k},
                                           base->rest_logp[size_t(position)], row, top);
        result.top1_agree += base->top_ids[at] == argmax(row);
      }
    }
    result.tokens += scored;
    ++result.windows;
    if (on_window) on_window(w + 1, windows);
  }
  return result;
}

}  // namespace chronos
