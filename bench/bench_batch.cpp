// Aggregate decode throughput of several sequences in one forward: S sequences, each with its own
// short prompt, then steps of one row per sequence (S rows per forward), for each S listed. The
// routed experts of a layer are read once per step for all rows, so on a memory-bound machine the
// aggregate rate grows with S. MODEL is a checkpoint, or a pack: with --budget 0 every expert is
// read into the cache first (resident); with --budget F the experts stream through a cache of F
// times their bytes in wait mode, and the experts read from disk per step are reported.
//   chronos_bench_batch -m MODEL [--sequences 1,2,4,8] [-n 32] [--threads 2] [--budget 0.25]
//                       [--json FILE]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "chronos/backend.h"
#include "chronos/engine.h"
#include "chronos/error.h"
#include "chronos/expert_streamer.h"
#include "chronos/model.h"
#include "chronos/model_runner.h"
#include "chronos/thread_pool.h"

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace chronos;
  CLI::App app{"Aggregate decode tokens/s of several sequences in one forward"};
  std::string model_dir, json_path;
  int64_t steps = 32, prompt = 8;
  int threads = available_cpus();
  double budget = 0.0;
  std::vector<int64_t> sequence_counts = {1, 2, 4, 8};
  app.add_option("-m,--model", model_dir, "Model folder, GGUF file or pack")->required();
  app.add_option("-n,--steps", steps, "Decode steps per measurement (one row per sequence each)")
      ->capture_default_str();
  app.add_option("--prompt", prompt, "Prompt tokens per sequence, run before the timed steps")->capture_default_str();
  app.add_option("--sequences", sequence_counts, "Sequence counts to measure")->delimiter(',');
  app.add_option("--threads", threads, "Threads")->capture_default_str();
  app.add_option("--budget", budget, "A pack's expert cache as a fraction of its experts' bytes (0: all resident)")
      ->capture_default_str();
  app.add_option("--json", json_path, "Write the results as JSON");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto model = Model::load(model_dir);
    const ModelConfig& c = model->config();
    if (budget > 0.0 && !model->experts_streamed()) throw UsageError("--budget needs a pack");
    ThreadPool pool(threads);
    nlohmann::json results = nlohmann::json::array();
    fmt::print("model {} ({}), {} threads, {}\n", model_dir, c.arch_name(), threads,
               !model->experts_streamed() ? std::string("resident checkpoint")
               : budget > 0.0             ? fmt::format("pack streamed at {:.0f}% in wait mode", budget * 100)
                                          : std::string("pack, every expert resident"));
    fmt::print("{:>9} {:>12} {:>15} {:>14} {:>16}\n", "sequences", "steps/s", "decode tok/s", "experts/step",
               "disk MB/step");
    for (const int64_t n_seq : sequence_counts) {
      // A fresh cache per count, so that each starts from the same state.
      std::unique_ptr<Backend> backend;
      std::unique_ptr<ExpertStreamer> streamer;
      ForwardHooks hooks;
      if (model->experts_streamed()) {
        backend = make_cpu_backend();
        StreamerOptions options;
        options.budget_bytes = budget > 0.0 ? int64_t(double(model->sizes().expert_bytes) * budget)
                                            : model->sizes().expert_bytes * 2;  // slots are the largest extent each
        streamer = std::make_unique<ExpertStreamer>(*model, model_dir, *backend, options);
        if (budget <= 0.0) streamer->load_all();
        hooks = streamer->hooks();
      }
      const auto runner = make_cpu_runner(*model, pool, prompt + steps + 8, std::max<int64_t>(n_seq, 8), hooks, n_seq);
      const Engine engine(runner.get(), streamer.get());
      std::vector<float> logits(size_t(n_seq * c.n_vocab));
      std::vector<int32_t> slots;
      Batch batch;
      for (int64_t s = 0; s < n_seq; ++s) {
        slots.push_back(engine.add_sequence());
        for (int64_t i = 0; i < prompt; ++i)
          batch.add(slots.back(), i, int32_t(1 + (s * 131 + i * 7) % (c.n_vocab - 1)), i + 1 == prompt);
      }
      engine.forward(batch, logits.data());
      const StreamerStats before = streamer ? streamer->stats() : StreamerStats{};
      const double start = now_seconds();
      for (int64_t step = 0; step < steps; ++step) {
        batch.clear();
        for (int64_t s = 0; s < n_seq; ++s) {
          const float* row = logits.data() + s * c.n_vocab;
          batch.add(slots[size_t(s)], prompt + step, int32_t(std::max_element(row, row + c.n_vocab) - row), true);
        }
        engine.forward(batch, logits.data());
      }
      const double seconds = now_seconds() - start;
      double experts_per_step = 0.0, disk_mb_per_step = 0.0;
      if (streamer) {
        const StreamerStats after = streamer->stats();
        experts_per_step = double(after.lookups - before.lookups) / double(steps);
        disk_mb_per_step = double(after.prefetch.bytes_read - before.prefetch.bytes_read) / 1e6 / double(steps);
      }
      const double rate = double(n_seq * steps) / seconds;
      fmt::print("{:>9} {:>12.2f} {:>15.2f} {:>14} {:>16}\n", n_seq, double(steps) / seconds, rate,
                 streamer ? fmt::format("{:.1f}", experts_per_step) : "-",
                 streamer ? fmt::format("{:.1f}", disk_mb_per_step) : "-");
      results.push_back({{"sequences", n_seq},
                         {"threads", threads},
                         {"budget_fraction", budget},
                         {"steps_per_second", double(steps) / seconds},
                         {"decode_tokens_per_second", rate},
                         {"experts_per_step", experts_per_step},
                         {"disk_bytes_per_step", disk_mb_per_step * 1e6}});
    }
    if (!json_path.empty()) std::ofstream(json_path) << results.dump(2) << "\n";
  } catch (const Error& e) {
    fmt::print(stderr, "chronos_bench_batch: {}\n", e.what());
    return 1;
  }
  return 0;
}
