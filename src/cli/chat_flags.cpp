// The chat flags: reading the conversation, tools and template keyword arguments of a request.
#include "cli/chat_flags.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>

#include "chronos/error.h"

namespace chronos::cli {
namespace {

using ordered_json = nlohmann::ordered_json;

ordered_json read_json(const std::string& path, std::string_view what) {
  const std::string text = read_input_file(path, what);
  try {
    return ordered_json::parse(text);
  } catch (const ordered_json::exception& e) {
    throw_error("{}: not valid JSON ({})", path == "-" ? "standard input" : path, e.what());
  }
}

}  // namespace

std::string read_input_file(const std::string& path, std::string_view what) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
  if (std::error_code ec; std::filesystem::is_directory(path, ec))
    throw_error("{}: is a folder, not a {} file", path, what);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error("{}: cannot open the {} file", path, what);
  std::string text(std::istreambuf_iterator<char>(in), {});
  if (in.bad()) throw_error("{}: read error", path);
  return text;
}

void add_chat_flags(CLI::App* app, ChatFlags& flags) {
  app->add_option(
      "--messages", flags.messages_file,
      "The conversation as JSON: an OpenAI messages array, or an object with \"messages\" (and \"tools\"); - "
      "reads standard input");
  app->add_option("--tools", flags.tools_file, "Tool definitions as a JSON list (OpenAI function tools)");
  app->add_option(
      "--chat-kwarg", flags.kwargs,
      "A variable for the chat template, KEY=VALUE (e.g. enable_thinking=false); VALUE is JSON when it parses "
      "as JSON, else a string (repeatable)");
  app->add_option("--chat-template", flags.template_file, "Render with this Jinja template instead of the model's");
  app->add_option("--reasoning-effort", flags.reasoning_effort,
                  "How long a reasoning model thinks: low, medium or high (the chat template's reasoning_effort, "
                  "as gpt-oss's system message states it)")
      ->check(CLI::IsMember({"low", "medium", "high"}));
}

bool any_chat_flag(const ChatFlags& flags) {
  return !flags.messages_file.empty() || !flags.tools_file.empty() || !flags.kwargs.empty() ||
         !flags.template_file.empty() || !flags.reasoning_effort.empty();
}

ChatRequest read_chat_request(const ChatFlags& flags) {
  ChatRequest request;
  if (!flags.messages_file.empty()) {
    ordered_json document = read_json(flags.messages_file, "messages");
    if (document.is_object() && document.contains("messages")) {
      if (document.contains("tools")) request.tools = document["tools"];
      document = document["messages"];
    }
    if (!document.is_array()) {
      throw_error("{}: the messages must be a JSON list of message objects (or an object with \"messages\")",
                  flags.messages_file);
    }
    for (size_t i = 0; i < document.size(); ++i) {
      if (!document[i].is_object() || !document[i].contains("role") || !document[i]["role"].is_string()) {
        throw_error("{}: message {} is not an object with a string \"role\"", flags.messages_file, i);
      }
    }
    request.messages = std::move(document);
  }
  if (!flags.tools_file.empty()) {
    request.tools = read_json(flags.tools_file, "tools");
    if (!request.tools.is_array()) throw_error("{}: the tools must be a JSON list", flags.tools_file);
  }
  for (const std::string& kwarg : flags.kwargs) {
    const size_t equals = kwarg.find('=');
    if (equals == std::string::npos || equals == 0) {
      throw UsageError(fmt::format("--chat-kwarg {}: expected KEY=VALUE", kwarg));
    }
    const std::string key = kwarg.substr(0, equals);
    const std::string value = kwarg.substr(equals + 1);
    ordered_json parsed = ordered_json::parse(value, nullptr, /*allow_exceptions=*/false);
    request.kwargs[key] = parsed.is_discarded() ? ordered_json(value) : std::move(parsed);
  }
  if (!flags.reasoning_effort.empty()) {
    if (request.kwargs.contains("reasoning_effort"))
      throw UsageError("--reasoning-effort and --chat-kwarg reasoning_effort=... both given: use one");
    request.kwargs["reasoning_effort"] = flags.reasoning_effort;
  }
  return request;
}

std::string read_chat_template_file(const ChatFlags& flags) {
  if (flags.template_file.empty()) return {};
  std::string text = read_input_file(flags.template_file, "chat template");
  if (text.empty()) throw_error("{}: the chat template file is empty", flags.template_file);
  return text;
}

bool write_stdout(std::string_view text) {
  if (std::fwrite(text.data(), 1, text.size(), stdout) == text.size() && std::fflush(stdout) == 0) return true;
  const int error = errno != 0 ? errno : EIO;
  if (error != EPIPE) throw_error("standard output: cannot write: {}", std::strerror(error));
  return false;
}

}  // namespace chronos::cli
