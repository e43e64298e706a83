// The OpenAI request parser and the tool-call reader: what clients send is accepted, what the
// server cannot do is refused by field, and each template family's tool-call syntax is read back.
#include "server/openai.h"

#include <gtest/gtest.h>

#include "chronos/reasoning.h"

namespace chronos::server {
namespace {

using Json = nlohmann::json;

TEST(OpenAiRequest, TakesWhatClientsSend) {
  const CompletionRequest r = parse_request(Endpoint::kChat, R"({
    "model": "m", "messages": [{"role": "system", "content": "Be brief."},
                               {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}],
    "max_completion_tokens": 9, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": -3,
    "stop": "\n\n", "stream": true, "stream_options": {"include_usage": true}, "n": 1, "presence_penalty": 0,
    "user": "someone", "parallel_tool_calls": true, "tool_choice": "auto",
    "chat_template_kwargs": {"enable_thinking": false}, "reasoning_effort": "low",
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]})");
  EXPECT_EQ(*r.model, "m");
  EXPECT_EQ(r.messages[1]["content"], "Hi there") << "text parts are joined for the template";
  EXPECT_EQ(*r.set.max_tokens, 9);
  EXPECT_FLOAT_EQ(*r.set.temperature, 0.5f);
  EXPECT_EQ(*r.set.top_k, 40);
  EXPECT_EQ(*r.set.seed, uint64_t(-3));
  EXPECT_EQ(*r.set.stop, std::vector<std::string>{"\n\n"});
  EXPECT_TRUE(r.stream && r.include_usage);
  EXPECT_EQ(r.chat_kwargs["enable_thinking"], false);
  EXPECT_EQ(r.chat_kwargs["reasoning_effort"], "low");
  EXPECT_EQ(r.tools.size(), 1u);
  EXPECT_TRUE(parse_request(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}],
    "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none"})")
                  .tools.is_null())
      << "tool_choice none renders no tools";
  const CompletionRequest ids = parse_request(Endpoint::kCompletion, R"({"prompt": [1, 2, 3]})");
  EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(*parse_request(Endpoint::kCompletion, R"({"prompt": ["one"]})").prompt, "one");
}

TEST(OpenAiRequest, RefusesByField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"prompt": "a", "max_tokens": 1, "max_completion_tokens": 1})", "max_completion_tokens"},
      {R"({"prompt": "a", "seed": 1.5})", "seed"},
      {R"({"prompt": "a", "stop": ["a", ""]})", "stop"},
      {R"({"prompt": "a", "stop": ["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"]})",
       "stop"},
      {R"({"prompt": "a", "best_of": 3})", "best_of"},
      {R"({"prompt": "a", "frequency_penalty": 0.5})", "frequency_penalty"},
      {R"({"prompt": "a", "echo": true})", "echo"},
      {R"({"prompt": "a", "suffix": "b"})", "suffix"},
      {R"({"prompt": "a", "logit_bias": {"1": 2}})", "logit_bias"},
      {R"({"prompt": "a", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": [1, "a"]})", "prompt"},
      {R"({"prompt": [-1]})", "prompt"},
  };
  for (const auto& [body, param] : cases) {
    try {
      parse_request(Endpoint::kCompletion, body);
      ADD_FAILURE() << "accepted " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, param) << body << ": " << e.what();
    }
  }
  try {
    parse_request(Endpoint::kChat, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})");
    ADD_FAILURE() << "an image part was accepted";
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("only text parts"), std::string::npos) << e.what();
  }
  const Json body = error_body(ApiError(404, "no", "invalid_request_error", "model", "model_not_found"));
  EXPECT_EQ(body["error"]["code"], "model_not_found");
  EXPECT_EQ(body["error"]["param"], "model");
}

TEST(ToolCalls, EachTemplateFamilysSyntax) {
  struct Case {
    const char* family;
    std::string reply;
  };
  const std::vector<Case> cases = {
      {"qwen3 / hermes",
       "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n"
       "</tool_call>"},
      {"qwen3-coder / qwen3.5",
       "Let me look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n"
       "</parameter>\n</function>\n</tool_call>"},
      {"glm-4.5",
       "Let me look.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
       "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>"},
      {"minimax-m2",
       "Let me look.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris"
       "</parameter>\n<parameter name=\"days\">2</parameter>\n</invoke>\n</minimax:tool_call>"},
  };
  for (const Case& c : cases) {
    const ParsedReply r = parse_tool_calls(c.reply);
    EXPECT_EQ(r.content, "Let me look.") << c.family;
    ASSERT_EQ(r.tool_calls.size(), 1u) << c.family;
    EXPECT_EQ(r.tool_calls[0].name, "get_weather") << c.family;
    EXPECT_EQ(Json::parse(r.tool_calls[0].arguments), Json({{"city", "Paris"}, {"days", 2}})) << c.family;
  }
  // Two calls; arguments given as a JSON string.
  const ParsedReply two = parse_tool_calls(
      "<tool_call>{\"name\": \"a\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>\n<tool_call>{\"name\": \"b\", "
      "\"arguments\": {}}</tool_call>");
  ASSERT_EQ(two.tool_calls.size(), 2u);
  EXPECT_EQ(two.tool_calls[0].arguments, R"({"x":1})");
  EXPECT_EQ(two.tool_calls[1].name, "b");
  EXPECT_EQ(two.content, "");
}

TEST(ToolCalls, HarmonyMessagesToFunctions) {
  // As gpt-oss writes them after `<|start|>assistant`: reasoning, a call in either header order, an
  // unfinished call (no <|call|>), which stays content.
  const std::string raw =
      "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>"
      "<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{}<|call|>"
      "<|start|>assistant<|channel|>commentary to=functions.broken json<|message|>{\"x\":";
  HarmonySplitter splitter;
  ReasoningParts parts = splitter.push(raw);
  const ReasoningParts rest = splitter.finish();
  parts.content += rest.content;
  parts.reasoning += rest.reasoning;
  EXPECT_EQ(parts.reasoning, "Need the weather.");
  const ParsedReply r = parse_harmony_tool_calls(raw, parts.content);
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(r.tool_calls[0].arguments), Json({{"city", "Paris"}}));
  EXPECT_EQ(r.tool_calls[1].name, "get_time");
  EXPECT_EQ(r.tool_calls[1].arguments, "{}");
  EXPECT_EQ(r.content, "{\"x\":") << "the unfinished call is left as it was";
  EXPECT_TRUE(parse_harmony_tool_calls("<|channel|>final<|message|>Hello.<|return|>", "Hello.").tool_calls.empty());
}

TEST(ToolCalls, WhatDoesNotParseStaysContent) {
  for (const std::string reply :
       {"no calls here", "<tool_call>{\"name\": \"f\", \"arguments\": {", "<tool_call>{oops}</tool_call>",
        "<tool_call>\n</tool_call>", "<tool_call>two words</tool_call>",
        "<minimax:tool_call><invoke>x</invoke></minimax:tool_call>"}) {
    const ParsedReply r = parse_tool_calls(reply);
    EXPECT_TRUE(r.tool_calls.empty()) << reply;
    EXPECT_EQ(r.content, reply);
  }
}

TEST(ToolCalls, AStreamHoldsBackWhatMayStartACall) {
  EXPECT_EQ(tool_call_start("plain text"), 10u);
  EXPECT_EQ(tool_call_start("text <tool_call>{"), 5u);
  EXPECT_EQ(tool_call_start("text <tool_c"), 5u);
  EXPECT_EQ(tool_call_start("text <"), 5u);
  EXPECT_EQ(tool_call_start("a < b"), 5u) << "a '<' followed by text that is no marker is not held";
  EXPECT_EQ(tool_call_start("x <minimax:to"), 2u);
}

}  // namespace
}  // namespace chronos::server
