// A thinking model's streamed reply split into its reasoning and its answer, as the pieces arrive:
// ReasoningSplitter for the reasoning tags (<think> ... </think> for DeepSeek-R1/V3.1, Qwen3,
// GLM-4.5, MiniMax-M2, Kimi-K2 Thinking), HarmonySplitter for gpt-oss's harmony messages (the
// analysis channel is the reasoning). make_reply_splitter picks one from the rendered prompt.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace chronos {

struct ReasoningParts {
  std::string reasoning;  // text inside reasoning blocks, without the tags
  std::string content;    // the answer: everything else
};

class ReplySplitter {
 public:
  virtual ~ReplySplitter() = default;
  // The parts of the text so far that are settled: a tail that may be the start of a marker is held
  // back until the next push or finish.
  ReasoningParts push(std::string_view text) {
    pending_.append(text);
    return drain(false);
  }
  ReasoningParts finish() { return drain(true); }

 protected:
  // Splits what is settled of pending_ (all of it when final) and erases it from pending_.
  virtual ReasoningParts drain(bool final) = 0;
  std::string pending_;
};

class ReasoningSplitter final : public ReplySplitter {
 public:
  // `inside`: the reply starts within a reasoning block, because the rendered prompt opened one
  // (prompt_opens_reasoning).
  explicit ReasoningSplitter(bool inside = false, std::string open_tag = "<think>", std::string close_tag = "</think>");

  // The parts of the text so far that are settled: a tail that may be the start of a tag is held
  // back until the next push or finish. The blank lines that follow a closing tag are dropped.
  bool inside() const { return inside_; }

 private:
  ReasoningParts drain(bool final) override;
  std::string open_, close_;
  bool inside_;
  bool after_close_ = false;  // just past a closing tag: whitespace is dropped until the answer starts
};

// gpt-oss's harmony format, as the reply's text shows its special tokens: messages
// `<|start|>ROLE<|channel|>CHANNEL[ to=RECIPIENT][<|constrain|>TYPE]<|message|>BODY` ended by
// `<|end|>`, `<|return|>` or `<|call|>`. The bodies of the analysis channel are the reasoning, every
// other body (final, commentary) the answer; the headers and markers are dropped. `in_body`: the
// rendered prompt already opened a message of `channel` (its last <|message|> is after its last
// <|start|>); otherwise the reply begins with a header (the prompt ends `<|start|>assistant`).
class HarmonySplitter final : public ReplySplitter {
 public:
  explicit HarmonySplitter(bool in_body = false, std::string channel = "final");

 private:
  ReasoningParts drain(bool final) override;
  std::string header_;  // the header read so far, when not in a body
  bool in_body_;
  bool analysis_;  // the current body's channel is analysis
};

// Whether a rendered chat prompt is in harmony's format (it holds <|start|> and <|message|>).
bool is_harmony_prompt(std::string_view rendered_prompt);

// The splitter for a chat reply to `rendered_prompt`: harmony when the prompt is in harmony's
// format (it holds <|start|> and <|message|>), else the reasoning tags.
std::unique_ptr<ReplySplitter> make_reply_splitter(std::string_view rendered_prompt);

// Whether a rendered chat prompt leaves the reply inside a reasoning block: its last opening tag
// comes after its last closing tag (templates that open <think> for the model).
bool prompt_opens_reasoning(std::string_view prompt, std::string_view open_tag = "<think>",
                            std::string_view close_tag = "</think>");

}  // namespace chronos
