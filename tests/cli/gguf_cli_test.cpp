// GGUF files as a user runs them: generate from the file, pack it and run the pack, inspect it,
// and the errors of a damaged file; and low-bit misses from the command line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/cli_runner.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;
using testing::run_chronos;
using testing::RunResult;

const fs::path kFixtures = fs::path(CHRONOS_TEST_DATA_DIR);

class GgufCli : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = testing::fresh_work_dir("chronos_cli_gguf");
  }
  void TearDown() override { fs::remove_all(work_); }

  std::string greedy(const fs::path& model, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"generate", "-m", model.string(), "-p", "The river keeps its own time",
                                     "-n", "12", "--temp", "0", "--ignore-eos"};
    args.insert(args.end(), extra.begin(), extra.end());
    const RunResult r = run_chronos(args, work_);
    EXPECT_EQ(r.exit_code, 0) << model << ": " << r.err;
    return r.out;
  }

  fs::path work_;
};

TEST_F(GgufCli, F32FileGeneratesTheSafetensorsCheckpointsText) {
  const std::string from_gguf = greedy(kFixtures / "gguf" / "mixtral-f32.gguf");
  EXPECT_FALSE(from_gguf.empty());
  EXPECT_EQ(from_gguf, greedy(kFixtures / "models" / "mixtral-f32"));
}

TEST_F(GgufCli, PackOfAGgufFileGeneratesWhatTheFileDoes) {
  for (const char* name : {"mixtral-f32", "qwen2_moe-q8_0", "olmoe-q4_k", "qwen3_moe-f16", "mixtral-q4_k_m"}) {
    const fs::path file = kFixtures / "gguf" / (std::string(name) + ".gguf");
    const fs::path pack = work_ / name;
    const RunResult packed = run_chronos({"pack", "-m", file.string(), "-o", pack.string(), "--cluster", "none"}, work_);
    ASSERT_EQ(packed.exit_code, 0) << name << ": " << packed.err;
    for (const char* side : {"config.json", "tokenizer.json", "tokenizer_config.json"})
      EXPECT_TRUE(fs::exists(pack / side)) << name << " " << side;
    const std::string expected = greedy(file);
    EXPECT_EQ(greedy(pack), expected) << name;
    EXPECT_EQ(greedy(pack, {"--expert-cache", "50%"}), expected) << name << " streamed at 50%";
  }
}

TEST_F(GgufCli, InspectNamesTheStoredTypes) {
  const RunResult r = run_chronos({"inspect", (kFixtures / "gguf" / "olmoe-q4_k.gguf").string()}, work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Q4_K on rows of 64 and 32 weights is stored in its 32-weight stand-in.
  EXPECT_NE(r.out.find("Q5_0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("OLMoE"), std::string::npos) << r.out;
}

// A Q4_K_M-style file mixes types: inspect lists both on the classes that have them, for the file
// and for its pack.
TEST_F(GgufCli, InspectListsEveryTypeOfAMixedFile) {
  const fs::path file = kFixtures / "gguf" / "mixtral-q4_k_m.gguf";
  const fs::path pack = work_ / "pack";
  ASSERT_EQ(run_chronos({"pack", "-m", file.string(), "-o", pack.string(), "--cluster", "none"}, work_).exit_code, 0);
  for (const fs::path& model : {file, pack}) {
    const RunResult r = run_chronos({"inspect", model.string()}, work_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const size_t down = r.out.find("experts down");
    ASSERT_NE(down, std::string::npos) << r.out;
    const std::string line = r.out.substr(down, r.out.find('\n', down) - down);
    EXPECT_NE(line.find("Q5_0,Q8_0"), std::string::npos) << line;
  }
}

// The predict pipeline from a GGUF file: traces of the file, a pack clustered on them, predictors
// trained into it and evaluated with the file's routers, then generation at a quarter of the
// experts that prefetches by prediction and gives the file's text (wait mode is exact).
TEST_F(GgufCli, TracePackTrainPredictorsFromAGgufFile) {
  const fs::path file = kFixtures / "gguf" / "mixtral-q4_k_m.gguf";
  const fs::path prompts = work_ / "prompts.jsonl", traces = work_ / "traces", pack = work_ / "pack";
  std::ofstream(prompts) << "{\"prompt\": \"The river keeps its own time\"}\n{\"prompt\": \"A mill by the river\"}\n";
  RunResult r = run_chronos(
      {"trace", "-m", file.string(), "--prompts", prompts.string(), "-n", "12", "-o", traces.string()}, work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_chronos({"pack", "-m", file.string(), "--traces", traces.string(), "-o", pack.string()}, work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_chronos({"train-predictors", "--traces", traces.string(), "-o", pack.string(), "--epochs", "2", "--rank",
                   "16", "--intent-hidden", "16", "--intent-epochs", "4", "-t", "1"},
                  work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_chronos({"eval-predictors", "-m", pack.string(), "--traces", traces.string(), "--router-model", file.string()},
                  work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string expected = greedy(file);
  EXPECT_EQ(greedy(pack, {"--expert-cache", "25%", "--prefetch", "predict"}), expected);
}

TEST_F(GgufCli, TruncatedFileIsOneLineAndExitOne) {
  const fs::path source = kFixtures / "gguf" / "qwen2_moe-q8_0.gguf";
  const fs::path cut = work_ / "cut.gguf";
  fs::copy_file(source, cut);
  fs::resize_file(cut, fs::file_size(source) / 2);
  for (const char* command : {"generate", "pack", "inspect"}) {
    std::vector<std::string> args = {command};
    if (std::string(command) != "inspect") args.push_back("-m");
    args.push_back(cut.string());
    if (std::string(command) == "pack") args.insert(args.end(), {"-o", (work_ / "p").string(), "--cluster", "none"});
    if (std::string(command) == "generate") args.insert(args.end(), {"-p", "hi"});
    const RunResult r = run_chronos(args, work_);
    EXPECT_EQ(r.exit_code, 1) << command << ": " << r.err;
    ASSERT_EQ(r.err_lines().size(), 1u) << command << ": " << r.err;
    EXPECT_NE(r.err.find("cut.gguf"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(work_ / "p")) << "no half-written pack";
  }
}

TEST_F(GgufCli, LowbitMissesFromTheCommandLine) {
  const fs::path model = kFixtures / "models" / "qwen2_moe-f32";
  const fs::path plain = work_ / "plain", with_copies = work_ / "copies";
  ASSERT_EQ(run_chronos({"pack", "-m", model.string(), "-o", plain.string(), "--cluster", "none"}, work_).exit_code, 0);
  const RunResult packed = run_chronos({"pack", "-m", model.string(), "-o", with_copies.string(), "--cluster", "none",
                                        "--lowbit-type", "q8_0"}, work_);
  ASSERT_EQ(packed.exit_code, 0) << packed.err;
  EXPECT_NE(packed.err.find("low-bit copies"), std::string::npos) << packed.err;

  const fs::path stats = work_ / "stats.json";
  const RunResult ok = run_chronos({"generate", "-m", with_copies.string(), "-p", "The river", "-n", "8",
                                    "--expert-cache", "60%", "--on-miss", "lowbit", "--stats-json", stats.string()},
                                   work_);
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  const std::string json = testing::slurp(stats);
  EXPECT_NE(json.find("\"byte_hit_rate\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"lowbit_bytes\""), std::string::npos) << json;

  const RunResult no_copies = run_chronos(
      {"generate", "-m", plain.string(), "-p", "The river", "-n", "4", "--on-miss", "lowbit"}, work_);
  EXPECT_EQ(no_copies.exit_code, 1) << no_copies.err;
  EXPECT_EQ(no_copies.err_lines().size(), 1u) << no_copies.err;
  EXPECT_NE(no_copies.err.find("--lowbit-type"), std::string::npos) << no_copies.err;

  const RunResult tiny = run_chronos({"generate", "-m", with_copies.string(), "-p", "The river", "-n", "4",
                                      "--expert-cache", "1%", "--on-miss", "lowbit"}, work_);
  EXPECT_EQ(tiny.exit_code, 1) << tiny.err;
  EXPECT_NE(tiny.err.find("--expert-cache"), std::string::npos) << tiny.err;
  EXPECT_NE(tiny.err.find("low-bit copies"), std::string::npos) << tiny.err;

  const RunResult wait_rule = run_chronos({"generate", "-m", with_copies.string(), "-p", "The river", "-n", "4",
                                           "--on-miss", "wait", "--wait-above", "0.3"}, work_);
  EXPECT_EQ(wait_rule.exit_code, 2) << wait_rule.err;
  EXPECT_NE(wait_rule.err.find("--wait-above"), std::string::npos) << wait_rule.err;
}

}  // namespace
}  // namespace chronos
