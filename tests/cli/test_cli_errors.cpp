// Bad input of every kind: one line on stderr naming the problem, a non-zero exit, no crash,
// nothing on stdout.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>

#include "chronos/safetensors.h"
#include "cli/cli_runner.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;
using testing::expect_clean_failure;
using testing::run_chronos;
using testing::RunResult;

const fs::path kFixture = fs::path(CHRONOS_TEST_DATA_DIR) / "models" / "qwen2_moe-f32";

class CliErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = testing::fresh_work_dir("chronos_cli");
    model_ = work_ / "model";
    fs::copy(kFixture, model_, fs::copy_options::recursive);
  }
  void TearDown() override { fs::remove_all(work_); }

  RunResult generate(std::vector<std::string> extra, const std::string& stdin_file = "") {
    std::vector<std::string> args = {"generate", "-m", model_.string(), "-n", "4"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_chronos(args, work_, stdin_file);
  }

  // Rewrites model.safetensors through `edit`, which may change the tensor list.
  void rewrite_weights(const std::function<void(std::vector<TensorToWrite>&)>& edit) {
    const auto path = model_ / "model.safetensors";
    std::vector<std::vector<std::byte>> storage;
    std::vector<TensorToWrite> tensors;
    {
      auto file = SafetensorsFile::open(path);
      for (const TensorInfo& t : file->tensors()) {
        storage.emplace_back(t.data, t.data + t.n_bytes);
        tensors.push_back({t.name, t.dtype, t.shape, {}});
      }
    }
    for (size_t i = 0; i < tensors.size(); ++i) tensors[i].bytes = storage[i];
    edit(tensors);
    write_safetensors(path, tensors);
  }

  void edit_config(const std::function<void(nlohmann::json&)>& edit) {
    const auto path = model_ / "config.json";
    nlohmann::json j = nlohmann::json::parse(testing::slurp(path));
    edit(j);
    std::ofstream(path) << j.dump(2);
  }

  fs::path work_, model_;
};

TEST_F(CliErrors, MissingModelFolder) {
  expect_clean_failure(run_chronos({"generate", "-m", (work_ / "nope").string(), "-p", "hi"}, work_), 1, "nope");
}

TEST_F(CliErrors, MissingConfig) {
  fs::remove(model_ / "config.json");
  expect_clean_failure(generate({"-p", "hi"}), 1, "config.json");
}

TEST_F(CliErrors, MissingWeights) {
  fs::remove(model_ / "model.safetensors");
  expect_clean_failure(generate({"-p", "hi"}), 1, "model.safetensors");
}

TEST_F(CliErrors, TruncatedSafetensors) {
  const auto path = model_ / "model.safetensors";
  fs::resize_file(path, fs::file_size(path) / 2);
  expect_clean_failure(generate({"-p", "hi"}), 1, "model.safetensors");
}

TEST_F(CliErrors, CorruptHeader) {
  const auto path = model_ / "model.safetensors";
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(12);
  f.write("#garbage!", 9);
  f.close();
  expect_clean_failure(generate({"-p", "hi"}), 1, "model.safetensors");
}

TEST_F(CliErrors, TensorMissing) {
  rewrite_weights([](std::vector<TensorToWrite>& t) {
    std::erase_if(t, [](const TensorToWrite& x) { return x.name == "model.layers.1.self_attn.k_proj.weight"; });
  });
  expect_clean_failure(generate({"-p", "hi"}), 1, "model.layers.1.self_attn.k_proj.weight");
}

TEST_F(CliErrors, TensorWrongShape) {
  rewrite_weights([](std::vector<TensorToWrite>& t) {
    for (auto& x : t)
      if (x.name == "model.norm.weight") {
        x.shape = {x.shape[0] / 2};
        x.bytes = x.bytes.first(x.bytes.size() / 2);
      }
  });
  expect_clean_failure(generate({"-p", "hi"}), 1, "model.norm.weight");
}

TEST_F(CliErrors, TensorWrongDtype) {
  rewrite_weights([](std::vector<TensorToWrite>& t) {
    for (auto& x : t)
      if (x.name == "model.layers.0.self_attn.q_proj.weight") x.dtype = DType::kI32;
  });
  expect_clean_failure(generate({"-p", "hi"}), 1, "I32");
}

TEST_F(CliErrors, UnknownArchitecture) {
  edit_config([](nlohmann::json& j) { j["model_type"] = "gpt2"; });
  expect_clean_failure(generate({"-p", "hi"}), 1, "gpt2");
}

TEST_F(CliErrors, UnsupportedRopeScaling) {
  edit_config([](nlohmann::json& j) { j["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 4.0}}; });
  expect_clean_failure(generate({"-p", "hi"}), 1, "longrope");
}

TEST_F(CliErrors, ConfigNotJson) {
  std::ofstream(model_ / "config.json") << "{ not json";
  expect_clean_failure(generate({"-p", "hi"}), 1, "config.json");
}

TEST_F(CliErrors, PromptLongerThanContext) {
  expect_clean_failure(generate({"-p", "The river keeps its own time, and the mill wheel turns.", "--ctx-size", "8"}),
                       1, "context");
}

TEST_F(CliErrors, InvalidUtf8Prompt) {
  const auto prompt = work_ / "prompt.txt";
  std::ofstream(prompt, std::ios::binary) << "abc\xff\xfe def";
  expect_clean_failure(generate({"-f", prompt.string()}), 1, "UTF-8");
}

TEST_F(CliErrors, InvalidUtf8OnStdin) {
  const auto prompt = work_ / "prompt.txt";
  std::ofstream(prompt, std::ios::binary) << "\xc3\x28";
  expect_clean_failure(generate({}, prompt.string()), 1, "UTF-8");
}

TEST_F(CliErrors, MissingPromptFile) {
  expect_clean_failure(generate({"-f", (work_ / "none.txt").string()}), 1, "none.txt");
}

TEST_F(CliErrors, BadFlagValues) {
  expect_clean_failure(generate({"-p", "hi", "--temp", "-1"}), 2, "--temp");
  expect_clean_failure(generate({"-p", "hi", "--top-p", "2"}), 2, "--top-p");
  expect_clean_failure(generate({"-p", "hi", "-n", "-5"}), 2, "-n");
  expect_clean_failure(generate({"-p", "hi", "--threads", "abc"}), 2, "threads");
  expect_clean_failure(generate({"-p", "hi", "--bogus"}), 2, "bogus");
  expect_clean_failure(generate({"-p", "hi", "--ctx-size", "100000"}), 2, "--ctx-size");
  expect_clean_failure(run_chronos({"frobnicate"}, work_), 2, "frobnicate");
  // A type Chronos reads but does not write (the IQ grid types) is refused with the choices it has.
  expect_clean_failure(
      run_chronos({"pack", "-m", model_.string(), "-o", (work_ / "iq_pack").string(), "--expert-type", "iq2_xxs"},
                  work_),
      2, "reads IQ2_XXS but does not quantize to it");
}

TEST_F(CliErrors, NumericFlagsAreBounded) {
  // Each of these used to be accepted: out of memory, an overflow, a crawl, a silent wrap-around.
  // generate() passes -n itself; -n given twice would fail for another reason.
  for (const char* n : {"99999999999", "9223372036854775807"}) {
    const RunResult r = run_chronos({"generate", "-m", model_.string(), "-p", "hi", "-n", n}, work_);
    expect_clean_failure(r, 2, "n-predict");
    EXPECT_NE(r.err.find("not in range"), std::string::npos) << r.err;
  }
  expect_clean_failure(generate({"-p", "hi", "-b", "1000000000"}), 2, "batch-size");
  expect_clean_failure(generate({"-p", "hi", "-t", "10000"}), 2, "threads");
  expect_clean_failure(generate({"-p", "hi", "--seed", "-1"}), 2, "seed");
  expect_clean_failure(generate({"-p", "hi", "--seed", "1e23"}), 2, "seed");
  expect_clean_failure(generate({"-p", "hi", "-c", "0"}), 2, "ctx-size");
  expect_clean_failure(generate({"-p", "hi", "--io-latency-ms", "nan"}), 2, "io-latency-ms");
  expect_clean_failure(generate({"-p", "hi", "--stop", ""}), 2, "--stop");
  const auto prompts = work_ / "prompts.jsonl";
  std::ofstream(prompts) << "{\"prompt\": \"The river\"}\n";
  auto bench = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"bench", "-m", model_.string(), "--prompts", prompts.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_chronos(args, work_);
  };
  expect_clean_failure(bench({"-c", "0"}), 2, "ctx-size");
  expect_clean_failure(bench({"-c", "-1"}), 2, "ctx-size");
  expect_clean_failure(bench({"-t", "-3"}), 2, "threads");
  expect_clean_failure(bench({"--expert-cache", ","}), 2, "--expert-cache");
  expect_clean_failure(bench({"--io-latency-ms", "0,inf"}), 2, "--io-latency-ms");
}

// The streaming flags are one group with one parser each: generate and bench accept and refuse
// the same values with the same messages, before any model is loaded.
TEST_F(CliErrors, StreamingFlagsAreParsedAlikeEverywhere) {
  const auto prompts = work_ / "prompts.jsonl";
  std::ofstream(prompts) << "{\"prompt\": \"The river\"}\n";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--expert-cache", "lots"}, "--expert-cache: 'lots' is not a size"},
      {{"--expert-cache", "150%"}, "--expert-cache: a percentage must be in (0, 100]"},
      {{"--on-miss", "sometimes"}, "--on-miss: 'sometimes' is not wait, lowbit or fallback"},
      {{"--prefetch", "psychic"}, "--prefetch: 'psychic' is not none, lru or predict"},
      {{"--eviction", "random"}, "--eviction: 'random' is not lru, lru-freq, per-layer or next-use"},
      {{"--io-latency-ms", "-1"}, "--io-latency-ms: value -1 not in range"},
      {{"--prefetch", "predict", "--prefetch-min-score", "2"}, "--prefetch-min-score: value 2 not in range"},
      {{"--prefetch", "predict", "--prefetch-cap", "lots"}, "--prefetch-cap: 'lots' is not a size"},
      {{"--prefetch", "predict", "--intent-share", "1.5"}, "--intent-share: value 1.5 not in range"},
      {{"--prefetch-cap", "64MiB"},
       "--prefetch-min-score, --prefetch-cap and --intent-share apply to --prefetch predict"},
      {{"--intent-share", "0"}, "--prefetch-min-score, --prefetch-cap and --intent-share apply to --prefetch predict"}};
  for (const auto& [flag, message] : cases) {
    SCOPED_TRACE(flag[0] + " " + flag[1] + (flag.size() > 2 ? " " + flag[2] : ""));
    std::vector<std::string> gen = {"generate", "-m", model_.string(), "-p", "hi"};
    gen.insert(gen.end(), flag.begin(), flag.end());
    expect_clean_failure(run_chronos(gen, work_), 2, message);
    std::vector<std::string> bench = {"bench", "-m", model_.string(), "--prompts", prompts.string()};
    bench.insert(bench.end(), flag.begin(), flag.end());
    expect_clean_failure(run_chronos(bench, work_), 2, message);
  }
  // On a checkpoint (not a pack), any streaming flag is refused by name.
  expect_clean_failure(generate({"-p", "hi", "--eviction", "lru"}), 2, "need a pack folder");
}

TEST_F(CliErrors, PackChecksAndHonestBenchColumns) {
  const auto pack = work_ / "pack";
  RunResult r = run_chronos({"pack", "-m", model_.string(), "--cluster", "none", "-o", pack.string()}, work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto prompts = work_ / "prompts.jsonl";
  std::ofstream(prompts) << "{\"prompt\": \"The river keeps its own time\"}\n";

  // Without a baseline there is nothing to compare with: no agreement, no KL (was 100% and 0).
  const auto json = work_ / "bench.json";
  r = run_chronos({"bench", "-m", pack.string(), "--prompts", prompts.string(), "-n", "4", "--no-baseline",
                   "--expert-cache", "50%", "--on-miss", "fallback", "--json", json.string()},
                  work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = nlohmann::json::parse(testing::slurp(json));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0]["greedy_agreement"].is_null()) << rows[0].dump();
  EXPECT_TRUE(rows[0]["mean_kl"].is_null()) << rows[0].dump();
  bool row_seen = false;  // the table's last two columns (agree%, mean KL) are "-"
  for (const std::string& line : r.err_lines()) {
    if (line.rfind("cache 50% fallback", 0) != 0) continue;
    row_seen = true;
    std::istringstream words(line);
    std::vector<std::string> cells{std::istream_iterator<std::string>(words), {}};
    ASSERT_GE(cells.size(), 2u);
    EXPECT_EQ(cells[cells.size() - 2], "-") << line;
    EXPECT_EQ(cells.back(), "-") << line;
  }
  EXPECT_TRUE(row_seen) << r.err;

  // A pack whose config.json was edited after packing is refused by inspect and generate.
  const std::string config = testing::slurp(pack / "config.json");
  nlohmann::json edited = nlohmann::json::parse(config);
  edited["num_experts_per_tok"] = 3;
  std::ofstream(pack / "config.json") << edited.dump(2);
  expect_clean_failure(run_chronos({"inspect", pack.string()}, work_), 1, "not the one this pack was made with");
  expect_clean_failure(run_chronos({"generate", "-m", pack.string(), "-p", "hi"}, work_), 1,
                       "not the one this pack was made with");
}

// trace used to cut a prompt longer than the context to half the context, silently.
TEST_F(CliErrors, TraceRefusesAPromptThatDoesNotFit) {
  const auto prompts = work_ / "prompts.jsonl";
  std::string words;
  for (int i = 0; i < 64; ++i) words += "the river keeps its own time ";
  std::ofstream(prompts) << "{\"id\": \"short\", \"prompt\": \"The mill\"}\n"
                         << "{\"id\": \"long\", \"prompt\": \"" << words << "\"}\n";
  const auto out = work_ / "traces";
  expect_clean_failure(run_chronos({"trace", "-m", model_.string(), "--prompts", prompts.string(), "-c", "64", "-n",
                                    "4", "-o", out.string()},
                                   work_),
                       1, "prompt 'long' is");
  EXPECT_FALSE(fs::exists(out / "trace_00000.ctrace"));  // refused before anything was traced
}

TEST_F(CliErrors, EmptyPromptInAPromptsFileIsNamed) {
  const auto prompts = work_ / "prompts.jsonl";
  std::ofstream(prompts) << "{\"prompt\": \"The river\"}\n{\"prompt\": \"\"}\n";
  expect_clean_failure(run_chronos({"bench", "-m", model_.string(), "--prompts", prompts.string()}, work_), 1,
                       "prompts.jsonl:2: the prompt is empty");
  std::ofstream(prompts) << "{\"id\": \"x\"}\n";
  expect_clean_failure(run_chronos({"bench", "-m", model_.string(), "--prompts", prompts.string()}, work_), 1,
                       "no \"prompt\"");
}

TEST_F(CliErrors, CraftedConfigNumbersAreNamed) {
  const std::vector<std::pair<std::string, nlohmann::json>> cases = {{"num_hidden_layers", 1000000000},
                                                                     {"num_hidden_layers", -5},
                                                                     {"hidden_size", 9223372036854775807LL},
                                                                     {"partial_rotary_factor", 1e300},
                                                                     {"rope_theta", 1e300},
                                                                     {"eos_token_id", 10000000000LL},
                                                                     {"eos_token_id", -3},
                                                                     {"vocab_size", 4294967296LL}};
  const std::string original = testing::slurp(model_ / "config.json");
  for (const auto& [key, value] : cases) {
    std::ofstream(model_ / "config.json") << original;
    edit_config([&](nlohmann::json& j) { j[key] = value; });
    SCOPED_TRACE(key + " = " + value.dump());
    expect_clean_failure(generate({"-p", "hi"}), 1, key);
  }
}

TEST_F(CliErrors, FoldersWhereFilesBelongAreNamed) {
  expect_clean_failure(generate({"-f", work_.string()}), 1, work_.string());
  fs::remove(model_ / "config.json");
  fs::create_directory(model_ / "config.json");
  expect_clean_failure(generate({"-p", "hi"}), 1, "config.json");
}

// NaN or Inf weights: an error that says where the values first turn non-finite, not garbage text.
TEST_F(CliErrors, NonFiniteWeightsAreAnErrorNamingWhere) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"model.embed_tokens.weight", "token embeddings"},
      {"model.layers.1.self_attn.o_proj.weight", "output of layer 1"},
      {"lm_head.weight", "LM head"}};
  const auto original = work_ / "original.safetensors";
  fs::copy_file(model_ / "model.safetensors", original);
  for (const auto& [tensor, where] : cases) {
    fs::copy_file(original, model_ / "model.safetensors", fs::copy_options::overwrite_existing);
    std::vector<float> nans;
    rewrite_weights([&](std::vector<TensorToWrite>& tensors) {
      for (TensorToWrite& t : tensors) {
        if (t.name != tensor) continue;
        nans.assign(t.bytes.size() / sizeof(float), std::numeric_limits<float>::quiet_NaN());
        t.bytes = std::as_bytes(std::span<const float>(nans));
      }
    });
    SCOPED_TRACE(tensor);
    expect_clean_failure(generate({"-p", "hi"}), 1, where);
  }
}

TEST_F(CliErrors, StatsJsonNotLeftHalfWritten) {
  const auto stats = work_ / "no_such_dir" / "stats.json";
  const RunResult r = generate({"-p", "hi", "--stats-json", stats.string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_FALSE(fs::exists(stats));
  EXPECT_FALSE(fs::exists(stats.parent_path()));
}

TEST_F(CliErrors, AFullStdoutIsAnError) {
  struct stat st {};
  if (::stat("/dev/full", &st) != 0 || !S_ISCHR(st.st_mode)) GTEST_SKIP() << "no /dev/full here";
  const RunResult r =
      run_chronos({"generate", "-m", model_.string(), "-p", "hi", "-n", "4", "--ignore-eos"}, work_, "", "/dev/full");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("standard output"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("No space left"), std::string::npos) << r.err;
}

TEST_F(CliErrors, StatsJsonToADeviceWritesThroughIt) {
  struct stat st {};
  // --stats-json /dev/stdout must not replace the device: a FIFO stands in for it here.
  const auto fifo = work_ / "stats.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int reader = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  const RunResult r =
      run_chronos({"generate", "-m", model_.string(), "-p", "hi", "-n", "2", "--stats-json", fifo.string()}, work_);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::string text(1 << 16, '\0');
  const ssize_t n = ::read(reader, text.data(), text.size());
  ::close(reader);
  ASSERT_GT(n, 0);
  EXPECT_NE(text.find("\"decode_tokens_per_second\""), std::string::npos);
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced by a regular file";
  for (const auto& entry : fs::directory_iterator(work_))
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
}

}  // namespace
}  // namespace chronos
