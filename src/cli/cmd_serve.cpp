// chronos serve: the OpenAI API on HTTP over one loaded model, many requests batched together.
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <memory>

#include "chronos/batch_generate.h"
#include "chronos/error.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/session.h"
#include "server/server.h"

namespace chronos::cli {
namespace {

struct ServeArgs {
  GenerateArgs session;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  std::string alias;
  int64_t parallel = 4;
  int64_t max_queue = 16;
  int64_t max_body_mib = 4;
  bool no_prefix_reuse = false;
};

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.starts_with("127.");
}

// The name /v1/models lists: --alias, else the model folder's or file's name.
std::string model_id(const ServeArgs& args, const std::filesystem::path& dir) {
  if (!args.alias.empty()) return args.alias;
  std::filesystem::path p = dir;
  if (p.filename().empty()) p = p.parent_path();
  return is_gguf_path(p) ? p.stem().string() : p.filename().string();
}

int run_serve(const ServeArgs& args, bool n_predict_given, bool seed_given) {
  const GenerateArgs& g = args.session;
  if (g.verbose) spdlog::set_level(spdlog::level::debug);
  if (!g.chat_flags.messages_file.empty() || !g.chat_flags.tools_file.empty())
    throw UsageError("serve takes the conversation and tools from each request: no --messages or --tools");
  if (!args.api_key.empty() && args.api_key.find_first_of(" \t\r\n") != std::string::npos)
    throw UsageError("--api-key: the key holds whitespace");
  // SIGINT and SIGTERM end the server through sigwait below; every thread made from here on
  // (the thread pool, the prefetcher, HTTP and engine threads) inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  const ChatRequest chat_flags_request = read_chat_request(g.chat_flags);
  server::ServerOptions options;
  options.chat_template = read_chat_template_file(g.chat_flags);
  options.chat_kwargs = chat_flags_request.kwargs;
  Session s = open_session(g);
  options.defaults = s.options;
  options.random_seed = !seed_given;
  // Without -n a request without max_tokens may fill its context.
  if (!n_predict_given) options.defaults.max_new_tokens = s.n_ctx;
  options.host = args.host;
  options.port = args.port;
  options.api_key = args.api_key;
  options.model_id = model_id(args, s.dir);
  options.n_seq = args.parallel;
  options.max_queue = args.max_queue;
  options.max_body_bytes = args.max_body_mib << 20;

  BatchGenerator generator(*s.model, *s.tokenizer, make_runner(s, g, args.parallel), args.parallel, g.batch_size);
  generator.stream_experts_with(s.streamer.get());
  generator.reuse_prefixes(!args.no_prefix_reuse);
  log_session(s, generator.runner(), fmt::format("{} sequences at once, a queue of {}", args.parallel, args.max_queue));
  if (!is_loopback(args.host) && args.api_key.empty())
    spdlog::warn("serve: listening on {} without --api-key: anyone who reaches this address can use the model",
                 args.host);

  server::Server server(*s.model, *s.tokenizer, generator, s.streamer.get(), options);
  const int port = server.start();
  fmt::print(stderr, "chronos: serving '{}' on http://{}:{} ({} sequences at once, {} queued at most)\n",
             options.model_id, args.host, port, args.parallel, args.max_queue);
  int signal = 0;
  sigwait(&stop_signals, &signal);
  fmt::print(stderr, "chronos: {}: stopping\n", signal == SIGINT ? "interrupted" : "terminated");
  server.stop();
  print_streamer_summary(s);
  return 0;
}

}  // namespace

Command register_serve(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* sub = app.add_subcommand("serve", "Serve the model over HTTP: the OpenAI API, many requests batched");
  add_session_flags(sub, args->session);
  add_chat_flags(sub, args->session.chat_flags);
  sub->add_option("--host", args->host, "Address to listen on (loopback by default)")->capture_default_str();
  sub->add_option("--port", args->port, "Port to listen on (0: any free port, printed on stderr)")
      ->capture_default_str()
      ->check(count_in(0, 65535));
  sub->add_option("--api-key", args->api_key, "Require `Authorization: Bearer KEY` on every endpoint but /health");
  sub->add_option("--alias", args->alias, "The model's name in /v1/models and requests (default: its folder's name)");
  sub->add_option("--parallel", args->parallel, "Sequences generated at once (KV slots)")
      ->capture_default_str()
      ->check(count_in<int64_t>(1, 256));
  sub->add_option("--max-queue", args->max_queue, "Requests waiting beyond --parallel; more are answered 503")
      ->capture_default_str()
      ->check(count_in<int64_t>(0, 4096));
  sub->add_option("--max-body", args->max_body_mib, "Largest request body, MiB")
      ->capture_default_str()
      ->check(count_in<int64_t>(1, 1024));
  sub->add_flag("--no-prefix-reuse", args->no_prefix_reuse,
                "Run every prompt whole (by default a prompt that begins with the tokens a finished sequence left in "
                "its KV slot continues from them)");
  return Command{sub,
                 [args, sub] { return run_serve(*args, sub->count("--n-predict") > 0, sub->count("--seed") > 0); }};
}

}  // namespace chronos::cli
