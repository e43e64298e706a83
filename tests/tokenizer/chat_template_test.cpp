// Chat template rendering against transformers' apply_chat_template output stored in the fixtures.
#include <gtest/gtest.h>

#include "chronos/error.h"
#include "chronos/tokenizer.h"
#include "tokenizer/fixture_util.h"

namespace chronos {
namespace {

std::vector<ChatMessage> messages_of(const nlohmann::json& node) {
  std::vector<ChatMessage> messages;
  for (const auto& m : node) messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  return messages;
}

class ChatReference : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatReference, RendersLikeTransformers) {
  const auto tokenizer = Tokenizer::load(test::tokenizer_fixture(GetParam()));
  const auto cases = test::read_json(test::tokenizer_fixture(GetParam()) / "cases.json");
  ASSERT_TRUE(tokenizer.has_chat_template());
  ASSERT_FALSE(cases["chats"].empty());
  int rendered = 0, refused = 0;
  for (const auto& chat : cases["chats"]) {
    const auto messages = messages_of(chat["messages"]);
    const bool generation = chat["add_generation_prompt"].get<bool>();
    if (chat.contains("error")) {
      EXPECT_THROW(tokenizer.apply_chat_template(messages, generation), Error) << chat.dump();
      ++refused;
    } else {
      EXPECT_EQ(tokenizer.apply_chat_template(messages, generation), chat["rendered"].get<std::string>())
          << chat.dump();
      ++rendered;
    }
  }
  EXPECT_GT(rendered, 0);
  (void)refused;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ChatReference,
                         ::testing::Values("qwen2", "mistral", "mistral_metaspace", "deepseek_v3", "kimi_k2",
                                           "synth_bytelevel", "synth_ignore_merges", "synth_metaspace"),
                         [](const auto& info) { return info.param; });

TEST(ChatTemplate, QwenRenderEncodesWithoutAddedBos) {
  const auto qwen = Tokenizer::load(test::tokenizer_fixture("qwen2"));
  const std::vector<ChatMessage> messages = {{"user", "Hi"}};
  const auto ids = qwen.encode(qwen.apply_chat_template(messages, true), false);
  // <|im_start|>system ... then the specials appear as single ids.
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 151644);
  EXPECT_EQ(ids[ids.size() - 3], 151644);  // <|im_start|> assistant \n
}

TEST(ChatTemplate, MistralRenderHoldsExactlyOneBos) {
  const auto mistral = Tokenizer::load(test::tokenizer_fixture("mistral"));
  const std::vector<ChatMessage> messages = {{"user", "Hi"}};
  const auto ids = mistral.encode(mistral.apply_chat_template(messages, true), false);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_NE(ids[1], 1);
}

ChatRequest request_of(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  ChatRequest request;
  for (const auto& m : messages) request.messages.push_back({{"role", m.role}, {"content", m.content}});
  request.add_generation_prompt = add_generation_prompt;
  return request;
}

// Any template renders as Jinja renders it (the hand-written formatters refused what they did
// not recognise); a missing template is an error that says how to give one.
TEST(ChatTemplate, AnyTemplateRendersAndMissingTemplateThrows) {
  const std::vector<ChatMessage> messages = {{"user", "Hi"}};
  EXPECT_EQ(render_chat_template("{{ messages }}", request_of(messages, true), {}),
            "[{'role': 'user', 'content': 'Hi'}]");
  try {
    render_chat_template("", request_of(messages, true), {});
    FAIL() << "an empty template rendered";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--chat-template"), std::string::npos) << e.what();
  }
  const auto synth = Tokenizer::load(test::tokenizer_fixture("synth_affixes"));
  EXPECT_FALSE(synth.has_chat_template());
  EXPECT_THROW(synth.apply_chat_template(messages, true), Error);
}

// A template without an add_generation_prompt branch opens no assistant turn (transformers
// renders the template as written; the hand-written ChatML formatter used to append one).
TEST(ChatTemplate, ChatmlWithoutGenerationBranchOpensNoTurn) {
  const std::string tmpl =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>' + '\\n'}}{% endfor %}";
  const std::vector<ChatMessage> messages = {{"user", "a"}};
  EXPECT_EQ(render_chat_template(tmpl, request_of(messages, true), {}), "<|im_start|>user\na<|im_end|>\n");
}

}  // namespace
}  // namespace chronos

namespace chronos {
namespace {

// The tiny test checkpoints (tools/make_test_models.py) store transformers' own tokenization of
// a prompt and a chat render; when they are present, they must agree with ours too.
TEST(TestModelTokenizers, MatchTransformersReference) {
  const auto root = std::filesystem::path(CHRONOS_TEST_DATA_DIR) / "models";
  int checked = 0;
  if (std::filesystem::exists(root)) {
    for (const auto& entry : std::filesystem::directory_iterator(root)) {
      const auto dir = entry.path();
      if (!std::filesystem::exists(dir / "tokenizer.json") || !std::filesystem::exists(dir / "reference.json")) {
        continue;
      }
      const auto reference = test::read_json(dir / "reference.json");
      if (!reference.contains("text_case")) continue;
      const auto& text_case = reference["text_case"];
      const auto tokenizer = Tokenizer::load(dir);
      SCOPED_TRACE(dir.string());
      EXPECT_EQ(tokenizer.encode(text_case["prompt"].get<std::string>(), true),
                text_case["ids"].get<std::vector<int32_t>>());
      if (text_case.contains("chat_text")) {
        const auto messages = messages_of(text_case["chat_messages"]);
        EXPECT_EQ(tokenizer.apply_chat_template(messages, true), text_case["chat_text"].get<std::string>());
        EXPECT_EQ(tokenizer.encode(text_case["chat_text"].get<std::string>(), false),
                  text_case["chat_ids"].get<std::vector<int32_t>>());
      }
      EXPECT_EQ(tokenizer.decode(text_case["greedy"].get<std::vector<int32_t>>()),
                text_case["greedy_text"].get<std::string>());
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no test checkpoints with reference.json under " << root;
}

}  // namespace
}  // namespace chronos
