// The subcommands of the chronos binary: each registers its flags and returns its runner.
#pragma once

#include <CLI/CLI.hpp>

#include "chronos/file_util.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

namespace chronos::cli {

// generate's default prompt tokens per prefill step (-b): 128 beat 64 in 8 of 10 side-by-side runs,
// 64 beat 32 by 10-25% (docs/quantization.md). inspect sizes the sliding layers' KV ring with it.
inline constexpr int64_t kDefaultPrefillBatch = 128;

// A registered subcommand and what to run when it is chosen.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

Command register_generate(CLI::App& app);
Command register_inspect(CLI::App& app);
Command register_widen(CLI::App& app);
Command register_trace(CLI::App& app);
Command register_pack(CLI::App& app);
Command register_bench(CLI::App& app);
Command register_train_predictors(CLI::App& app);
Command register_eval_predictors(CLI::App& app);
Command register_perplexity(CLI::App& app);
Command register_chat_template(CLI::App& app);
Command register_tokenize(CLI::App& app);
Command register_serve(CLI::App& app);

// -m, or $CHRONOS_MODEL, or the bundled default model.
std::filesystem::path resolve_model_dir(const std::string& flag_value);

// Peak resident set size of this process in bytes.
int64_t peak_rss_bytes();

}  // namespace chronos::cli
