// Bad input of every kind: one line on stderr naming the problem, a non-zero exit, no crash,
// nothing on stdout.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "chronos/safetensors.h"
#include "cli/cli_runner.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;
using testing::run_chronos;
using testing::RunResult;

const fs::path kFixture = fs::path(CHRONOS_TEST_DATA_DIR) / "models" / "qwen2_moe-f32";

class CliErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = fs::temp_directory_path() / ("chronos_cli_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(work_);
    fs::create_directories(work_);
    model_ = work_ / "model";
    fs::copy(kFixture, model_, fs::copy_options::recursive);
  }
  void TearDown() override { fs::remove_all(work_); }

  // Expects a clean failure: exit code `code`, exactly one stderr line containing `needle`.
  void expect_clean_failure(const RunResult& r, int code, const std::string& needle) {
    EXPECT_FALSE(r.signalled) << r.err;
    EXPECT_EQ(r.exit_code, code) << r.err;
    const auto lines = r.err_lines();
    ASSERT_EQ(lines.size(), 1u) << "stderr:\n" << r.err;
    EXPECT_NE(lines[0].find(needle), std::string::npos) << lines[0];
    EXPECT_TRUE(r.out.empty()) << r.out;
  }

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
  edit_config([](nlohmann::json& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; });
  expect_clean_failure(generate({"-p", "hi"}), 1, "yarn");
}

TEST_F(CliErrors, ConfigNotJson) {
  std::ofstream(model_ / "config.json") << "{ not json";
  expect_clean_failure(generate({"-p", "hi"}), 1, "config.json");
}

TEST_F(CliErrors, PromptLongerThanContext) {
  expect_clean_failure(generate({"-p", "The river keeps its own time, and the mill wheel turns.", "--ctx-size", "8"}), 1,
                       "context");
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
}

TEST_F(CliErrors, StatsJsonNotLeftHalfWritten) {
  const auto stats = work_ / "no_such_dir" / "stats.json";
  const RunResult r = generate({"-p", "hi", "--stats-json", stats.string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_FALSE(fs::exists(stats));
  EXPECT_FALSE(fs::exists(stats.string() + ".tmp"));
}

}  // namespace
}  // namespace chronos
