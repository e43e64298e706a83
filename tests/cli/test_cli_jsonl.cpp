// chronos generate --jsonl: many prompts per model load through the batch generator, one JSON line
// out per line in, in order, each equal to a `chronos generate` of its line alone; bad lines are
// named by file and line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli_runner.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;
using testing::run_chronos;
using testing::RunResult;

const fs::path kFixtures = fs::path(CHRONOS_TEST_DATA_DIR);
const fs::path kModel = kFixtures / "models" / "qwen2_moe-f32";

class Jsonl : public ::testing::Test {
 protected:
  void SetUp() override { work_ = testing::fresh_work_dir("chronos_cli_jsonl"); }
  void TearDown() override { fs::remove_all(work_); }

  fs::path write(const std::string& name, const std::string& text) {
    const fs::path path = work_ / name;
    std::ofstream(path) << text;
    return path;
  }
  static std::vector<nlohmann::json> json_lines(const std::string& out) {
    std::vector<nlohmann::json> lines;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
    return lines;
  }
  // The one error line of a refused run.
  std::string refused(const std::vector<std::string>& args, const std::string& stdin_file = "") {
    const RunResult r = run_chronos(args, work_, stdin_file);
    EXPECT_NE(r.exit_code, 0) << r.out;
    EXPECT_FALSE(r.signalled);
    EXPECT_TRUE(r.out.empty()) << r.out;
    const auto lines = r.err_lines();
    EXPECT_EQ(lines.size(), 1u) << r.err;
    return lines.empty() ? std::string() : lines.back();
  }
  fs::path work_;
};

// Each line with the flags that `generate` takes for the same settings.
struct Line {
  std::string json;
  std::vector<std::string> flags;
};

TEST_F(Jsonl, EveryLineEqualsOneGenerateOfItInInputOrder) {
  const nlohmann::json reference = nlohmann::json::parse(testing::slurp(kModel / "reference.json"))["text_case"];
  const std::string prompt = reference["prompt"];
  const std::vector<Line> lines = {
      {R"({"prompt": )" + nlohmann::json(prompt).dump() + R"(, "max_tokens": 32, "id": "first"})",
       {"-p", prompt, "-n", "32"}},
      {R"({"prompt": "Le moulin tourne toujours", "n_predict": 20, "stop": [" the", "\n"]})",
       {"-p", "Le moulin tourne toujours", "-n", "20", "--stop", " the", "--stop", "\\n"}},
      {R"({"prompt": "int main() {", "temperature": 0.8, "top_k": 20, "top_p": 0.9, "seed": 7, "max_tokens": 16})",
       {"-p", "int main() {", "--temp", "0.8", "--top-k", "20", "--top-p", "0.9", "-s", "7", "-n", "16"}},
      {R"({"messages": [{"role": "user", "content": "Tell me about the old mill."}], "max_tokens": 12, "id": 4})",
       {"--messages", "MESSAGES", "-n", "12"}},
      {R"({"prompt": "A mill by the river", "max_tokens": 0})", {"-p", "A mill by the river", "-n", "0"}},
  };
  std::string text;
  for (const Line& l : lines) text += l.json + "\n\n";  // blank lines are skipped
  const fs::path input = write("prompts.jsonl", text);
  const fs::path messages = write("messages.json", R"([{"role": "user", "content": "Tell me about the old mill."}])");

  // The fixture's generation_config.json samples nothing: greedy unless a line says otherwise.
  const std::vector<std::string> common = {"generate", "-m", kModel.string(), "--ignore-eos"};
  const auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  for (const char* parallel : {"1", "3"}) {
    const RunResult r = run_chronos(with({"--jsonl", input.string(), "--parallel", parallel}), work_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto out = json_lines(r.out);
    ASSERT_EQ(out.size(), lines.size()) << r.out;
    for (size_t i = 0; i < lines.size(); ++i) {
      std::vector<std::string> flags = lines[i].flags;
      for (std::string& f : flags)
        if (f == "MESSAGES") f = messages.string();
      const RunResult alone = run_chronos(with(flags), work_);
      ASSERT_EQ(alone.exit_code, 0) << alone.err;
      EXPECT_EQ(out[i]["index"], i);
      EXPECT_EQ(out[i]["text"], alone.out) << "line " << i << " at --parallel " << parallel;
    }
    // The first line is the reference text case: transformers' greedy text.
    EXPECT_EQ(out[0]["text"], reference["greedy_text"]);
    EXPECT_EQ(out[0]["id"], "first");
    EXPECT_EQ(out[3]["id"], 4);
    EXPECT_FALSE(out[1].contains("id"));
    EXPECT_EQ(out[0]["stop_reason"], "max_tokens");
    EXPECT_EQ(out[0]["generated_tokens"], 32);
    EXPECT_EQ(out[4]["generated_tokens"], 0);
    EXPECT_NE(r.err.find("5 prompts, " + std::string(parallel) + " at once"), std::string::npos) << r.err;
  }
  // From standard input, the same lines.
  const RunResult piped = run_chronos(with({"--jsonl", "-"}), work_, input.string());
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(json_lines(piped.out).size(), lines.size());
}

TEST_F(Jsonl, StreamedFromAGgufFileEqualsTheResidentRuns) {
  const std::string file = (kFixtures / "gguf" / "mixtral-q4_k_m.gguf").string();
  const fs::path input = write("p.jsonl",
                               "{\"prompt\": \"The river keeps its own time\"}\n"
                               "{\"prompt\": \"int main() { return 0; }\", \"max_tokens\": 6}\n"
                               "{\"prompt\": \"Le moulin\"}\n");
  const RunResult r = run_chronos({"generate", "-m", file, "--jsonl", input.string(), "-n", "10", "--ignore-eos",
                                   "--temp", "0", "--expert-cache", "25%", "--on-miss", "wait", "--parallel", "2"},
                                  work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("chronos: experts:"), std::string::npos) << "streamed: " << r.err;
  const auto out = json_lines(r.out);
  ASSERT_EQ(out.size(), 3u);
  const char* prompts[] = {"The river keeps its own time", "int main() { return 0; }", "Le moulin"};
  const char* counts[] = {"10", "6", "10"};
  for (size_t i = 0; i < 3; ++i) {
    const RunResult alone =
        run_chronos({"generate", "-m", file, "-p", prompts[i], "-n", counts[i], "--ignore-eos", "--temp", "0"}, work_);
    ASSERT_EQ(alone.exit_code, 0) << alone.err;
    EXPECT_EQ(out[i]["text"], alone.out) << "line " << i;
  }
}

// `| head -n 1`: the run ends quietly soon after the reader goes, not after every prompt.
TEST_F(Jsonl, AClosedPipeEndsTheRun) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "{\"prompt\": \"The river keeps its own time " + std::to_string(i) + "\"}\n";
  const fs::path input = write("many.jsonl", text), stats = work_ / "stats.json", out = work_ / "out.txt";
  const std::string command = "set -o pipefail; " + testing::shell_quote(CHRONOS_BINARY) + " generate -m " +
                              testing::shell_quote(kModel.string()) + " --jsonl " +
                              testing::shell_quote(input.string()) + " -n 16 --ignore-eos --parallel 2 --stats-json " +
                              testing::shell_quote(stats.string()) + " 2>/dev/null | head -n 1 > " +
                              testing::shell_quote(out.string());
  const int status = std::system(("bash -c " + testing::shell_quote(command)).c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "a closed pipe is not an error";
  EXPECT_EQ(json_lines(testing::slurp(out)).size(), 1u);
  const nlohmann::json j = nlohmann::json::parse(testing::slurp(stats));
  EXPECT_LT(j["requests"].get<int64_t>(), 100) << "the run went on after the reader left";
  EXPECT_LT(j["generated_tokens"].get<int64_t>(), 100 * 16);
}

TEST_F(Jsonl, BadLinesAreNamedByFileAndLine) {
  const std::string model = kModel.string();
  const auto run = [&](const std::string& text) {
    const fs::path input = write("bad.jsonl", text);
    return refused({"generate", "-m", model, "--jsonl", input.string()});
  };
  const std::string ok = "{\"prompt\": \"hello\"}\n";
  EXPECT_NE(run(ok + "{\"prompt\": \"a\",}\n").find("bad.jsonl: line 2: not JSON"), std::string::npos);
  EXPECT_NE(run(ok + ok + "[1, 2]\n").find("line 3: expected a JSON object"), std::string::npos);
  EXPECT_NE(run("{\"prompt\": \"a\", \"temp\": 1}\n").find("line 1: unknown field \"temp\""), std::string::npos);
  EXPECT_NE(run("{\"prompt\": 5}\n").find("line 1: \"prompt\" must be a string"), std::string::npos);
  EXPECT_NE(run("{\"max_tokens\": 5}\n").find("line 1: give exactly one of \"prompt\" and \"messages\""),
            std::string::npos);
  EXPECT_NE(run("{\"prompt\": \"a\", \"messages\": [{\"role\": \"user\", \"content\": \"b\"}]}\n").find("exactly one"),
            std::string::npos);
  EXPECT_NE(run("{\"prompt\": \"a\", \"max_tokens\": -1}\n").find("\"max_tokens\" = -1 is out of range"),
            std::string::npos);
  EXPECT_NE(run("{\"prompt\": \"a\", \"top_p\": 2}\n").find("\"top_p\" = 2 is out of range"), std::string::npos);
  EXPECT_NE(run("{\"prompt\": \"a\", \"stop\": [\"\"]}\n").find("a stop string is empty"), std::string::npos);
  EXPECT_NE(run("{\"prompt\": \"a\", \"seed\": -3}\n").find("\"seed\" must be a non-negative integer"),
            std::string::npos);
  EXPECT_NE(run("\n  \n").find("no prompts"), std::string::npos);
  EXPECT_NE(run(ok + "{\"messages\": [{\"role\": \"user\"}]}\n").find("bad.jsonl: line 2:"), std::string::npos);
  // Too long for the context: named by its line, before anything is generated.
  std::string long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt += "the river ";
  const fs::path input = write("long.jsonl", ok + "{\"prompt\": \"" + long_prompt + "\"}\n");
  EXPECT_NE(refused({"generate", "-m", model, "--jsonl", input.string(), "-c", "32"})
                .find("long.jsonl: line 2: the prompt is"),
            std::string::npos);
  EXPECT_NE(refused({"generate", "-m", model, "--jsonl", (work_ / "missing.jsonl").string()}).find("missing.jsonl"),
            std::string::npos);
  EXPECT_NE(refused({"generate", "-m", model, "--jsonl", input.string(), "--parallel", "0"}).find("--parallel"),
            std::string::npos);
  EXPECT_NE(refused({"generate", "-m", model, "--jsonl", input.string(), "-p", "x"}).find("excludes"),
            std::string::npos);
  EXPECT_NE(refused({"generate", "-m", model, "-p", "x", "--parallel", "2"}).find("--parallel needs --jsonl"),
            std::string::npos);
}

}  // namespace
}  // namespace chronos
