// chronos generate and inspect as a user runs them, checked against transformers' reference text.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/cli_runner.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;
using testing::run_chronos;
using testing::RunResult;

const fs::path kModel = fs::path(CHRONOS_TEST_DATA_DIR) / "models" / "qwen2_moe-f32";

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = testing::fresh_work_dir("chronos_cli_ok");
    reference_ = nlohmann::json::parse(testing::slurp(kModel / "reference.json"))["text_case"];
  }
  void TearDown() override { fs::remove_all(work_); }
  fs::path work_;
  nlohmann::json reference_;
};

TEST_F(Cli, GreedyTextMatchesTransformers) {
  const std::string prompt = reference_["prompt"];
  const RunResult r = run_chronos({"generate", "-m", kModel.string(), "-p", prompt, "-n", "32", "--ignore-eos"}, work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, reference_["greedy_text"].get<std::string>());
}

TEST_F(Cli, PromptFromStdinAndFileGiveTheSameText) {
  const auto prompt_file = work_ / "prompt.txt";
  std::ofstream(prompt_file) << reference_["prompt"].get<std::string>();
  const RunResult from_stdin =
      run_chronos({"generate", "-m", kModel.string(), "-n", "12", "--ignore-eos"}, work_, prompt_file.string());
  const RunResult from_file =
      run_chronos({"generate", "-m", kModel.string(), "-f", prompt_file.string(), "-n", "12", "--ignore-eos"}, work_);
  ASSERT_EQ(from_stdin.exit_code, 0) << from_stdin.err;
  ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
  EXPECT_FALSE(from_file.out.empty());
  EXPECT_EQ(from_stdin.out, from_file.out);
}

TEST_F(Cli, StopStringEndsTheTextBeforeIt) {
  const std::string full = reference_["greedy_text"];
  const size_t at = full.find(" the");
  ASSERT_NE(at, std::string::npos);
  const RunResult r = run_chronos(
      {"generate", "-m", kModel.string(), "-p", reference_["prompt"], "-n", "32", "--ignore-eos", "--stop", " the"},
      work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, full.substr(0, at));
}

// The README's --stop "\n\n": the shell passes a backslash and an n, which mean a newline.
TEST_F(Cli, StopStringEscapesMeanTheCharacters) {
  const fs::path demo = fs::path(CHRONOS_SOURCE_DIR) / "models" / "chronos-demo";
  const std::vector<std::string> base = {"generate",         "-m", demo.string(), "-p",
                                         "int main(void) {", "-n", "48",          "--ignore-eos"};
  const RunResult full = run_chronos(base, work_);
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const size_t newline = full.out.find('\n');
  ASSERT_NE(newline, std::string::npos) << "the greedy continuation has no newline: " << full.out;
  auto with_stop = base;
  with_stop.insert(with_stop.end(), {"--stop", "\\n"});
  const RunResult stopped = run_chronos(with_stop, work_);
  ASSERT_EQ(stopped.exit_code, 0) << stopped.err;
  EXPECT_EQ(stopped.out, full.out.substr(0, newline));
}

TEST_F(Cli, SameSeedSameSample) {
  auto sample = [&](const std::string& seed) {
    return run_chronos({"generate", "-m", kModel.string(), "-p", "the mill", "-n", "24", "--ignore-eos", "--temp",
                        "1.0", "--top-k", "40", "--seed", seed},
                       work_);
  };
  const RunResult a = sample("11"), b = sample("11"), c = sample("12");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
}

TEST_F(Cli, StatsJsonHasTheMeasurements) {
  const auto stats = work_ / "stats.json";
  const RunResult r = run_chronos(
      {"generate", "-m", kModel.string(), "-p", "the mill", "-n", "8", "--ignore-eos", "--stats-json", stats.string()},
      work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(testing::slurp(stats));
  EXPECT_GT(j["prompt_tokens"].get<int>(), 0);
  EXPECT_EQ(j["generated_tokens"].get<int>(), 8);
  for (const char* key : {"load_seconds", "time_to_first_token_seconds", "prefill_tokens_per_second",
                          "decode_tokens_per_second", "peak_rss_bytes"})
    EXPECT_GT(j[key].get<double>(), 0.0) << key;
  EXPECT_EQ(j["stop_reason"], "max_tokens");
}

// The CUDA libraries are opened by --device cuda only: a CPU run of a build with the CUDA backend
// maps none of them (they cost a CPU run resident memory it is meant to keep for the model).
TEST_F(Cli, CpuRunOpensNoCudaLibrary) {
  // LD_DEBUG=libs: the dynamic loader lists every library it opens, at start-up and by dlopen.
  const RunResult r =
      run_chronos({"generate", "-m", kModel.string(), "-p", "the mill", "-n", "2"}, work_, "", "", {"LD_DEBUG=libs"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_NE(r.err.find("find library=libc.so"), std::string::npos) << "no loader trace:\n" << r.err;
  for (const char* library : {"libcuda.so", "libcudart", "libcublas", "libnvrtc", "libnvJitLink"})
    EXPECT_EQ(r.err.find(library), std::string::npos) << library << " was opened:\n" << r.err;
}

TEST_F(Cli, InspectReportsTheCounts) {
  const RunResult r = run_chronos({"inspect", "-m", kModel.string(), "--json"}, work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto config = nlohmann::json::parse(testing::slurp(kModel / "config.json"));
  EXPECT_EQ(j["architecture"], "Qwen2-MoE");
  EXPECT_EQ(j["layers"], config["num_hidden_layers"]);
  EXPECT_EQ(j["experts"], config["num_experts"]);
  const int64_t n_embd = config["hidden_size"], n_ff = config["moe_intermediate_size"];
  const int64_t n_moe = j["moe_layers"];
  EXPECT_EQ(j["expert_params"].get<int64_t>(), n_moe * config["num_experts"].get<int64_t>() * 3 * n_embd * n_ff);
  EXPECT_EQ(j["bytes_per_expert"].get<int64_t>(), 3 * n_embd * n_ff * 4);
  const RunResult text = run_chronos({"inspect", kModel.string()}, work_);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("Qwen2-MoE"), std::string::npos);
}

TEST_F(Cli, InspectReportsTheLatentCacheAgainstTheExpandedOne) {
  const fs::path deepseek = kModel.parent_path() / "deepseek_v3-f32";
  const RunResult r = run_chronos({"inspect", deepseek.string(), "--json"}, work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["architecture"], "DeepSeek-V3");
  EXPECT_EQ(j["attention_kinds"], nlohmann::json::array({"multi-head latent attention"}));
  EXPECT_EQ(j["router_kinds"], nlohmann::json::array({"sigmoid + bias top-k"}));
  EXPECT_EQ(j["kv_bytes_per_token"], 3 * (32 + 8) * 4);                // layers x (latent + rotary key) x f32
  EXPECT_EQ(j["kv_bytes_per_token_expanded"], 3 * 4 * (24 + 12) * 4);  // layers x heads x (key + value) x f32
  const RunResult text = run_chronos({"inspect", deepseek.string()}, work_);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("latent 32, query rank 24"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("expanded keys and values would take"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("YaRN x4 from 32"), std::string::npos) << text.out;
}

TEST_F(Cli, InspectNamesTheAttentionAndRouterKindsAndTheKvBytesPerToken) {
  const fs::path glm = kModel.parent_path() / "glm4_moe-f32";
  const RunResult r = run_chronos({"inspect", glm.string(), "--json"}, work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["architecture"], "GLM-4 MoE");
  EXPECT_EQ(j["attention_kinds"], nlohmann::json::array({"grouped-query attention"}));
  EXPECT_EQ(j["router_kinds"], nlohmann::json::array({"sigmoid + bias top-k"}));
  EXPECT_EQ(j["expert_groups"], 4);
  EXPECT_EQ(j["expert_groups_per_token"], 2);
  EXPECT_FLOAT_EQ(j["routed_scaling_factor"].get<float>(), 2.5f);
  EXPECT_EQ(j["rotary_dims"], 16);                         // head_dim 32, partial_rotary_factor 0.5
  EXPECT_EQ(j["moe_layers"], 2);                           // first_k_dense_replace 1 of 3 layers
  EXPECT_EQ(j["shared_expert_ffn"], 32);                   // one shared expert of moe_intermediate_size
  EXPECT_EQ(j["kv_bytes_per_token"], 3 * 2 * 2 * 32 * 4);  // layers x (K, V) x kv heads x head_dim x f32
  const RunResult text = run_chronos({"inspect", glm.string()}, work_);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("sigmoid + bias top-k, top-2 of 4 groups, weights x2.5"), std::string::npos) << text.out;
}

TEST_F(Cli, HelpAndVersionExitZero) {
  EXPECT_EQ(run_chronos({"--help"}, work_).exit_code, 0);
  const RunResult sub = run_chronos({"generate", "--help"}, work_);
  EXPECT_EQ(sub.exit_code, 0);
  EXPECT_NE(sub.out.find("--n-predict"), std::string::npos);
  EXPECT_EQ(run_chronos({"--version"}, work_).exit_code, 0);
}

}  // namespace
}  // namespace chronos
