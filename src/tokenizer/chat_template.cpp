// Chat templates: per-family formatters (ChatML, Mistral [INST], Tulu) chosen from the template
// text and checked against transformers' apply_chat_template renders in the tests.
#include <optional>

#include "chronos/error.h"
#include "chronos/tokenizer.h"

namespace chronos {
namespace {

// Undoes the escapes of a Jinja string literal (\n, \t, \', \", \\).
std::string unescape_jinja(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      const char next = text[++i];
      out += next == 'n' ? '\n' : next == 't' ? '\t' : next;
    } else {
      out += text[i];
    }
  }
  return out;
}

// The default system prompt a ChatML template writes when the conversation has none: the text of
// a literal '<|im_start|>system\n...<|im_end|>' (Qwen1.5/Qwen2/Qwen2.5 templates).
std::optional<std::string> chatml_default_system(std::string_view tmpl) {
  constexpr std::string_view kOpen = "<|im_start|>system";
  size_t pos = 0;
  while ((pos = tmpl.find(kOpen, pos)) != std::string_view::npos) {
    pos += kOpen.size();
    size_t begin = pos;
    if (tmpl.substr(begin).starts_with("\\n")) {
      begin += 2;
    } else if (tmpl.substr(begin).starts_with("\n")) {
      begin += 1;
    } else {
      continue;
    }
    const size_t end = tmpl.find("<|im_end|>", begin);
    if (end == std::string_view::npos) break;
    const auto body = tmpl.substr(begin, end - begin);
    // A literal that stops at the quote concatenates the real system message instead.
    if (body.empty() || body.find_first_of("'\"{}") != std::string_view::npos) continue;
    return unescape_jinja(body);
  }
  return std::nullopt;
}

std::string render_chatml(std::string_view tmpl, std::span<const ChatMessage> messages,
                          bool add_generation_prompt) {
  std::string out;
  if (!messages.empty() && messages.front().role != "system") {
    if (const auto system = chatml_default_system(tmpl)) {
      out += "<|im_start|>system\n" + *system + "<|im_end|>\n";
    }
  }
  for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

// Mistral / Mixtral instruct: BOS, alternating user/assistant turns, [INST] ... [/INST].
// The first revision writes "[INST] " and "{answer}</s>"; the system-message revision writes
// " [INST] ", " {answer}</s>" and folds a leading system message into the first user turn.
std::string render_mistral(std::string_view tmpl, std::string_view bos, std::string_view eos,
                           std::span<const ChatMessage> messages) {
  const bool leading_space = tmpl.find("' [INST] '") != std::string_view::npos;
  const bool answer_space = tmpl.find("' ' + message['content']") != std::string_view::npos ||
                            tmpl.find("' ' + message.content") != std::string_view::npos;
  const bool supports_system = tmpl.find("system_message") != std::string_view::npos;
  std::optional<std::string> system;
  if (!messages.empty() && messages.front().role == "system") {
    if (!supports_system) throw_error("chat template: the Mistral template supports only user and assistant roles");
    system = messages.front().content;
    messages = messages.subspan(1);
  }
  std::string out;
  if (tmpl.find("bos_token") != std::string_view::npos) out += bos;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if ((m.role == "user") != (i % 2 == 0)) {
      throw_error("chat template: conversation roles must alternate user/assistant/user/assistant/...");
    }
    if (m.role == "user") {
      out += leading_space ? " [INST] " : "[INST] ";
      if (i == 0 && system) out += *system + "\n\n";
      out += m.content + " [/INST]";
    } else if (m.role == "assistant") {
      out += (answer_space ? " " : "") + m.content + std::string(eos);
    } else {
      throw_error("chat template: the Mistral template does not support role '{}'", m.role);
    }
  }
  return out;
}

// Tulu (OLMoE instruct): <|system|>, <|user|>, <|assistant|> blocks.
std::string render_tulu(std::string_view tmpl, std::string_view bos, std::string_view eos,
                        std::span<const ChatMessage> messages, bool add_generation_prompt) {
  std::string out;
  if (tmpl.find("bos_token") != std::string_view::npos) out += bos;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const bool last = i + 1 == messages.size();
    if (m.role == "system") {
      out += "<|system|>\n" + m.content + "\n";
    } else if (m.role == "user") {
      out += "<|user|>\n" + m.content + "\n";
    } else if (m.role == "assistant") {
      out += "<|assistant|>\n" + m.content + std::string(eos) + (last ? "" : "\n");
    }
    if (last && add_generation_prompt) out += "<|assistant|>\n";
  }
  return out;
}

}  // namespace

std::string render_chat_template(std::string_view template_text, std::string_view bos_token,
                                 std::string_view eos_token, std::span<const ChatMessage> messages,
                                 bool add_generation_prompt) {
  if (template_text.empty()) throw_error("chat template: the tokenizer has no chat template");
  if (template_text.find("<|im_start|>") != std::string_view::npos) {
    return render_chatml(template_text, messages, add_generation_prompt);
  }
  if (template_text.find("[INST]") != std::string_view::npos) {
    return render_mistral(template_text, bos_token, eos_token, messages);
  }
  if (template_text.find("<|user|>") != std::string_view::npos) {
    return render_tulu(template_text, bos_token, eos_token, messages, add_generation_prompt);
  }
  throw_error("chat template: unknown template family (not ChatML, Mistral [INST] or Tulu <|user|>)");
}

}  // namespace chronos
