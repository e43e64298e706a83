// chronos perplexity as a user runs it: a reference saved once with --save-logits and compared with
// --kl-base, and the misuses of those flags.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/cli_runner.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;
using testing::expect_clean_failure;
using testing::run_chronos;
using testing::RunResult;

const fs::path kModels = fs::path(CHRONOS_TEST_DATA_DIR) / "models";

class CliPerplexity : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = testing::fresh_work_dir("chronos_cli_perplexity");
    std::ofstream(work_ / "text.txt") << "The river keeps its own time, and the mill turns with it. "
                                      << std::string(3, 'x') << " Every spring the water rises and the wheel sings.";
    std::ofstream(work_ / "other.txt") << "A different text entirely, with other words in another order, at length "
                                          "enough for two windows of sixteen tokens each.";
  }
  void TearDown() override { fs::remove_all(work_); }
  std::vector<std::string> args(const std::string& model, const std::string& text) const {
    return {"perplexity", "-m", (kModels / model).string(), "-f", (work_ / text).string(), "-c", "16",
            "--windows",  "2"};
  }
  fs::path work_;
};

TEST_F(CliPerplexity, SavedRunStandsForTheReference) {
  const std::string base = (work_ / "base.lg").string();
  auto save = args("qwen2_moe-f32", "text.txt");
  save.insert(save.end(), {"--save-logits", base});
  const RunResult saved = run_chronos(save, work_);
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  EXPECT_NE(saved.out.find("saved the top 128 log-probabilities of 16 positions to " + base), std::string::npos)
      << saved.out;

  auto against_file = args("qwen2_moe-bf16", "text.txt");
  against_file.insert(against_file.end(), {"--kl-base", base, "--json", (work_ / "by_file.json").string()});
  const RunResult by_file = run_chronos(against_file, work_);
  ASSERT_EQ(by_file.exit_code, 0) << by_file.err;
  auto against_model = args("qwen2_moe-bf16", "text.txt");
  against_model.insert(against_model.end(),
                       {"--ref", (kModels / "qwen2_moe-f32").string(), "--json", (work_ / "by_model.json").string()});
  const RunResult by_model = run_chronos(against_model, work_);
  ASSERT_EQ(by_model.exit_code, 0) << by_model.err;
  const auto file_json = nlohmann::json::parse(std::ifstream(work_ / "by_file.json"));
  const auto model_json = nlohmann::json::parse(std::ifstream(work_ / "by_model.json"));
  EXPECT_EQ(file_json["tokens"], model_json["tokens"]);
  EXPECT_EQ(file_json["kl_top_k"], 128);
  EXPECT_NEAR(file_json["perplexity_change"].get<double>(), model_json["perplexity_change"].get<double>(), 1e-6);
  EXPECT_EQ(file_json["top1_agreement"], model_json["top1_agreement"]);
  EXPECT_LE(file_json["mean_kl"].get<double>(), model_json["mean_kl"].get<double>() * (1 + 1e-4));
}

TEST_F(CliPerplexity, MisusesAreOneClearError) {
  const std::string base = (work_ / "base.lg").string();
  auto save = args("qwen2_moe-f32", "text.txt");
  save.insert(save.end(), {"--save-logits", base});
  ASSERT_EQ(run_chronos(save, work_).exit_code, 0);
  auto other_text = args("qwen2_moe-f32", "other.txt");
  other_text.insert(other_text.end(), {"--kl-base", base});
  expect_clean_failure(run_chronos(other_text, work_), 1, base + ": saved from another text than");
  auto other_windows = args("qwen2_moe-f32", "text.txt");
  other_windows.back() = "1";
  other_windows.insert(other_windows.end(), {"--kl-base", base});
  expect_clean_failure(run_chronos(other_windows, work_), 1, "saved over 2 windows of 16 tokens, this run scores 1");
  auto both = args("qwen2_moe-f32", "text.txt");
  both.insert(both.end(), {"--kl-base", base, "--ref", (kModels / "qwen2_moe-f32").string()});
  expect_clean_failure(run_chronos(both, work_), 2, "--ref and --kl-base");
  auto top_k = args("qwen2_moe-f32", "text.txt");
  top_k.insert(top_k.end(), {"--save-top-k", "8"});
  expect_clean_failure(run_chronos(top_k, work_), 2, "--save-top-k needs --save-logits");
  auto nowhere = args("qwen2_moe-f32", "text.txt");
  nowhere.insert(nowhere.end(), {"--save-logits", (work_ / "missing" / "base.lg").string()});
  expect_clean_failure(run_chronos(nowhere, work_), 2, "does not exist");
  auto not_a_file = args("qwen2_moe-f32", "text.txt");
  not_a_file.insert(not_a_file.end(), {"--kl-base", (work_ / "text.txt").string()});
  expect_clean_failure(run_chronos(not_a_file, work_), 1, "not a saved-logits file");
}

}  // namespace
}  // namespace chronos
