// libFuzzer target: chronos serve's request parser and tool-call reader. The first byte picks the
// input's use ('c' a chat body, 'p' a completions body, anything else a reply to read tool calls
// from). A body is accepted or refused with a 400 ApiError that says why; a reply's tool calls are
// JSON objects and its content never grows.
#include <nlohmann/json.hpp>

#include <string_view>

#include "fuzz/fuzz_util.h"
#include "server/openai.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chronos::server;
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] == 'c' || data[0] == 'p') {
    const Endpoint endpoint = data[0] == 'c' ? Endpoint::kChat : Endpoint::kCompletion;
    try {
      const CompletionRequest r = parse_request(endpoint, text);
      if (endpoint == Endpoint::kChat) {
        CHRONOS_FUZZ_CHECK(r.messages.is_array() && !r.messages.empty(), "a chat request without messages");
        CHRONOS_FUZZ_CHECK(r.tools.is_null() || r.tools.is_array(), "tools neither null nor a list");
      } else {
        CHRONOS_FUZZ_CHECK(r.prompt.has_value() != !r.prompt_ids.empty() || (r.prompt && r.prompt_ids.empty()),
                           "a completions request with no prompt or two");
      }
      if (r.set.max_tokens) CHRONOS_FUZZ_CHECK(*r.set.max_tokens >= 0, "negative max_tokens");
      if (r.set.top_p) CHRONOS_FUZZ_CHECK(*r.set.top_p >= 0 && *r.set.top_p <= 1, "top_p out of range");
    } catch (const ApiError& e) {
      CHRONOS_FUZZ_CHECK(e.status == 400, "status %d", e.status);
      CHRONOS_FUZZ_CHECK(std::string_view(e.what()).size() > 0, "an error without a message");
      const nlohmann::json body = error_body(e);
      CHRONOS_FUZZ_CHECK(body["error"]["message"].is_string(), "an error object without a message");
    }
    return 0;
  }
  const ParsedReply r = parse_tool_calls(text);
  CHRONOS_FUZZ_CHECK(r.content.size() <= text.size(), "content grew: %zu of %zu", r.content.size(), text.size());
  for (const ToolCall& call : r.tool_calls) {
    CHRONOS_FUZZ_CHECK(!call.name.empty(), "a tool call without a name");
    const auto args = nlohmann::json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
    CHRONOS_FUZZ_CHECK(!args.is_discarded(), "arguments that are not JSON: %s", call.arguments.c_str());
  }
  CHRONOS_FUZZ_CHECK(tool_call_start(text) <= text.size(), "a start past the text");
  return 0;
}
