// ReasoningSplitter and HarmonySplitter: the reasoning and the answer of a streamed reply, however it
// is cut.
#include <gtest/gtest.h>

#include "chronos/reasoning.h"

namespace chronos {
namespace {

ReasoningParts split_in_pieces(std::string_view text, size_t piece, bool inside = false) {
  ReasoningSplitter splitter(inside);
  ReasoningParts all;
  const auto add = [&](const ReasoningParts& p) {
    all.reasoning += p.reasoning;
    all.content += p.content;
  };
  for (size_t i = 0; i < text.size(); i += piece) add(splitter.push(text.substr(i, piece)));
  add(splitter.finish());
  return all;
}

TEST(ReasoningSplitter, SeparatesTheThinkingBlockFromTheAnswer) {
  const auto parts = split_in_pieces("<think>\nplan it\n</think>\n\nThe answer is 4.", 1000);
  EXPECT_EQ(parts.reasoning, "\nplan it\n");
  EXPECT_EQ(parts.content, "The answer is 4.");
}

TEST(ReasoningSplitter, EveryCutGivesTheSameParts) {
  const std::string text = "<think>a < b, so </thin k> is not a tag</think>\n \nx<y <think>more</think>end <thin";
  const auto whole = split_in_pieces(text, text.size());
  EXPECT_EQ(whole.reasoning, "a < b, so </thin k> is not a tagmore");
  EXPECT_EQ(whole.content, "x<y end <thin");  // a partial tag at the very end is text
  for (size_t piece = 1; piece < 12; ++piece) {
    const auto cut = split_in_pieces(text, piece);
    EXPECT_EQ(cut.reasoning, whole.reasoning) << piece;
    EXPECT_EQ(cut.content, whole.content) << piece;
  }
}

TEST(ReasoningSplitter, AReplyThatStartsInsideTheBlock) {
  // DeepSeek-V3.1 and Kimi-K2-Thinking templates open <think> in the prompt: the reply only closes it.
  const auto parts = split_in_pieces("step 1, step 2</think>\n\nDone.", 3, /*inside=*/true);
  EXPECT_EQ(parts.reasoning, "step 1, step 2");
  EXPECT_EQ(parts.content, "Done.");
  const auto unfinished = split_in_pieces("still thinking when the budget ran out", 5, true);
  EXPECT_EQ(unfinished.reasoning, "still thinking when the budget ran out");
  EXPECT_EQ(unfinished.content, "");
}

TEST(ReasoningSplitter, TextWithoutTagsIsAllAnswer) {
  const auto parts = split_in_pieces("Plain <b>answer</b> with <thinking> in it.", 2);
  EXPECT_EQ(parts.reasoning, "");
  EXPECT_EQ(parts.content, "Plain <b>answer</b> with <thinking> in it.");
}

TEST(ReasoningSplitter, PromptOpensReasoningOnlyWhenTheLastTagIsOpen) {
  EXPECT_TRUE(prompt_opens_reasoning("<｜User｜>hi<｜Assistant｜><think>"));
  EXPECT_TRUE(prompt_opens_reasoning("<think>x</think> ... <|im_start|>assistant\n<think>\n"));
  // Qwen3 with enable_thinking=false closes an empty block for the model.
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
}

// gpt-oss's harmony reply: the analysis channel is the reasoning, the final channel the answer, the
// headers and markers dropped; the same parts however the text is cut.
ReasoningParts harmony_in_pieces(std::string_view text, size_t piece, std::string_view prompt) {
  const auto splitter = make_reply_splitter(prompt);
  EXPECT_NE(dynamic_cast<HarmonySplitter*>(splitter.get()), nullptr) << "not harmony: " << prompt;
  ReasoningParts all;
  const auto add = [&](const ReasoningParts& p) {
    all.reasoning += p.reasoning;
    all.content += p.content;
  };
  for (size_t i = 0; i < text.size(); i += piece) add(splitter->push(text.substr(i, piece)));
  add(splitter->finish());
  return all;
}

constexpr std::string_view kHarmonyPrompt =
    "<|start|>system<|message|>You are ChatGPT.\nReasoning: medium\n\n# Valid channels: analysis, commentary, "
    "final.<|end|><|start|>user<|message|>2 + 2?<|end|><|start|>assistant";

TEST(HarmonySplitter, AnalysisIsTheReasoningAndFinalTheAnswer) {
  const std::string reply =
      "<|channel|>analysis<|message|>Add them: a<b is fine, <|x is not a marker.<|end|>"
      "<|start|>assistant<|channel|>final<|message|>The answer is 4.<|return|>";
  const auto whole = harmony_in_pieces(reply, reply.size(), kHarmonyPrompt);
  EXPECT_EQ(whole.reasoning, "Add them: a<b is fine, <|x is not a marker.");
  EXPECT_EQ(whole.content, "The answer is 4.");
  for (size_t piece = 1; piece < 16; ++piece) {
    const auto cut = harmony_in_pieces(reply, piece, kHarmonyPrompt);
    EXPECT_EQ(cut.reasoning, whole.reasoning) << piece;
    EXPECT_EQ(cut.content, whole.content) << piece;
  }
}

TEST(HarmonySplitter, CommentaryAndAToolCallAreAnswerTextWithoutTheirHeaders) {
  const std::string reply =
      "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>";
  const auto parts = harmony_in_pieces(reply, 3, kHarmonyPrompt);
  EXPECT_EQ(parts.reasoning, "Need the weather.");
  EXPECT_EQ(parts.content, "{\"city\":\"Paris\"}");
}

TEST(HarmonySplitter, APromptThatOpensTheFinalMessage) {
  // A template that starts the answer itself: the reply is the final body from its first byte.
  const std::string prompt = std::string(kHarmonyPrompt) + "<|channel|>final<|message|>";
  const auto parts = harmony_in_pieces("Four.<|return|>", 2, prompt);
  EXPECT_EQ(parts.reasoning, "");
  EXPECT_EQ(parts.content, "Four.");
  const auto analysis = harmony_in_pieces("hm<|end|><|start|>assistant<|channel|>final<|message|>4", 5,
                                          std::string(kHarmonyPrompt) + "<|channel|>analysis<|message|>");
  EXPECT_EQ(analysis.reasoning, "hm");
  EXPECT_EQ(analysis.content, "4");
}

TEST(HarmonySplitter, AReplyCutInsideAHeaderShowsNothingOfIt) {
  const auto parts =
      harmony_in_pieces("<|channel|>analysis<|message|>thinking<|end|><|start|>assis", 4, kHarmonyPrompt);
  EXPECT_EQ(parts.reasoning, "thinking");
  EXPECT_EQ(parts.content, "");
}

TEST(HarmonySplitter, OtherPromptsKeepTheThinkTags) {
  EXPECT_NE(dynamic_cast<ReasoningSplitter*>(make_reply_splitter("<|im_start|>user\nhi<|im_end|>\n").get()), nullptr);
  const auto opened = make_reply_splitter("<|im_start|>assistant\n<think>\n");
  ASSERT_NE(dynamic_cast<ReasoningSplitter*>(opened.get()), nullptr);
  EXPECT_TRUE(dynamic_cast<ReasoningSplitter*>(opened.get())->inside());
}

}  // namespace
}  // namespace chronos
