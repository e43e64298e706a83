// GGUF files as a user runs them: generate from the file, pack it and run the pack, inspect it,
// and the errors of a damaged file; and low-bit misses from the command line.
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "chronos/block_types.h"
#include "cli/cli_runner.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;
using testing::run_chronos;
using testing::RunResult;

const fs::path kFixtures = fs::path(CHRONOS_TEST_DATA_DIR);

class GgufCli : public ::testing::Test {
 protected:
  void SetUp() override { work_ = testing::fresh_work_dir("chronos_cli_gguf"); }
  void TearDown() override { fs::remove_all(work_); }

  std::string greedy(const fs::path& model, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"generate", "-m", model.string(), "-p", "The river keeps its own time",
                                     "-n",       "12", "--temp",       "0",  "--ignore-eos"};
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
  for (const char* name :
       {"mixtral-f32", "qwen2_moe-q8_0", "olmoe-q4_k", "qwen3_moe-f16", "mixtral-q4_k_m", "mixed-types"}) {
    const fs::path file = kFixtures / "gguf" / (std::string(name) + ".gguf");
    const fs::path pack = work_ / name;
    const RunResult packed =
        run_chronos({"pack", "-m", file.string(), "-o", pack.string(), "--cluster", "none"}, work_);
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
  // What it needs resident and what --expert-cache auto would give a pack of it here.
  EXPECT_NE(r.out.find("memory here "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--expert-cache auto: "), std::string::npos) << r.out;  // the file streams in place
  const RunResult json = run_chronos({"inspect", (kFixtures / "gguf" / "olmoe-q4_k.gguf").string(), "--json"}, work_);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_NE(json.out.find("\"expert_cache_auto_bytes\""), std::string::npos) << json.out;
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

// A file with a matrix in each of 16 block types: inspect counts the file's tensors by stored
// type, in text and in JSON.
TEST_F(GgufCli, InspectCountsTheTensorsOfEachStoredType) {
  const std::string file = (kFixtures / "gguf" / "mixed-types.gguf").string();
  const RunResult r = run_chronos({"inspect", file}, work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("GGUF tensors     23: F32 7, Q4_1 1, Q5_1 1, Q8_0 1, Q4_K 1, Q5_K 1, Q6_K 1, IQ2_XXS 1, "
                       "IQ2_XS 1, IQ3_XXS 1, IQ1_S 1, IQ4_NL 1, IQ3_S 1, IQ2_S 1, IQ4_XS 1, IQ1_M 1, MXFP4 1\n"),
            std::string::npos)
      << r.out;
  const RunResult json = run_chronos({"inspect", file, "--json"}, work_);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_NE(json.out.find("\"type\": \"IQ2_XXS\""), std::string::npos) << json.out;
  // A folder has no GGUF tensors to count.
  const RunResult folder = run_chronos({"inspect", (kFixtures / "models" / "mixtral-f32").string()}, work_);
  ASSERT_EQ(folder.exit_code, 0) << folder.err;
  EXPECT_EQ(folder.out.find("GGUF tensors"), std::string::npos) << folder.out;
}

// A tensor whose ggml type is unknown (99), or known to ggml but not read by Chronos (TQ1_0, NVFP4),
// stops every command with one line naming the tensor and the type, exit 1.
TEST_F(GgufCli, UnsupportedTensorTypeIsOneLineNamingTheTensorAndTheType) {
  const std::string source = testing::slurp(kFixtures / "gguf" / "mixed-types.gguf");
  const std::string victim = "blk.1.ffn_gate_exps.weight";  // 3 dimensions: the type follows 3 u64 dims
  std::string encoded(8, '\0');
  const uint64_t length = victim.size();
  std::memcpy(encoded.data(), &length, 8);
  encoded += victim;
  const size_t name_at = source.find(encoded);
  ASSERT_NE(name_at, std::string::npos);
  const size_t type_at = name_at + encoded.size() + 4 + 3 * 8;
  uint32_t stored = 0;
  std::memcpy(&stored, source.data() + type_at, 4);
  ASSERT_EQ(stored, 22u) << "IQ2_S";
  for (const auto& [id, name] : {std::pair<uint32_t, std::string>{99, "type 99"}, {34, "TQ1_0"}, {40, "NVFP4"}}) {
    std::string bytes = source;
    std::memcpy(bytes.data() + type_at, &id, 4);
    const fs::path file = work_ / "retyped.gguf";
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
    for (const char* command : {"inspect", "generate", "pack"}) {
      std::vector<std::string> args = {command};
      if (std::string(command) != "inspect") args.push_back("-m");
      args.push_back(file.string());
      if (std::string(command) == "pack") args.insert(args.end(), {"-o", (work_ / "p").string(), "--cluster", "none"});
      if (std::string(command) == "generate") args.insert(args.end(), {"-p", "hi"});
      const RunResult r = run_chronos(args, work_);
      EXPECT_EQ(r.exit_code, 1) << name << " " << command << ": " << r.err;
      ASSERT_EQ(r.err_lines().size(), 1u) << name << " " << command << ": " << r.err;
      EXPECT_NE(r.err.find("tensor " + victim + ": ggml type " + name + " is not supported (supported: "),
                std::string::npos)
          << r.err;
      EXPECT_NE(r.err.find("IQ2_S"), std::string::npos) << "the list of supported types: " << r.err;
      EXPECT_FALSE(fs::exists(work_ / "p")) << "no half-written pack";
    }
  }
}

// pack's help lists the types Chronos quantizes to, from the block-type table, and no read-only one;
// a low-bit copy may be any of them, made from a file of mixed types, and a read-only type is refused.
TEST_F(GgufCli, PackListsItsTypesAndTakesLowbitCopiesOfMixedTypes) {
  const RunResult help = run_chronos({"pack", "--help"}, work_);
  ASSERT_EQ(help.exit_code, 0) << help.err;
  for (const BlockType& type : kBlockTypes) {
    std::string lower(type.name);
    for (char& ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    EXPECT_EQ(help.out.find(lower + ",") != std::string::npos || help.out.find(lower + " ") != std::string::npos ||
                  help.out.find(lower + ")") != std::string::npos,
              type.quantizer)
        << lower << ": " << help.out;
  }
  const std::string file = (kFixtures / "gguf" / "mixed-types.gguf").string();
  const fs::path pack = work_ / "pack";
  const RunResult packed =
      run_chronos({"pack", "-m", file, "-o", pack.string(), "--cluster", "none", "--lowbit-type", "iq4_xs"}, work_);
  ASSERT_EQ(packed.exit_code, 0) << packed.err;
  EXPECT_NE(packed.err.find("low-bit copies"), std::string::npos) << packed.err;
  EXPECT_NE(testing::slurp(pack / "cluster_manifest.json").find("\"IQ4_XS\""), std::string::npos);
  const RunResult refused = run_chronos(
      {"pack", "-m", file, "-o", (work_ / "p").string(), "--cluster", "none", "--lowbit-type", "iq1_m"}, work_);
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("--lowbit-type: Chronos reads IQ1_M but does not quantize to it"), std::string::npos)
      << refused.err;
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
  r = run_chronos(
      {"eval-predictors", "-m", pack.string(), "--traces", traces.string(), "--router-model", file.string()}, work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string expected = greedy(file);
  EXPECT_EQ(greedy(pack, {"--expert-cache", "25%", "--prefetch", "predict"}), expected);
}

// A .gguf file streams its experts in place, with a pack's flags: the same text and the same traces at
// a quarter of its expert bytes under each prefetch mode (predictors from a sidecar folder: trace the file, then
// train-predictors -o DIR, then --predictors DIR), the same perplexity, and bench runs on it.
TEST_F(GgufCli, GgufFileStreamsInPlaceWithAPacksFlags) {
  const fs::path file = kFixtures / "gguf" / "mixtral-q4_k_m.gguf";
  const std::string expected = greedy(file);
  for (const char* prefetch : {"none", "lru"}) {
    const std::vector<std::string> args = {"generate",
                                           "-m",
                                           file.string(),
                                           "-p",
                                           "The river keeps its own time",
                                           "-n",
                                           "12",
                                           "--temp",
                                           "0",
                                           "--ignore-eos",
                                           "--expert-cache",
                                           "25%",
                                           "--prefetch",
                                           prefetch};
    const RunResult r = run_chronos(args, work_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, expected) << prefetch;
    EXPECT_NE(r.err.find("chronos: experts: "), std::string::npos) << r.err;  // it streamed
  }
  const RunResult fitted = run_chronos({"generate", "-m", file.string(), "-p", "The river keeps its own time", "-n",
                                        "12", "--temp", "0", "--ignore-eos", "--expert-cache", "auto"},
                                       work_);
  ASSERT_EQ(fitted.exit_code, 0) << fitted.err;
  EXPECT_EQ(fitted.out, expected);
  EXPECT_NE(fitted.err.find("chronos: --expert-cache auto: "), std::string::npos) << fitted.err;  // what it chose
  EXPECT_NE(fitted.err.find("chronos: experts: "), std::string::npos) << fitted.err;
  // Low-bit copies in a folder of their own, for --on-miss lowbit on the file in place.
  const fs::path copies = work_ / "copies";
  RunResult made = run_chronos(
      {"pack", "-m", file.string(), "--lowbit-type", "q4_0", "--lowbit-only", "-o", copies.string()}, work_);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_NE(made.err.find("--lowbit " + copies.string()), std::string::npos) << made.err;
  made = run_chronos({"generate", "-m", file.string(), "-p", "hi", "-n", "4", "--expert-cache", "200KiB", "--on-miss",
                      "lowbit", "--lowbit", copies.string()},
                     work_);
  EXPECT_EQ(made.exit_code, 0) << made.err;
  // A bench sweep of wait and lowbit: the folder is for its lowbit runs.
  const fs::path bench_prompts = work_ / "bench_prompts.jsonl";
  std::ofstream(bench_prompts) << R"({"id": "a", "prompt": "The river keeps its own time"})"
                               << "\n";
  made = run_chronos(
      {"bench", "-m", file.string(), "--prompts", bench_prompts.string(), "-n", "4", "--limit", "1", "--expert-cache",
       "200KiB", "--on-miss", "wait,lowbit", "--lowbit", copies.string(), "--no-baseline"},
      work_);
  EXPECT_EQ(made.exit_code, 0) << made.err;
  EXPECT_NE(made.err.find("cache 200KiB lowbit"), std::string::npos) << made.err;  // the table is on stderr
  made = run_chronos({"generate", "-m", file.string(), "-p", "hi", "--lowbit", copies.string()}, work_);
  EXPECT_EQ(made.exit_code, 2) << made.err;
  EXPECT_NE(made.err.find("--lowbit applies to --on-miss lowbit"), std::string::npos) << made.err;
  EXPECT_EQ(run_chronos({"generate", "-m", file.string(), "-p", "hi", "-n", "4", "--expert-cache", "25%", "--on-miss",
                         "fallback"},
                        work_)
                .exit_code,
            0);

  const fs::path prompts = work_ / "prompts.jsonl", traces = work_ / "traces", sidecar = work_ / "sidecar";
  std::ofstream(prompts) << "{\"prompt\": \"The river keeps its own time\"}\n{\"prompt\": \"A mill by the river\"}\n";
  RunResult r = run_chronos(
      {"trace", "-m", file.string(), "--prompts", prompts.string(), "-n", "12", "-o", traces.string()}, work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Traced with its experts streamed: the same trace files, byte for byte (wait mode is exact).
  const fs::path streamed_traces = work_ / "streamed_traces";
  r = run_chronos({"trace", "-m", file.string(), "--prompts", prompts.string(), "-n", "12", "-o",
                   streamed_traces.string(), "--expert-cache", "25%"},
                  work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int n_files = 0;
  for (const auto& entry : fs::directory_iterator(traces)) {
    ++n_files;
    EXPECT_EQ(testing::slurp(streamed_traces / entry.path().filename()), testing::slurp(entry.path()))
        << entry.path().filename();
  }
  EXPECT_GT(n_files, 0);
  r = run_chronos({"trace", "-m", file.string(), "--prompts", prompts.string(), "-o", (work_ / "t3").string(),
                   "--expert-cache", "25%", "--on-miss", "fallback"},
                  work_);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  r = run_chronos({"train-predictors", "--traces", traces.string(), "-o", sidecar.string(), "--epochs", "2", "--rank",
                   "16", "--intent-hidden", "16", "--intent-epochs", "4", "-t", "1"},
                  work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(greedy(file, {"--expert-cache", "25%", "--prefetch", "predict", "--predictors", sidecar.string()}),
            expected);
  r = run_chronos({"generate", "-m", file.string(), "-p", "hi", "--predictors", sidecar.string()}, work_);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--predictors applies to --prefetch predict"), std::string::npos) << r.err;
  r = run_chronos({"generate", "-m", file.string(), "-p", "hi", "--prefetch", "predict"}, work_);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("--predictors DIR"), std::string::npos) << r.err;

  std::ofstream(work_ / "text.txt") << "The river keeps its own time, and the mill turns with it. Every spring the "
                                       "water rises and the wheel sings.";
  const auto perplexity = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"perplexity", "-m", file.string(), "-f", (work_ / "text.txt").string(),
                                     "-c",         "16"};
    args.insert(args.end(), extra.begin(), extra.end());
    const RunResult p = run_chronos(args, work_);
    EXPECT_EQ(p.exit_code, 0) << p.err;
    return p.out;
  };
  const std::string resident = perplexity({}), streamed = perplexity({"--expert-cache", "25%"});
  EXPECT_EQ(streamed.substr(0, streamed.find('\n')), resident.substr(0, resident.find('\n')));  // the same figure
  EXPECT_NE(streamed.find("experts: "), std::string::npos) << streamed;
  r = run_chronos({"bench", "-m", file.string(), "--prompts", prompts.string(), "-n", "4", "--expert-cache", "25%"},
                  work_);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("cache 25% wait"), std::string::npos) << r.err;
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
  const RunResult packed = run_chronos(
      {"pack", "-m", model.string(), "-o", with_copies.string(), "--cluster", "none", "--lowbit-type", "q8_0"}, work_);
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

  const RunResult no_copies =
      run_chronos({"generate", "-m", plain.string(), "-p", "The river", "-n", "4", "--on-miss", "lowbit"}, work_);
  EXPECT_EQ(no_copies.exit_code, 1) << no_copies.err;
  EXPECT_EQ(no_copies.err_lines().size(), 1u) << no_copies.err;
  EXPECT_NE(no_copies.err.find("--lowbit-type"), std::string::npos) << no_copies.err;

  const RunResult tiny = run_chronos({"generate", "-m", with_copies.string(), "-p", "The river", "-n", "4",
                                      "--expert-cache", "1%", "--on-miss", "lowbit"},
                                     work_);
  EXPECT_EQ(tiny.exit_code, 1) << tiny.err;
  EXPECT_NE(tiny.err.find("--expert-cache"), std::string::npos) << tiny.err;
  EXPECT_NE(tiny.err.find("low-bit copies"), std::string::npos) << tiny.err;

  const RunResult wait_rule = run_chronos({"generate", "-m", with_copies.string(), "-p", "The river", "-n", "4",
                                           "--on-miss", "wait", "--wait-above", "0.3"},
                                          work_);
  EXPECT_EQ(wait_rule.exit_code, 2) << wait_rule.err;
  EXPECT_NE(wait_rule.err.find("--wait-above"), std::string::npos) << wait_rule.err;
}

}  // namespace
}  // namespace chronos
