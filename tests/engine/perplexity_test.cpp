// The teacher-forced quality meter: its log-softmax figures by hand, a model against itself, and
// the scored positions against an independent all-logits forward.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "chronos/error.h"
#include "chronos/model_runner.h"
#include "chronos/perplexity.h"
#include "chronos/thread_pool.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

fs::path fixture(const std::string& name) { return fs::path(CHRONOS_TEST_DATA_DIR) / "models" / name; }

TEST(Perplexity, LogSoftmaxFiguresByHand) {
  const std::vector<float> uniform(8, 3.0f);
  EXPECT_NEAR(negative_log_likelihood(uniform, 5), std::log(8.0), 1e-12);
  EXPECT_EQ(kl_divergence(uniform, uniform), 0.0);
  // p = softmax(0, log 3) = (1/4, 3/4), q = (1/2, 1/2): KL = 1/4 log(1/2) + 3/4 log(3/2).
  const std::vector<float> p = {0.0f, float(std::log(3.0))}, q = {1.0f, 1.0f};
  EXPECT_NEAR(kl_divergence(p, q), 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-7);
  EXPECT_NEAR(negative_log_likelihood(p, 1), -std::log(0.75), 1e-7);
}

TEST(Perplexity, AModelAgainstItselfAndAgainstAnAllLogitsForward) {
  const auto model = Model::load(fixture("qwen3_moe-f32"));
  const ModelConfig& c = model->config();
  ThreadPool pool(2);
  auto runner = make_cpu_runner(*model, pool, 32, 8);
  auto same = make_cpu_runner(*model, pool, 32, 8);
  std::vector<int32_t> text(100);
  for (size_t i = 0; i < text.size(); ++i) text[i] = int32_t((i * 29 + 3) % size_t(c.n_vocab));
  PerplexityOptions options;
  options.n_ctx = 32;
  options.n_vocab = c.n_vocab;
  const PerplexityResult r = measure_perplexity(text, options, {runner.get(), nullptr}, {same.get(), nullptr});
  EXPECT_EQ(r.windows, 3);  // 100 tokens: three whole windows of 32
  EXPECT_EQ(r.tokens, 3 * 16);
  EXPECT_NEAR(r.perplexity_change(), 0.0, 1e-12);
  EXPECT_NEAR(r.mean_kl(), 0.0, 1e-12);
  EXPECT_EQ(r.top1_agreement(), 1.0);

  // The same positions from one all-logits prefill of each window (another code path: batched).
  auto batched = make_cpu_runner(*model, pool, 32, 32);
  std::vector<float> all(size_t(32 * c.n_vocab));
  double nll = 0.0;
  for (int64_t w = 0; w < 3; ++w) {
    const std::span<const int32_t> window(text.data() + w * 32, 32);
    batched->forward(window, 0, all.data(), true);
    for (int64_t t = 15; t < 31; ++t)  // position t predicts token t + 1; tokens 16 .. 31 are scored
      nll += negative_log_likelihood({all.data() + t * c.n_vocab, size_t(c.n_vocab)}, window[size_t(t + 1)]);
  }
  EXPECT_NEAR(r.perplexity(), std::exp(nll / 48.0), 1e-4 * r.perplexity());
  EXPECT_GT(r.perplexity(), 1.0);
}

TEST(Perplexity, TextShorterThanOneWindowIsAnError) {
  const auto model = Model::load(fixture("qwen3_moe-f32"));
  ThreadPool pool(1);
  auto runner = make_cpu_runner(*model, pool, 32, 8);
  PerplexityOptions options;
  options.n_ctx = 32;
  options.n_vocab = model->config().n_vocab;
  const std::vector<int32_t> text(20, 1);
  EXPECT_THROW(measure_perplexity(text, options, {runner.get(), nullptr}, {}), Error);
}

}  // namespace
}  // namespace chronos
