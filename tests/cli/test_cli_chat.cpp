// chronos chat-template, chronos tokenize and generate's chat flags as a user runs them, against
// transformers' renders and tokenizers' ids stored in the fixtures.
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
using ordered_json = nlohmann::ordered_json;

const fs::path kFixtures = fs::path(CHRONOS_TEST_DATA_DIR);
const fs::path kQwenTokenizer = kFixtures / "tokenizers" / "qwen2";
const fs::path kModel = kFixtures / "models" / "qwen2_moe-f32";

class CliChat : public ::testing::Test {
 protected:
  void SetUp() override { work_ = testing::fresh_work_dir("chronos_cli_chat"); }
  void TearDown() override { fs::remove_all(work_); }

  std::string write(const std::string& name, const std::string& text) {
    const fs::path path = work_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }

  fs::path work_;
};

// The model's own template (Qwen2-Instruct's, with its default system prompt), with and without
// the generation prompt, prints exactly transformers' apply_chat_template text.
TEST_F(CliChat, ChatTemplatePrintsTransformersRender) {
  const auto cases = ordered_json::parse(testing::slurp(kQwenTokenizer / "cases.json"));
  int checked = 0;
  for (const ordered_json& chat : cases.at("chats")) {
    const std::string messages = write("messages.json", chat.at("messages").dump());
    std::vector<std::string> args = {"chat-template", "-m", kQwenTokenizer.string(), "--messages", messages};
    if (!chat.at("add_generation_prompt").get<bool>()) args.push_back("--no-generation-prompt");
    const RunResult r = run_chronos(args, work_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, chat.at("rendered").get<std::string>()) << chat.dump();
    ++checked;
  }
  EXPECT_GE(checked, 4);
}

// --chat-template, --tools (from the messages file's own "tools"), --chat-kwarg: Qwen3's template
// rendered with thinking off and with tools, as transformers renders those cases.
TEST_F(CliChat, TemplateToolsAndKwargsFromFlags) {
  const auto fixture = ordered_json::parse(testing::slurp(kFixtures / "chat_templates" / "qwen3.json"));
  const std::string tmpl = (kFixtures / "chat_templates" / "qwen3.jinja").string();
  for (const ordered_json& c : fixture.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    if (name != "thinking_off_gen" && name != "tools_gen") continue;
    std::vector<std::string> args = {"chat-template", "-m", kQwenTokenizer.string(), "--chat-template", tmpl};
    if (c.contains("tools")) {
      args.insert(args.end(),
                  {"--messages", write("request.json",
                                       ordered_json{{"messages", c.at("messages")}, {"tools", c.at("tools")}}.dump())});
    } else {
      args.insert(args.end(), {"--messages", write("messages.json", c.at("messages").dump())});
    }
    for (const auto& [key, value] : c.at("kwargs").items()) args.push_back("--chat-kwarg=" + key + "=" + value.dump());
    const RunResult r = run_chronos(args, work_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, c.at("rendered").get<std::string>()) << name;
  }
}

// --reasoning-effort is gpt-oss's reasoning_effort: its template's system message says it, as
// transformers renders the fixture's case (the current date the template prints is today's here).
TEST_F(CliChat, ReasoningEffortReachesTheHarmonySystemMessage) {
  const auto fixture = ordered_json::parse(testing::slurp(kFixtures / "chat_templates" / "gpt_oss.json"));
  const std::string tmpl = (kFixtures / "chat_templates" / "gpt_oss.jinja").string();
  const std::string tokenizer = (kFixtures / "tokenizers" / "gpt_oss").string();
  int checked = 0;
  for (const ordered_json& c : fixture.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    if (name != "developer_effort_low_gen" && name != "tools_effort_high_gen") continue;
    const std::string request =
        write("request.json",
              ordered_json{{"messages", c.at("messages")}, {"tools", c.value("tools", ordered_json())}}.dump());
    const RunResult r = run_chronos({"chat-template", "-m", tokenizer, "--chat-template", tmpl, "--messages", request,
                                     "--reasoning-effort", c.at("kwargs").at("reasoning_effort").get<std::string>()},
                                    work_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::string want = c.at("rendered").get<std::string>();
    const size_t date = want.find("Current date: ");
    ASSERT_NE(date, std::string::npos);
    ASSERT_GE(r.out.size(), date + 24);
    want.replace(date + 14, 10, r.out.substr(date + 14, 10));
    EXPECT_EQ(r.out, want) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
  const RunResult bad =
      run_chronos({"chat-template", "-m", tokenizer, "--chat-template", tmpl, "--messages",
                   write("m.json", R"([{"role": "user", "content": "x"}])"), "--reasoning-effort", "extreme"},
                  work_);
  expect_clean_failure(bad, 2, "--reasoning-effort");
  const RunResult both = run_chronos({"chat-template", "-m", tokenizer, "--chat-template", tmpl, "--messages",
                                      write("m.json", R"([{"role": "user", "content": "x"}])"), "--reasoning-effort",
                                      "low", "--chat-kwarg", "reasoning_effort=high"},
                                     work_);
  expect_clean_failure(both, 2, "use one");
}

// A --chat-kwarg value that is not JSON is a string; special tokens can be overridden that way.
TEST_F(CliChat, ChatKwargValuesAreJsonOrStrings) {
  const std::string tmpl = write("t.jinja", "{{ a|tojson }} {{ b|tojson }} {{ c|tojson }} {{ eos_token }}");
  const std::string messages = write("m.json", R"([{"role": "user", "content": "x"}])");
  const RunResult r = run_chronos(
      {"chat-template", "-m", kQwenTokenizer.string(), "--messages", messages, "--chat-template", tmpl, "--chat-kwarg",
       "a=false", "--chat-kwarg", "b=high", "--chat-kwarg", "c={\"k\": [1]}", "--chat-kwarg", "eos_token=<END>"},
      work_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, R"(false "high" {"k": [1]} <END>)");
}

// tokenize prints tokenizers' ids (with and without the special tokens) and one token per line.
TEST_F(CliChat, TokenizePrintsTheReferenceIds) {
  const auto cases = ordered_json::parse(testing::slurp(kQwenTokenizer / "cases.json"));
  int checked = 0;
  for (const ordered_json& c : cases.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    if (text.empty() || checked >= 3) continue;
    const std::string file = write("text.txt", text);
    const RunResult ids = run_chronos({"tokenize", "-m", kQwenTokenizer.string(), "-f", file, "--ids"}, work_);
    ASSERT_EQ(ids.exit_code, 0) << ids.err;
    EXPECT_EQ(ordered_json::parse(ids.out), c.at("ids")) << text;
    const RunResult lines = run_chronos({"tokenize", "-m", kQwenTokenizer.string(), "-f", file}, work_);
    ASSERT_EQ(lines.exit_code, 0) << lines.err;
    EXPECT_EQ(size_t(std::count(lines.out.begin(), lines.out.end(), '\n')), c.at("ids").size()) << text;
    ++checked;
  }
  EXPECT_EQ(checked, 3);
  const RunResult piece = run_chronos({"tokenize", "-m", kQwenTokenizer.string(), "-p", "<|im_start|>"}, work_);
  ASSERT_EQ(piece.exit_code, 0) << piece.err;
  EXPECT_EQ(piece.out, "151644\t\"<|im_start|>\"\n");
}

// generate --messages renders the conversation from the file: the same tokens as --chat -p.
TEST_F(CliChat, GenerateMessagesEqualsChatPrompt) {
  const std::string messages = write("m.json", R"([{"role": "system", "content": "Be brief."},
                                                  {"role": "user", "content": "The history of"}])");
  const RunResult from_file =
      run_chronos({"generate", "-m", kModel.string(), "--messages", messages, "-n", "8", "--ignore-eos"}, work_);
  ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
  const RunResult from_flags = run_chronos({"generate", "-m", kModel.string(), "--chat", "--system", "Be brief.", "-p",
                                            "The history of", "-n", "8", "--ignore-eos"},
                                           work_);
  ASSERT_EQ(from_flags.exit_code, 0) << from_flags.err;
  EXPECT_EQ(from_file.out, from_flags.out);
  EXPECT_FALSE(from_file.out.empty());
}

// A reply inside the reasoning block the template opened is hidden unless --show-reasoning; after a
// block the template closed, the reply is all answer.
TEST_F(CliChat, ReasoningIsHiddenUnlessAsked) {
  const auto run = [&](const std::string& tmpl, bool show) {
    std::vector<std::string> args = {"generate",
                                     "-m",
                                     kModel.string(),
                                     "--chat",
                                     "-p",
                                     "The history of",
                                     "-n",
                                     "8",
                                     "--ignore-eos",
                                     "--chat-template",
                                     write("t.jinja", tmpl)};
    if (show) args.push_back("--show-reasoning");
    const RunResult r = run_chronos(args, work_);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r;
  };
  const std::string opens = "{{ messages[0]['content'] }}<think>\n";
  const RunResult shown = run(opens, true);
  ASSERT_FALSE(shown.out.empty());
  ASSERT_EQ(shown.out.find("</think>"), std::string::npos) << "the random model closed the block: pick another prompt";
  const RunResult hidden = run(opens, false);
  EXPECT_EQ(hidden.out, "");
  EXPECT_NE(hidden.err.find(std::to_string(shown.out.size()) + " bytes of reasoning not shown"), std::string::npos)
      << hidden.err;
  const std::string closes = "{{ messages[0]['content'] }}<think>\n</think>\n";
  EXPECT_EQ(run(closes, false).out, run(closes, true).out);
  expect_clean_failure(run_chronos({"generate", "-m", kModel.string(), "-p", "x", "--show-reasoning"}, work_), 2,
                       "--show-reasoning needs --chat or --messages");
}

TEST_F(CliChat, BadInputIsOneClearError) {
  const std::string model = kQwenTokenizer.string();
  const std::string good = write("good.json", R"([{"role": "user", "content": "x"}])");
  const std::string broken = write("broken.json", R"([{"role": "user", "content": )");
  expect_clean_failure(run_chronos({"chat-template", "-m", model, "--messages", broken}, work_), 1,
                       broken + ": not valid JSON");
  expect_clean_failure(run_chronos({"chat-template", "-m", model, "--messages", write("o.json", R"({"a": 1})")}, work_),
                       1, "must be a JSON list of message objects");
  expect_clean_failure(
      run_chronos({"chat-template", "-m", model, "--messages", write("r.json", R"([{"content": 1}])")}, work_), 1,
      "message 0 is not an object with a string \"role\"");
  expect_clean_failure(
      run_chronos({"chat-template", "-m", model, "--messages", good, "--tools", good + ".missing"}, work_), 1,
      "cannot open the tools file");
  expect_clean_failure(
      run_chronos({"chat-template", "-m", model, "--messages", good, "--chat-kwarg", "novalue"}, work_), 2,
      "--chat-kwarg novalue: expected KEY=VALUE");
  expect_clean_failure(run_chronos({"chat-template", "-m", model}, work_), 2, "needs --messages");
  expect_clean_failure(run_chronos({"chat-template", "-m", model, "--messages", good, "--chat-template",
                                    write("bad.jinja", "ok\n{% for m in messages %}{{ m.role | nosuchfilter }}")},
                                   work_),
                       1, "chat template line 2: unknown filter 'nosuchfilter'");
  expect_clean_failure(run_chronos({"chat-template", "-m", model, "--messages", good, "--chat-template",
                                    write("raise.jinja", "{{ raise_exception('Only user and assistant roles') }}")},
                                   work_),
                       1, "Only user and assistant roles");
  expect_clean_failure(run_chronos({"generate", "-m", kModel.string(), "-p", "x", "--chat-kwarg", "a=1"}, work_), 2,
                       "need --chat or --messages");
  expect_clean_failure(run_chronos({"generate", "-m", kModel.string(), "-p", "x", "--messages", good}, work_), 2,
                       "--messages is the whole conversation");
}

}  // namespace
}  // namespace chronos
