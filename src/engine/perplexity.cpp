// measure_perplexity: windows of held-out text, prefill half, teacher-forced decode half.
#include "chronos/perplexity.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "chronos/error.h"

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

}  // namespace

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
  const int64_t n_ctx = options.n_ctx;
  if (n_ctx < 4) throw_error("a perplexity window must hold at least 4 tokens (got {})", n_ctx);
  int64_t windows = std::ssize(text) / n_ctx;
  if (windows == 0)
    throw_error("the text is {} tokens, shorter than one window of {} (give more text or a smaller window)",
                text.size(), n_ctx);
  if (options.max_windows > 0) windows = std::min(windows, options.max_windows);

  PerplexityResult result;
  result.has_reference = reference.runner() != nullptr;
  const int64_t half = n_ctx / 2, scored = n_ctx - half;
  const int64_t n_vocab = options.n_vocab;
  CHRONOS_CHECK(n_vocab > 0);
  for (const int32_t id : text)
    if (id < 0 || id >= n_vocab) throw_error("token id {} is outside the vocabulary [0, {})", id, n_vocab);
  std::vector<float> logits, ref_logits;
  for (int64_t w = 0; w < windows; ++w) {
    const std::span<const int32_t> window = text.subspan(size_t(w * n_ctx), size_t(n_ctx));
    run_window(model, window, half, n_vocab, logits);
    if (result.has_reference) run_window(reference, window, half, n_vocab, ref_logits);
    for (int64_t i = 0; i < scored; ++i) {
      const int32_t target = window[size_t(half + i)];
      const std::span<const float> row(logits.data() + i * n_vocab, size_t(n_vocab));
      result.nll_sum += negative_log_likelihood(row, target);
      if (result.has_reference) {
        const std::span<const float> ref_row(ref_logits.data() + i * n_vocab, size_t(n_vocab));
        result.ref_nll_sum += negative_log_likelihood(ref_row, target);
        result.kl_sum += kl_divergence(ref_row, row);
        result.top1_agree += argmax(ref_row) == argmax(row);
      }
    }
    result.tokens += scored;
    ++result.windows;
    if (on_window) on_window(w + 1, windows);
  }
  return result;
}

}  // namespace chronos
