// The chat flags shared by generate and chat-template: the conversation (--messages, --tools),
// the template's extra variables (--chat-kwarg) and a template of the user's (--chat-template).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "chronos/tokenizer.h"

namespace chronos::cli {

struct ChatFlags {
  std::string messages_file;        // JSON: an OpenAI messages array, or an object with "messages" (and "tools")
  std::string tools_file;           // JSON: a list of tool definitions
  std::vector<std::string> kwargs;  // KEY=VALUE; VALUE is JSON when it parses as JSON, else a string
  std::string template_file;
  std::string reasoning_effort;  // low, medium or high: the template's reasoning_effort (gpt-oss)
};

void add_chat_flags(CLI::App* app, ChatFlags& flags);

// Whether any chat flag was given.
bool any_chat_flag(const ChatFlags& flags);

// The request the flags describe (messages and tools read from their files, "-" being standard
// input); throws Error naming the file or the flag for anything malformed.
ChatRequest read_chat_request(const ChatFlags& flags);

// The whole text of the file at `path` ("-": standard input); throws Error naming the file, as
// a `what` file, when it is a folder, cannot be opened or cannot be read.
std::string read_input_file(const std::string& path, std::string_view what);

// The text of --chat-template FILE (empty without it).
std::string read_chat_template_file(const ChatFlags& flags);

// Writes `text` to standard output; a closed pipe returns false, any other write error throws.
bool write_stdout(std::string_view text);

}  // namespace chronos::cli
