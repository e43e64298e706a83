// The teacher-forced quality meter: its log-softmax figures by hand, a model against itself, and
// the scored positions against an independent all-logits forward.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

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

// KL against a distribution known by its top tokens: those tokens exactly, the rest as one bucket.
TEST(Perplexity, TopTokensKlByHand) {
  // p = (0.5, 0.3, 0.2) saved as its top 2; q = softmax(log 0.25, log 0.25, log 0.5).
  const std::vector<int32_t> ids = {0, 1};
  const std::vector<float> logp = {float(std::log(0.5)), float(std::log(0.3))};
  const std::vector<float> q = {float(std::log(0.25)), float(std::log(0.25)), float(std::log(0.5))};
  const double expected = 0.5 * std::log(0.5 / 0.25) + 0.3 * std::log(0.3 / 0.25) + 0.2 * std::log(0.2 / 0.5);
  EXPECT_NEAR(kl_divergence_top(ids, logp, float(std::log(0.2)), q), expected, 1e-6);
  // All three saved, no rest: the full KL.
  const std::vector<int32_t> all = {0, 1, 2};
  const std::vector<float> all_logp = {float(std::log(0.5)), float(std::log(0.3)), float(std::log(0.2))};
  EXPECT_NEAR(kl_divergence_top(all, all_logp, -INFINITY, q), kl_divergence(all_logp, q), 1e-6);
}

class SavedRun : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = Model::load(fixture("qwen3_moe-f32"));
    other_ = Model::load(fixture("qwen3_moe-bf16"));
    text_.resize(100);
    for (size_t i = 0; i < text_.size(); ++i) text_[i] = int32_t((i * 29 + 3) % size_t(model_->config().n_vocab));
    options_.n_ctx = 32;
    options_.n_vocab = model_->config().n_vocab;
    file_ = fs::temp_directory_path() / ("chronos_saved_logits_" + std::to_string(::getpid()));
  }
  void TearDown() override { fs::remove(file_); }
  PerplexityResult measure(const Model& m, const Model* reference, PerplexityOptions options) {
    auto runner = make_cpu_runner(m, pool_, 32, 8);
    std::unique_ptr<ModelRunner> ref = reference ? make_cpu_runner(*reference, pool_, 32, 8) : nullptr;
    return measure_perplexity(text_, options, {runner.get(), nullptr}, {ref.get(), nullptr});
  }
  std::unique_ptr<Model> model_, other_;
  std::vector<int32_t> text_;
  PerplexityOptions options_;
  ThreadPool pool_{2};
  fs::path file_;
};

// Saved with the whole vocabulary, the exact run read back from its file gives what the reference
// model in the same process gives; with fewer tokens the KL is a lower bound.
TEST_F(SavedRun, AFileOfTheExactRunStandsForTheReferenceModel) {
  SavedLogits saved;
  saved.source = "test";
  PerplexityOptions save = options_;
  save.save = &saved;
  save.save_top_k = options_.n_vocab;
  const PerplexityResult exact = measure(*model_, nullptr, save);
  EXPECT_EQ(saved.positions(), exact.tokens);
  EXPECT_EQ(saved.top_k, options_.n_vocab);
  save_logits(file_, saved);
  const SavedLogits base = load_saved_logits(file_);
  EXPECT_EQ(base.top_ids, saved.top_ids);
  EXPECT_EQ(base.target_logp, saved.target_logp);

  PerplexityOptions against_file = options_;
  against_file.base = &base;
  const PerplexityResult by_file = measure(*other_, nullptr, against_file);
  const PerplexityResult by_model = measure(*other_, model_.get(), options_);
  ASSERT_TRUE(by_file.has_reference);
  EXPECT_NEAR(by_file.perplexity_change(), by_model.perplexity_change(), 1e-6);
  EXPECT_GT(by_model.mean_kl(), 1e-4);  // bf16 weights differ from f32 ones
  // The saved log-probabilities are f32: the KL within about 1e-7 per position.
  EXPECT_NEAR(by_file.mean_kl(), by_model.mean_kl(), 1e-6 + 1e-3 * by_model.mean_kl());
  EXPECT_EQ(by_file.top1_agree, by_model.top1_agree);
  // The model against its own saved run.
  const PerplexityResult itself = measure(*model_, nullptr, against_file);
  EXPECT_NEAR(itself.mean_kl(), 0.0, 1e-6);
  EXPECT_EQ(itself.top1_agreement(), 1.0);

  SavedLogits top4;
  save.save = &top4;
  save.save_top_k = 4;
  measure(*model_, nullptr, save);
  against_file.base = &top4;
  const PerplexityResult bound = measure(*other_, nullptr, against_file);
  EXPECT_GT(bound.mean_kl(), 0.0);
  EXPECT_LE(bound.mean_kl(), by_model.mean_kl() + 1e-6);
  EXPECT_EQ(bound.top1_agree, by_model.top1_agree);
  EXPECT_NEAR(bound.perplexity_change(), by_model.perplexity_change(), 1e-6);
}

TEST_F(SavedRun, OtherWindowsAndDamagedFilesAreRefused) {
  SavedLogits saved;
  saved.source = "base.lg";
  PerplexityOptions save = options_;
  save.save = &saved;
  measure(*model_, nullptr, save);
  PerplexityOptions other_windows = options_;
  other_windows.max_windows = 2;
  other_windows.base = &saved;
  try {
    measure(*other_, nullptr, other_windows);
    ADD_FAILURE() << "compared over other windows";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("base.lg: saved over 3 windows of 32 tokens, this run scores 2 windows of 32"),
              std::string::npos)
        << e.what();
  }
  save_logits(file_, saved);
  std::string bytes;
  {
    std::ifstream in(file_, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto error_of = [&](const std::string& content) {
    std::ofstream(file_, std::ios::binary | std::ios::trunc) << content;
    try {
      load_saved_logits(file_);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(read)");
  };
  std::string flipped = bytes;
  flipped[bytes.size() / 2] = char(flipped[bytes.size() / 2] ^ 1);
  EXPECT_NE(error_of(flipped).find("checksum does not match"), std::string::npos) << error_of(flipped);
  EXPECT_NE(error_of(bytes.substr(0, bytes.size() - 100)).find("checksum does not match"), std::string::npos);
  EXPECT_NE(error_of("hello").find("not a saved-logits file"), std::string::npos);
  EXPECT_EQ(error_of(bytes), "(read)");
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
