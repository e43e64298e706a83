// The Jinja interpreter against transformers: real chat templates of every family rendered as
// apply_chat_template renders them, language cases rendered by transformers' own environment,
// and hostile templates that must end in one clear error within the render limits.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "chronos/error.h"
#include "chronos/jinja.h"
#include "chronos/tokenizer.h"

namespace chronos {
namespace {

using ordered_json = nlohmann::ordered_json;

std::filesystem::path chat_fixtures() { return std::filesystem::path(CHRONOS_TEST_DATA_DIR) / "chat_templates"; }

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

ordered_json read_ordered_json(const std::filesystem::path& path) { return ordered_json::parse(read_text(path)); }

// The fixtures' pinned clock: "2026-01-15T10:30:00Z".
jinja::RenderOptions fixture_options(const ordered_json& document) {
  const std::string now = document.at("now").get<std::string>();
  std::tm tm{};
  EXPECT_NE(strptime(now.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm), nullptr) << now;
  jinja::RenderOptions options;
  options.now = tm;
  return options;
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

std::vector<std::string> template_names() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(chat_fixtures())) {
    if (entry.path().extension() == ".jinja") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

class RealTemplate : public ::testing::TestWithParam<std::string> {};

// Every case of the family's fixture: the same text as transformers, or, where the template
// rejects the conversation with raise_exception, an Error carrying the template's message.
TEST_P(RealTemplate, RendersLikeTransformers) {
  const ordered_json document = read_ordered_json(chat_fixtures() / (GetParam() + ".json"));
  const std::string source = read_text(chat_fixtures() / document.at("template").get<std::string>());
  std::vector<std::pair<std::string, std::string>> special_tokens;
  for (const auto& [name, token] : document.at("special_tokens").items()) special_tokens.emplace_back(name, token);
  const jinja::RenderOptions options = fixture_options(document);
  int rendered = 0;
  for (const ordered_json& c : document.at("cases")) {
    ChatRequest request;
    request.messages = c.at("messages");
    if (c.contains("tools")) request.tools = c.at("tools");
    if (c.contains("documents")) request.documents = c.at("documents");
    request.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
    request.kwargs = c.value("kwargs", ordered_json::object());
    const std::string name = c.at("name").get<std::string>();
    if (c.contains("error")) {
      const std::string error = error_of([&] { render_chat_template(source, request, special_tokens, options); });
      EXPECT_NE(error.find(c.at("error").get<std::string>()), std::string::npos) << name << ": " << error;
    } else {
      EXPECT_EQ(render_chat_template(source, request, special_tokens, options), c.at("rendered").get<std::string>())
          << name;
      ++rendered;
    }
  }
  EXPECT_GE(rendered, 3);
}

INSTANTIATE_TEST_SUITE_P(Families, RealTemplate, ::testing::ValuesIn(template_names()),
                         [](const auto& info) { return info.param; });

// The language cases: each template and variables rendered by transformers' environment; where
// it raised, the interpreter must refuse too (with its own words, except raise_exception's).
TEST(JinjaLanguage, MatchesTransformersEnvironment) {
  const ordered_json document = read_ordered_json(chat_fixtures() / "language_cases.json");
  const jinja::RenderOptions options = fixture_options(document);
  int errors = 0;
  for (const ordered_json& c : document.at("cases")) {
    const std::string source = c.at("template").get<std::string>();
    if (c.contains("error")) {
      const std::string error = error_of([&] { jinja::Template::parse(source).render(c.at("variables"), options); });
      EXPECT_FALSE(error.empty()) << source << " rendered; transformers raised " << c.at("error");
      if (c.at("error").get<std::string>().starts_with("TemplateError: ")) {
        EXPECT_NE(error.find(c.at("error").get<std::string>().substr(15)), std::string::npos) << error;
      }
      ++errors;
      continue;
    }
    std::string rendered;
    const std::string error =
        error_of([&] { rendered = jinja::Template::parse(source).render(c.at("variables"), options); });
    EXPECT_EQ(error, "") << source;
    EXPECT_EQ(rendered, c.at("rendered").get<std::string>()) << source;
  }
  EXPECT_GE(errors, 10);
}

// ---- hostile and broken templates: one clear error naming the line, within bounded time ----

std::string render_error(std::string_view source, const jinja::RenderOptions& options = {}) {
  return error_of([&] { jinja::Template::parse(source).render(ordered_json::object(), options); });
}

TEST(JinjaErrors, SyntaxErrorsNameTheLine) {
  EXPECT_EQ(render_error("a\nb\n{% if x %}\nno end"),
            "chat template line 4: unexpected end of the template: 'if' is not closed");
  EXPECT_EQ(render_error("line one\n{{ x | frobnicate }}"), "chat template line 2: unknown filter 'frobnicate'");
  EXPECT_EQ(render_error("{% for x in y %}{% endif %}"),
            "chat template line 1: unexpected 'endif' (no open block it closes)");
  EXPECT_EQ(render_error("\n\n{% include 'x.jinja' %}"),
            "chat template line 3: '{% include %}' is not supported in chat templates");
  EXPECT_EQ(render_error("{{ x is frobbed }}"), "chat template line 1: unknown test 'frobbed'");
  EXPECT_EQ(render_error("{{ 'abc }}"), "chat template line 1: unclosed string literal");
  EXPECT_EQ(render_error("{# never closed"), "chat template line 1: unclosed comment '{#'");
  EXPECT_EQ(render_error("x {{ y"), "chat template line 1: unclosed tag '{{'");
  EXPECT_EQ(render_error("{% continue %}"), "chat template line 1: 'continue' outside a loop");
  EXPECT_EQ(render_error("{{ f(*args) }}"), "chat template line 1: '*args' and '**kwargs' in calls are not supported");
}

TEST(JinjaErrors, RuntimeErrorsNameTheLine) {
  EXPECT_EQ(render_error("ok\n{{ missing.attribute }}"), "chat template line 2: 'missing' is undefined");
  EXPECT_EQ(render_error("\n\n{{ raise_exception('Conversation roles must alternate') }}"),
            "chat template line 3: Conversation roles must alternate");
  EXPECT_EQ(render_error("{{ [1].append(2) }}"),
            "chat template line 1: list.append is not allowed: chat templates cannot change a list (use namespace())");
  EXPECT_EQ(render_error("{{ 1 + 'a' }}"), "chat template line 1: unsupported operand type(s) for +: 'int' and 'str'");
  EXPECT_EQ(render_error("{{ 9223372036854775807 + 1 }}"), "chat template line 1: integer overflow in +");
}

// A caller kept past its call block has no scope to run in: an error, not a read of a freed frame.
TEST(JinjaErrors, CallerKeptPastItsBlockIsRefused) {
  EXPECT_EQ(render_error("{% set ns = namespace() %}{% macro keep() %}{% set ns.c = caller %}{% endmacro %}"
                         "{% for i in [1] %}{% for j in [2] %}{% call keep() %}x{% endcall %}{% endfor %}{% endfor %}"
                         "{{ ns.c() }}"),
            "chat template line 1: caller() called after its call block ended");
}

TEST(JinjaErrors, DeepNestingIsRefusedNotAStackOverflow) {
  const std::string parentheses = std::string(100000, '(') + "1" + std::string(100000, ')');
  EXPECT_NE(render_error("{{ " + parentheses + " }}").find("nests deeper than"), std::string::npos);
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  EXPECT_NE(render_error(blocks).find("nests deeper than"), std::string::npos);
  std::string filters = "{{ x";
  for (int i = 0; i < 100000; ++i) filters += "|trim";
  // A long filter chain is not nested on the parser's stack; the evaluator's recursion over it is
  // bounded by the same rule as any expression.
  EXPECT_NE(render_error(filters + " }}"), "");
}

TEST(JinjaErrors, RunawayTemplatesStopAtTheLimits) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_NE(render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("nest deeper than 64"),
            std::string::npos);
  EXPECT_NE(render_error("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}")
                .find("ran past 10000000 steps"),
            std::string::npos);
  EXPECT_NE(render_error("{% for i in range(1000000) %}{{ 'x' * 1000 }}{% endfor %}").find("output grew past"),
            std::string::npos);
  EXPECT_NE(
      render_error("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
          .find("string grew past"),
      std::string::npos);
  EXPECT_NE(render_error("{{ range(100000000000)|length }}").find("past the limit"), std::string::npos);
  EXPECT_NE(render_error("{{ 'ab' * 100000000000 }}").find("string grew past"), std::string::npos);
  // The default limits bound the time too: all of the above in seconds, not minutes, even under
  // the sanitizers (a wall-clock check is not a timing test: it only catches a limit that is gone).
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(120));
}

TEST(JinjaErrors, LimitsAreTheCallersToSet) {
  jinja::RenderOptions options;
  options.limits.max_steps = 1000;
  EXPECT_NE(render_error("{% for i in range(500) %}{{ i }}{% endfor %}", options).find("ran past 1000 steps"),
            std::string::npos);
  options.limits = {};
  options.limits.max_output_bytes = 10;
  EXPECT_NE(render_error("{{ 'x' * 11 }}", options).find("past the limit of 10 bytes"), std::string::npos);
}

// ---- the request side: transformers' message normalization and variables ----

TEST(ChatRequest, NullKeysAreDroppedAndReasoningIsAliased) {
  ChatRequest request;
  request.messages = ordered_json::parse(R"([
    {"role": "assistant", "content": null, "tool_calls": null, "reasoning_content": "why"},
    {"role": "user", "content": "x", "thinking": "t", "reasoning": "r"}])");
  request.add_generation_prompt = false;
  EXPECT_EQ(render_chat_template("{{ messages|tojson }}", request, {}),
            R"([{"thinking": "why", "role": "assistant", "reasoning_content": "why"}, )"
            R"({"thinking": "t", "role": "user", "content": "x", "reasoning": "r", "reasoning_content": "t"}])");
}

TEST(ChatRequest, VariablesAreThoseTransformersPasses) {
  ChatRequest request;
  request.messages = ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  request.kwargs = {{"enable_thinking", false}, {"bos_token", "<override>"}};
  const std::vector<std::pair<std::string, std::string>> special = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  EXPECT_EQ(render_chat_template("{{ bos_token }}|{{ eos_token }}|{{ tools is none }}|{{ documents is none }}|"
                                 "{{ add_generation_prompt }}|{{ enable_thinking }}|{{ unk_token is defined }}",
                                 request, special),
            "<override>|</s>|True|True|True|False|False");
  request.kwargs = {{"messages", 1}};
  EXPECT_NE(error_of([&] { render_chat_template("x", request, special); }).find("'messages' is not a template keyword"),
            std::string::npos);
  request.kwargs = ordered_json::object();
  request.tools = "not a list";
  EXPECT_NE(error_of([&] { render_chat_template("x", request, special); }).find("tools must be a list"),
            std::string::npos);
}

TEST(ChatRequest, ToolUseTemplateIsChosenWhenToolsAreGiven) {
  const auto tokenizer = Tokenizer::from_json(
      read_text(std::filesystem::path(CHRONOS_TEST_DATA_DIR) / "tokenizers" / "synth_bytelevel" / "tokenizer.json"),
      R"({"chat_template": [{"name": "default", "template": "plain"},
                            {"name": "tool_use", "template": "tools: {{ tools|length }}"}]})");
  ChatRequest request;
  request.messages = ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(tokenizer.apply_chat_template(request), "plain");
  request.tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  EXPECT_EQ(tokenizer.apply_chat_template(request), "tools: 1");
  EXPECT_EQ(tokenizer.apply_chat_template(request, "override {{ messages[0].content }}"), "override hi");
}

}  // namespace
}  // namespace chronos
