// ReasoningSplitter: a thinking model's streamed reply split into its reasoning (the text between
// the reasoning tags, <think> ... </think> for DeepSeek-R1/V3.1, Qwen3, GLM-4.5, MiniMax-M2, Kimi-K2
// Thinking) and its answer, as the pieces arrive.
#pragma once

#include <string>
#include <string_view>

namespace chronos {

struct ReasoningParts {
  std::string reasoning;  // text inside reasoning blocks, without the tags
  std::string content;    // the answer: everything else
};

class ReasoningSplitter {
 public:
  // `inside`: the reply starts within a reasoning block, because the rendered prompt opened one
  // (prompt_opens_reasoning).
  explicit ReasoningSplitter(bool inside = false, std::string open_tag = "<think>", std::string close_tag = "</think>");

  // The parts of the text so far that are settled: a tail that may be the start of a tag is held
  // back until the next push or finish. The blank lines that follow a closing tag are dropped.
  ReasoningParts push(std::string_view text);
  ReasoningParts finish();
  bool inside() const { return inside_; }

 private:
  ReasoningParts drain(bool final);
  std::string open_, close_;
  std::string pending_;
  bool inside_;
  bool after_close_ = false;  // just past a closing tag: whitespace is dropped until the answer starts
};

// Whether a rendered chat prompt leaves the reply inside a reasoning block: its last opening tag
// comes after its last closing tag (templates that open <think> for the model).
bool prompt_opens_reasoning(std::string_view prompt, std::string_view open_tag = "<think>",
                            std::string_view close_tag = "</think>");

}  // namespace chronos
