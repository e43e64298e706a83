// chronos: the single binary. Parses the command line, runs a subcommand, maps errors to exit codes.
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <sys/resource.h>
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "chronos/error.h"
#include "cli/commands.h"

namespace chronos::cli {

std::filesystem::path resolve_model_dir(const std::string& flag_value) {
  if (!flag_value.empty()) return flag_value;
  if (const char* env = std::getenv("CHRONOS_MODEL"); env != nullptr && *env != '\0') return env;
  return CHRONOS_DEFAULT_MODEL_DIR;
}

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

}  // namespace chronos::cli

int main(int argc, char** argv) {
  using namespace chronos;
  std::signal(SIGPIPE, SIG_IGN);  // a closed pipe ends generation through a failed write instead
  auto logger = spdlog::stderr_logger_st("chronos");
  logger->set_pattern("chronos: %^%l%$: %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::warn);

  CLI::App app{"Chronos: Mixture-of-Experts inference with experts streamed from disk"};
  app.set_version_flag("--version", std::string(CHRONOS_VERSION));
  app.require_subcommand(1);
  const std::vector<cli::Command> commands = {cli::register_generate(app),
                                              cli::register_inspect(app),
                                              cli::register_widen(app),
                                              cli::register_trace(app),
                                              cli::register_pack(app),
                                              cli::register_bench(app),
                                              cli::register_train_predictors(app),
                                              cli::register_eval_predictors(app),
                                              cli::register_perplexity(app),
                                              cli::register_chat_template(app),
                                              cli::register_tokenize(app),
                                              cli::register_serve(app)};

  if (argc > 1 && argv[1][0] != '-') {
    const std::string name = argv[1];
    if (std::none_of(commands.begin(), commands.end(),
                     [&](const cli::Command& c) { return c.app->get_name() == name; })) {
      std::string known;
      for (const cli::Command& c : commands) known += (known.empty() ? "" : ", ") + c.app->get_name();
      std::fprintf(stderr, "chronos: unknown command '%s' (commands: %s)\n", name.c_str(), known.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return 0;
  } catch (const CLI::CallForVersion&) {
    std::printf("chronos %s\n", CHRONOS_VERSION);
    return 0;
  } catch (const CLI::ParseError& e) {
    // Subcommand help arrives as CallForHelp from the subcommand's parse.
    if (e.get_name() == "CallForHelp") {
      for (CLI::App* sub : app.get_subcommands()) std::fputs(sub->help().c_str(), stdout);
      return 0;
    }
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::fprintf(stderr, "chronos: %s (see chronos --help)\n", message.c_str());
    return 2;
  }
  try {
    for (const cli::Command& command : commands)
      if (command.app->parsed()) return command.run();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "chronos: %s\n", e.what());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "chronos: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "chronos: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chronos: %s\n", e.what());
    return 1;
  }
  return 2;
}
