// chronos chat-template and chronos tokenize: what the model's chat template and tokenizer make
// of a conversation or a text, for debugging prompts.
#include <fmt/format.h>

#include <optional>

#include "chronos/error.h"
#include "chronos/tokenizer.h"
#include "cli/chat_flags.h"
#include "cli/commands.h"
#include "cli/open_tokenizer.h"

namespace chronos::cli {
namespace {

struct ChatTemplateArgs {
  std::string model;
  ChatFlags chat;
  bool no_generation_prompt = false;
};

int run_chat_template(const ChatTemplateArgs& args) {
  if (args.chat.messages_file.empty()) throw UsageError("chat-template needs --messages FILE.json");
  ChatRequest request = read_chat_request(args.chat);
  request.add_generation_prompt = !args.no_generation_prompt;
  const std::string override_text = read_chat_template_file(args.chat);
  const Tokenizer tokenizer = open_tokenizer(resolve_model_dir(args.model));
  write_stdout(tokenizer.apply_chat_template(request, override_text));
  return 0;
}

struct TokenizeArgs {
  std::string model;
  std::optional<std::string> text;
  std::optional<std::string> file;
  bool ids_only = false;
  bool no_special = false;
};

int run_tokenize(const TokenizeArgs& args) {
  const std::string text = args.text ? *args.text : read_input_file(args.file.value_or("-"), "text");
  const Tokenizer tokenizer = open_tokenizer(resolve_model_dir(args.model));
  const std::vector<int32_t> ids = tokenizer.encode(text, !args.no_special);
  std::string out;
  if (args.ids_only) {
    out = fmt::format("[{}]\n", fmt::join(ids, ", "));
  } else {
    for (const int32_t id : ids) {
      out += fmt::format("{}\t{}\n", id, nlohmann::json(std::string(tokenizer.id_to_token(id))).dump());
    }
  }
  write_stdout(out);
  return 0;
}

}  // namespace

Command register_chat_template(CLI::App& app) {
  auto args = std::make_shared<ChatTemplateArgs>();
  CLI::App* sub = app.add_subcommand(
      "chat-template",
      "Print a conversation rendered by the model's chat template, as transformers' apply_chat_template does");
  sub->add_option("-m,--model", args->model,
                  "Model folder or .gguf file; default: $CHRONOS_MODEL or the bundled model");
  add_chat_flags(sub, args->chat);
  sub->add_flag("--no-generation-prompt", args->no_generation_prompt,
                "Do not open an assistant turn at the end (add_generation_prompt=False)");
  return Command{sub, [args] { return run_chat_template(*args); }};
}

Command register_tokenize(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* sub = app.add_subcommand("tokenize", "Print the tokens of a text (-p, -f or stdin): id and token per line");
  sub->add_option("-m,--model", args->model,
                  "Model folder or .gguf file; default: $CHRONOS_MODEL or the bundled model");
  auto* p = sub->add_option("-p,--prompt", args->text, "The text");
  sub->add_option("-f,--file", args->file, "Read the text from a file")->excludes(p);
  sub->add_flag("--ids", args->ids_only, "Print only the ids, as one JSON list");
  sub->add_flag("--no-special", args->no_special, "Do not add the tokenizer's special tokens (BOS)");
  return Command{sub, [args] { return run_tokenize(*args); }};
}

}  // namespace chronos::cli
