// trace -> pack -> generate/bench/inspect on a pack folder, as a user runs them.
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

class CliStorage : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = testing::fresh_work_dir("chronos_cli_storage");
    prompts_ = work_ / "prompts.jsonl";
    std::ofstream(prompts_) << R"({"id": "a", "domain": "prose", "prompt": "The river keeps its own time"})"
                               "\n"
                            << R"({"id": "b", "domain": "code", "prompt": "int main() { return 0; }"})"
                               "\n"
                            << R"({"id": "c", "domain": "fr", "prompt": "Le moulin tourne"})"
                               "\n";
  }
  void TearDown() override { fs::remove_all(work_); }
  fs::path work_, prompts_;
};

TEST_F(CliStorage, TracePackGenerateBench) {
  const auto traces = work_ / "traces", pack = work_ / "pack";
  RunResult r = run_chronos({"trace", "-m", kModel.string(), "--prompts", prompts_.string(), "-n", "8", "-o",
                             traces.string(), "--prompts-per-file", "2"},
                            work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(traces / "trace_00000.ctrace"));
  EXPECT_TRUE(fs::exists(traces / "trace_00001.ctrace"));
  // A rerun resumes: nothing is traced again.
  r = run_chronos({"trace", "-m", kModel.string(), "--prompts", prompts_.string(), "-n", "8", "-o", traces.string(),
                   "--prompts-per-file", "2"},
                  work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("2 files already present"), std::string::npos) << r.err;

  // A folder of the user's that happens to be named PACK.tmp is not the packer's to remove.
  fs::create_directories(pack.string() + ".tmp");
  std::ofstream(pack.string() + ".tmp/keep.txt") << "mine";
  r = run_chronos({"pack", "-m", kModel.string(), "--traces", traces.string(), "-o", pack.string()}, work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* f : {"dense.safetensors", "cluster_manifest.json", "config.json", "tokenizer.json"})
    EXPECT_TRUE(fs::exists(pack / f)) << f;
  EXPECT_EQ(testing::slurp(pack.string() + ".tmp/keep.txt"), "mine");
  for (const auto& entry : fs::directory_iterator(work_))  // no temporary folder left behind
    EXPECT_NE(entry.path().filename().string().rfind(".pack.", 0), 0u) << entry.path();

  const std::string prompt = "The river keeps its own time, and the";
  const RunResult from_checkpoint =
      run_chronos({"generate", "-m", kModel.string(), "-p", prompt, "-n", "24", "--ignore-eos"}, work_);
  const RunResult from_pack = run_chronos(
      {"generate", "-m", pack.string(), "-p", prompt, "-n", "24", "--ignore-eos", "--expert-cache", "30%"}, work_);
  ASSERT_EQ(from_pack.exit_code, 0) << from_pack.err;
  EXPECT_EQ(from_pack.out, from_checkpoint.out);

  const auto json = work_ / "bench.json", svg = work_ / "bench.svg";
  r = run_chronos({"bench", "-m", pack.string(), "--prompts", prompts_.string(), "-n", "8", "--expert-cache", "50%,25%",
                   "--on-miss", "wait,fallback", "--json", json.string(), "--svg", svg.string()},
                  work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = nlohmann::json::parse(testing::slurp(json));
  ASSERT_EQ(rows.size(), 5u);  // all-resident + 2 budgets x 2 policies
  for (const auto& row : rows) {
    if (row["on_miss"] == "wait") {
      EXPECT_EQ(row["greedy_agreement"], 1.0) << row.dump();
      EXPECT_LE(row["peak_cache_bytes"].get<int64_t>(), row["budget_bytes"].get<int64_t>());
    } else {
      EXPECT_EQ(row["stall_seconds"], 0.0);
    }
  }
  // The plot: bar panels, then quality against speed with one point per row and one legend entry
  // per budget (and the resident run).
  const std::string plot = testing::slurp(svg);
  EXPECT_NE(plot.find("<svg"), std::string::npos);
  EXPECT_NE(plot.find("quality against speed"), std::string::npos);
  size_t circles = 0;
  for (size_t at = plot.find("<circle"); at != std::string::npos; at = plot.find("<circle", at + 1)) ++circles;
  EXPECT_EQ(circles, rows.size() + 3) << plot;  // 5 points, legend: all resident, cache 50%, cache 25%
  EXPECT_NE(plot.find(">cache 25%<"), std::string::npos);

  r = run_chronos({"inspect", pack.string()}, work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("clusters"), std::string::npos) << r.out;
}

// The reliability report's reproduction: the bundled model packed, a prefetch policy and a budget of
// one or a few slots aborted with "release of expert (l, e) that is not in the cache" in most runs
// (a slot evicted while being acquired). Every wait-mode row must now match the resident run.
TEST_F(CliStorage, TinyBudgetsWithPrefetchMatchTheResidentRun) {
  const fs::path demo = fs::path(CHRONOS_SOURCE_DIR) / "models" / "chronos-demo";
  const auto pack = work_ / "pack";
  RunResult r = run_chronos({"pack", "-m", demo.string(), "--cluster", "none", "-o", pack.string()}, work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ofstream(prompts_) << R"({"id": "debian", "prompt": "The history of the Debian project began when"})"
                             "\n"
                          << R"j({"id": "code", "prompt": "static int parse_args(int argc, char **argv)"})j"
                             "\n";
  const auto json = work_ / "tiny.json";
  // 1% of the expert bytes is one slot (192 experts of ~190 KiB); 5% is nine.
  r = run_chronos({"bench", "-m", pack.string(), "--prompts", prompts_.string(), "-n", "64", "--expert-cache", "1%,5%",
                   "--prefetch", "lru", "--eviction", "lru,lru-freq", "--json", json.string()},
                  work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = nlohmann::json::parse(testing::slurp(json));
  ASSERT_EQ(rows.size(), 5u);  // all-resident + 2 budgets x 2 eviction policies
  for (const auto& row : rows) {
    if (row["all_resident"]) continue;
    EXPECT_EQ(row["tokens_identical_to_exact"], true) << row.dump();
    EXPECT_LE(row["peak_cache_bytes"].get<int64_t>(), row["budget_bytes"].get<int64_t>());
  }
}

TEST_F(CliStorage, BadInputIsOneLine) {
  const auto pack = work_ / "pack";
  RunResult r = run_chronos({"pack", "-m", kModel.string(), "-o", pack.string()}, work_);  // leiden without traces
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--traces"), std::string::npos) << r.err;
  r = run_chronos({"pack", "-m", kModel.string(), "--cluster", "none", "-o", pack.string()}, work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_chronos({"pack", "-m", kModel.string(), "--cluster", "none", "-o", pack.string()}, work_);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("already exists"), std::string::npos) << r.err;
  r = run_chronos({"generate", "-m", pack.string(), "-p", "hi", "--expert-cache", "0.001%"}, work_);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("smaller than one expert"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--expert-cache 0.001%"), std::string::npos) << r.err;
  r = run_chronos({"generate", "-m", pack.string(), "-p", "hi", "--expert-cache", "lots"}, work_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--expert-cache"), std::string::npos) << r.err;
  r = run_chronos({"generate", "-m", pack.string(), "-p", "hi", "--on-miss", "sometimes"}, work_);
  EXPECT_EQ(r.exit_code, 2);
  r = run_chronos({"generate", "-m", kModel.string(), "-p", "hi", "--expert-cache", "50%"}, work_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("pack folder"), std::string::npos) << r.err;
  r = run_chronos({"bench", "-m", kModel.string(), "--prompts", prompts_.string()}, work_);
  EXPECT_EQ(r.exit_code, 1);
  r = run_chronos(
      {"trace", "-m", kModel.string(), "--prompts", (work_ / "none.jsonl").string(), "-o", (work_ / "t").string()},
      work_);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("none.jsonl"), std::string::npos) << r.err;
  for (const RunResult* x : {&r}) EXPECT_EQ(x->err_lines().size(), 1u) << x->err;
}

// The predict pipeline as a user runs it: traces, a pack clustered on them, predictors trained on
// them into the pack, then generation that prefetches by prediction at a quarter of the experts.
// Wait mode is exact: the text is the resident model's.
TEST_F(CliStorage, TracePackTrainPredictorsGenerateWithPredictMatchesTheResidentRun) {
  const auto traces = work_ / "traces", pack = work_ / "pack";
  RunResult r = run_chronos(
      {"trace", "-m", kModel.string(), "--prompts", prompts_.string(), "-n", "16", "-o", traces.string()}, work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_chronos({"pack", "-m", kModel.string(), "--traces", traces.string(), "-o", pack.string()}, work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_chronos({"train-predictors", "--traces", traces.string(), "-o", pack.string(), "--epochs", "2", "--rank",
                   "16", "--intent-hidden", "16", "--intent-epochs", "4", "-t", "1"},
                  work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(pack / "predictors.safetensors"));
  EXPECT_TRUE(fs::exists(pack / "predictors.json"));

  const std::string prompt = "The river keeps its own time, and the";
  const RunResult resident =
      run_chronos({"generate", "-m", kModel.string(), "-p", prompt, "-n", "32", "--ignore-eos"}, work_);
  ASSERT_EQ(resident.exit_code, 0) << resident.err;
  const auto stats = work_ / "stats.json";
  const RunResult predicted =
      run_chronos({"generate", "-m", pack.string(), "-p", prompt, "-n", "32", "--ignore-eos", "--prefetch", "predict",
                   "--expert-cache", "25%", "--stats-json", stats.string()},
                  work_);
  ASSERT_EQ(predicted.exit_code, 0) << predicted.err;
  EXPECT_FALSE(resident.out.empty());
  EXPECT_EQ(predicted.out, resident.out);
  const auto experts = nlohmann::json::parse(testing::slurp(stats))["experts"];
  EXPECT_LE(experts["peak_cache_bytes"].get<int64_t>(), experts["budget_bytes"].get<int64_t>());
  EXPECT_GT(experts["misses"].get<int64_t>(), 0) << "a quarter of the experts cannot hold the generation";
  EXPECT_EQ(experts["fallbacks"].get<int64_t>(), 0);
}

// --expert-cache auto sizes the cache from the free memory and says how; the tiny pack fits whole.
TEST_F(CliStorage, ExpertCacheAutoSaysWhatItChose) {
  const auto pack = work_ / "pack";
  RunResult r = run_chronos({"pack", "-m", kModel.string(), "-o", pack.string(), "--cluster", "none"}, work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_chronos({"generate", "-m", pack.string(), "-p", "The river", "-n", "4", "--expert-cache", "auto"}, work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("--expert-cache auto: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("of experts (100%)"), std::string::npos) << r.err;
  const RunResult resident =
      run_chronos({"generate", "-m", pack.string(), "-p", "The river", "-n", "4", "--expert-cache", "100%"}, work_);
  EXPECT_EQ(r.out, resident.out);
  testing::expect_clean_failure(
      run_chronos({"generate", "-m", kModel.string(), "-p", "x", "--expert-cache", "auto"}, work_), 2,
      "need a pack folder");
}

}  // namespace
}  // namespace chronos
