// Chat templates: the model's own Jinja template, rendered with the variables and the message
// normalization of transformers' apply_chat_template.
#include "chronos/error.h"
#include "chronos/tokenizer.h"

namespace chronos {
namespace {

using ordered_json = nlohmann::ordered_json;

// transformers 5 drops the keys whose value is null (OpenAI clients send content: null next to
// tool_calls) and copies a message's reasoning, the first of reasoning_content, thinking and
// reasoning that is set, to "thinking" (placed first) and "reasoning_content" (placed last),
// the names the templates read.
ordered_json normalize_messages(const ordered_json& messages) {
  if (!messages.is_array()) throw_error("chat: messages must be a list of message objects");
  ordered_json normalized = ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const ordered_json& message = messages[i];
    if (!message.is_object()) throw_error("chat: message {} is not an object", i);
    ordered_json kept = ordered_json::object();
    for (const auto& [key, value] : message.items()) {
      if (!value.is_null()) kept[key] = value;
    }
    const ordered_json* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
      if (reasoning == nullptr && kept.contains(key)) reasoning = &kept[key];
    }
    if (reasoning == nullptr) {
      normalized.push_back(std::move(kept));
      continue;
    }
    ordered_json aliased = {{"thinking", *reasoning}};
    for (const auto& [key, value] : kept.items()) aliased[key] = value;
    aliased["reasoning_content"] = *reasoning;
    normalized.push_back(std::move(aliased));
  }
  return normalized;
}

}  // namespace

std::string render_chat_template(std::string_view template_text, const ChatRequest& request,
                                 std::span<const std::pair<std::string, std::string>> special_tokens,
                                 const jinja::RenderOptions& options) {
  if (template_text.empty())
    throw_error("chat template: the model has no chat template (give one with --chat-template FILE)");
  if (!request.tools.is_null() && !request.tools.is_array())
    throw_error("chat: tools must be a list of tool definitions");
  if (!request.documents.is_null() && !request.documents.is_array()) throw_error("chat: documents must be a list");
  if (!request.kwargs.is_object()) throw_error("chat: the template keyword arguments must be an object");
  ordered_json context = ordered_json::object();
  for (const auto& [name, token] : special_tokens) context[name] = token;
  context["messages"] = normalize_messages(request.messages);
  context["tools"] = request.tools;
  context["documents"] = request.documents;
  context["add_generation_prompt"] = request.add_generation_prompt;
  for (const auto& [key, value] : request.kwargs.items()) {
    if (key == "messages" || key == "tools" || key == "documents" || key == "add_generation_prompt") {
      throw_error("chat: '{}' is not a template keyword argument (it is given its own way)", key);
    }
    context[key] = value;
  }
  return jinja::Template::parse(template_text).render(context, options);
}

}  // namespace chronos
