// The OpenAI API as chronos serve speaks it: a request body parsed and checked into what the engine
// runs (ApiError, an HTTP status and an OpenAI error object, for anything else), tool calls read
// back out of a reply, and the error, completion and chunk objects written back.
#pragma once

#include <nlohmann/json.hpp>

#include "chronos/generate.h"

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace chronos::server {

// A request the server refuses: its HTTP status and the OpenAI error object's fields.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string type = "invalid_request_error", std::string param = {},
           std::string code = {})
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type;
  std::string param;  // the request field at fault, if any
  std::string code;
};

// {"error": {"message", "type", "param", "code"}}
nlohmann::ordered_json error_body(const ApiError& error);

enum class Endpoint { kChat, kCompletion };

// One request's fields, checked for type and range; what the server does not support is refused
// by name (n > 1, logprobs, JSON output), fields it does not know are ignored as OpenAI's clients
// send many.
struct CompletionRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::optional<std::string> model;
  // /v1/chat/completions
  nlohmann::ordered_json messages;  // array of message objects
  nlohmann::ordered_json tools;     // null or array (null when tool_choice is none)
  nlohmann::ordered_json chat_kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs, reasoning_effort
  // /v1/completions: text, or token ids
  std::optional<std::string> prompt;
  std::vector<int32_t> prompt_ids;
  RequestOverrides set;  // max_tokens, sampling, stop, ignore_eos
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// Parses a request body of `endpoint`. Throws ApiError (400) naming the field at fault.
CompletionRequest parse_request(Endpoint endpoint, std::string_view body);

// A tool call read out of a reply.
struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object, as text (OpenAI's `function.arguments`)
};

struct ParsedReply {
  std::string content;  // the reply without its tool-call blocks
  std::vector<ToolCall> tool_calls;
};

// The tool calls in a reply, in the syntaxes the chat templates ask for: `<tool_call>{JSON}</tool_call>`
// (Qwen2.5/Qwen3, Hermes), `<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function>
// </tool_call>` (Qwen3-Coder, Qwen3.5/3.6), `<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE
// </arg_value></tool_call>` (GLM-4.5 and later), `<minimax:tool_call><invoke name="NAME"><parameter
// name="KEY">VALUE</parameter></invoke></minimax:tool_call>` (MiniMax-M2). A block that does not
// parse, or is not closed, stays in the content.
ParsedReply parse_tool_calls(std::string_view reply);

// gpt-oss's harmony tool calls: the messages whose header names `to=functions.NAME`, their body the
// arguments, ended by <|call|>. `raw_reply` is the reply with its markers; `content` the answer a
// HarmonySplitter made of it, which holds those bodies (commentary channel): they are taken out.
ParsedReply parse_harmony_tool_calls(std::string_view raw_reply, std::string_view content);

// Where a tool-call block may begin in `text`: the first opening marker, or a tail that may be the
// start of one (text.size() when neither). A streamed reply holds its content back from there.
size_t tool_call_start(std::string_view text);

}  // namespace chronos::server
