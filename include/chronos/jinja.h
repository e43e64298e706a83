// Jinja templates as Hugging Face chat templates use them: parsed once, rendered over JSON values
// with the environment transformers' apply_chat_template sets up (trim_blocks, lstrip_blocks,
// loop controls, its tojson, raise_exception and strftime_now; lists and dicts immutable).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace chronos::jinja {

// Bounds on one render, so that a hostile or broken template ends with an error instead of
// running away with the time or the memory of the process.
struct Limits {
  uint64_t max_steps = 10'000'000;             // expression and statement evaluations (about 1 s)
  size_t max_output_bytes = size_t{64} << 20;  // the rendered text, and any one string value
  int max_call_depth = 64;                     // nested macro calls
};

struct RenderOptions {
  Limits limits;
  std::optional<std::tm> now;  // the clock strftime_now reads; the local time when unset
};

namespace detail {
struct Program;
}

// A parsed template. Immutable: render() may run on several threads at once.
class Template {
 public:
  // Throws chronos::Error("<name> line N: ...") for a syntax error or a construct this
  // interpreter does not support (include, import, extends, ...): never a silent wrong render.
  static Template parse(std::string_view source, std::string_view name = "chat template");

  // Renders with the members of `context` (a JSON object) as the template's variables. Throws
  // chronos::Error("<name> line N: ...") for an error in the template (an undefined variable
  // used as a value, a wrong type, a limit reached) and for raise_exception, whose message it
  // carries.
  std::string render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const detail::Program> program_;
};

}  // namespace chronos::jinja
