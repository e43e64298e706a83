// libFuzzer target: a chat template parsed and rendered by the Jinja interpreter over a fixed
// conversation with tools. Bad input must be a chronos::Error (never a crash, a hang or a leak),
// within tight render limits; a template that renders must render the same text again.
#include <string>

#include "chronos/error.h"
#include "chronos/jinja.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json value = nlohmann::ordered_json::parse(R"({
    "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true, "documents": null,
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "h\u00e9llo \u65e5\u672c"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
        "function": {"name": "f", "arguments": {"x": 1, "y": [true, null]}}}]},
      {"role": "tool", "content": "{\"ok\": 1.5}"},
      {"role": "assistant", "content": "<think>a</think>b", "reasoning_content": "a"}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
      "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}]})");
  return value;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chronos;
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  jinja::RenderOptions options;
  options.limits.max_steps = 200'000;
  options.limits.max_output_bytes = size_t{1} << 20;
  options.limits.max_call_depth = 16;
  options.now = std::tm{};
  std::string first;
  try {
    first = jinja::Template::parse(source, "fuzz").render(context(), options);
  } catch (const Error&) {
    return 0;
  }
  if (jinja::Template::parse(source, "fuzz").render(context(), options) != first) __builtin_trap();
  return 0;
}
