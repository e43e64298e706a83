// Decode throughput against the memory-bandwidth limit, measured side by side in one run:
// limit = bytes of weights touched per token / measured read bandwidth (same thread count), and
// prefill throughput of a prompt at several batch sizes (the -b of chronos generate).
//   chronos_bench_decode -m MODEL [-n TOKENS] [--threads 1,2] [--prompt 128] [--batches 32,64,128]
//                        [--json FILE]
// MODEL is a checkpoint, or a pack (chronos pack, any --expert-type) whose experts are all read
// into the expert cache first: the resident run of that weight type. --prompt 0 skips prefill.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "chronos/backend.h"
#include "chronos/error.h"
#include "chronos/expert_streamer.h"
#include "chronos/model.h"
#include "chronos/thread_pool.h"

namespace chronos {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int64_t bytes_of(const WeightView& w) { return w.rows * dtype_row_bytes(w.dtype, w.cols); }

// Reads a buffer far larger than the caches with every thread of the pool, as dot products
// against a block of ones (in L1) and as the matrix-vector products of the decode (F32, BF16 and
// Q8_0 weights over the same bytes), and returns the best rate of `repeats` tries of any of them in
// bytes per second: the read bandwidth the best kernel reaches, so the limit is never understated.
double read_bandwidth(ThreadPool& pool, const std::vector<float>& buffer, int repeats) {
  constexpr int64_t kBlock = 8192;  // 32 KiB of ones: stays in L1/L2
  const std::vector<float> ones(kBlock, 1.0f);
  const int64_t n_blocks = std::ssize(buffer) / kBlock;
  std::vector<double> sums(size_t(n_blocks / 64 + 1));
  double best = 0.0;
  for (int r = 0; r < repeats; ++r) {
    const double start = now_seconds();
    pool.parallel_for(n_blocks, 64, [&](int64_t begin, int64_t end) {
      double s = 0.0;
      for (int64_t b = begin; b < end; ++b) s += ops::dot(buffer.data() + b * kBlock, ones.data(), kBlock);
      sums[size_t(begin / 64)] += s;
    });
    best = std::max(best, double(n_blocks * kBlock) * sizeof(float) / (now_seconds() - start));
  }
  if (sums[0] == -1.0) fmt::print(stderr, " ");  // keep the sums alive
  // The same bytes as weight matrices (1.0f is finite as BF16 halves and as Q8_0 scales and levels).
  const int64_t bytes = n_blocks * kBlock * int64_t(sizeof(float)), cols = 1024;
  std::vector<float> x(size_t(cols), 1.0f), y(size_t(bytes / cols));
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kQ8_0}) {
    const int64_t rows = bytes / dtype_row_bytes(dtype, cols);
    const WeightView as_matrix{buffer.data(), dtype, rows, cols};
    for (int r = 0; r < repeats; ++r) {
      const double start = now_seconds();
      ops::matmul(y.data(), x.data(), as_matrix, 1, pool);
      best = std::max(best, double(rows * dtype_row_bytes(dtype, cols)) / (now_seconds() - start));
    }
  }
  return best;
}

// memcpy of half the buffer into the other half, split over the pool: bytes copied per second.
double copy_bandwidth(ThreadPool& pool, std::vector<float>& buffer, int repeats) {
  const int64_t half = std::ssize(buffer) / 2;
  double best = 0.0;
  for (int r = 0; r < repeats; ++r) {
    const double start = now_seconds();
    pool.parallel_for(half, 1 << 16, [&](int64_t begin, int64_t end) {
      std::memcpy(buffer.data() + half + begin, buffer.data() + begin, size_t(end - begin) * sizeof(float));
    });
    best = std::max(best, double(half) * sizeof(float) / (now_seconds() - start));
  }
  return best;
}

struct TouchedBytes {
  int64_t dense = 0;    // attention, norms, routers, shared experts, dense MLPs, LM head, one embedding row
  int64_t experts = 0;  // the routed experts actually selected, averaged per token
};

}  // namespace
}  // namespace chronos

int main(int argc, char** argv) {
  using namespace chronos;
  CLI::App app{"Decode tokens/s versus the memory-bandwidth limit"};
  std::string model_dir, json_path;
  int64_t n_tokens = 64;
  std::vector<int> thread_counts = {1, available_cpus()};
  int64_t prompt_tokens = 128;
  std::vector<int64_t> batch_sizes = {32, 64, 128};
  app.add_option("-m,--model", model_dir, "Model folder")->required();
  app.add_option("-n,--tokens", n_tokens, "Decode steps per measurement")->capture_default_str();
  app.add_option("--threads", thread_counts, "Thread counts to measure")->delimiter(',');
  app.add_option("--prompt", prompt_tokens, "Prompt tokens per prefill measurement (0: none)")->capture_default_str();
  app.add_option("--batches", batch_sizes, "Prefill batch sizes (tokens per forward step)")->delimiter(',');
  app.add_option("--json", json_path, "Write the results as JSON");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto model = Model::load(model_dir);
    const ModelConfig& c = model->config();
    const ModelWeights& w = model->weights();
    // A pack: every expert read into a cache that holds them all, before anything is timed.
    std::unique_ptr<Backend> backend;
    std::unique_ptr<ExpertStreamer> streamer;
    if (model->experts_streamed()) {
      backend = make_cpu_backend();
      StreamerOptions options;
      options.budget_bytes = model->sizes().expert_bytes * 2;  // slots are the largest extent each
      streamer = std::make_unique<ExpertStreamer>(*model, model_dir, *backend, options);
      streamer->load_all();
    }

    // Touch every page once so the timed runs read RAM, not the disk.
    uint64_t checksum = 0;
    auto touch = [&](const WeightView& m) {
      const auto* bytes = static_cast<const unsigned char*>(m.data);
      for (int64_t off = 0; off < bytes_of(m); off += 4096) checksum += bytes[off];
    };
    touch(w.tok_embd);
    touch(w.output);
    for (const auto& l : w.layers) {
      for (const WeightView* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.router, &l.shared_gate})
        if (m->data) touch(*m);
      for (const FfnWeights* f : {&l.shared, &l.dense})
        if (f->present()) {
          touch(f->gate);
          touch(f->up);
          touch(f->down);
        }
      for (const auto& e : l.experts) {
        touch(e.gate);
        touch(e.up);
        touch(e.down);
      }
    }
    if (checksum == 1) fmt::print(stderr, " ");

    // Dense bytes per token; routed bytes counted from the real routing of the run.
    TouchedBytes touched;
    touched.dense = bytes_of(w.output) + dtype_row_bytes(w.tok_embd.dtype, c.n_embd);
    for (int64_t il = 0; il < c.n_layer; ++il) {
      const LayerWeights& l = w.layers[size_t(il)];
      touched.dense += bytes_of(l.wq) + bytes_of(l.wk) + bytes_of(l.wv) + bytes_of(l.wo);
      if (c.is_moe_layer(il))
        touched.dense += bytes_of(l.router) + l.shared.n_bytes() + bytes_of(l.shared_gate);
      else
        touched.dense += l.dense.n_bytes();
    }
    int64_t routed_bytes = 0, route_events = 0;  // one event per (token, MoE layer)
    ForwardHooks hooks;
    hooks.route = [&](const RouteEvent& ev) {
      for (int32_t e : ev.expert_ids)
        routed_bytes +=
            streamer ? model->sizes().bytes_per_expert : w.layers[size_t(ev.layer)].experts[size_t(e)].n_bytes();
      ++route_events;
    };
    if (streamer) hooks = combine(streamer->hooks(), hooks);

    std::vector<float> buffer(size_t(1) << 28);  // 1 GiB, far larger than the caches
    std::fill(buffer.begin(), buffer.end(), 1.0f);
    nlohmann::json results = nlohmann::json::array();
    fmt::print("model {} ({}): {} layers, {} experts top-{}, expert dtype {}\n", model_dir, c.arch_name(), c.n_layer,
               c.n_expert, c.n_expert_used, dtype_name(model->sizes().expert_dtype));
    fmt::print(
        "limit = bytes touched per token / read bandwidth (the best of a sum and the F32, BF16 and Q8_0 matvecs)\n");
    std::string prefill_header;
    for (int64_t b : batch_sizes) prefill_header += fmt::format(" {:>12}", fmt::format("prefill b{}", b));
    fmt::print("{:>7} {:>10} {:>10} {:>10} {:>12} {:>13} {:>9}{}\n", "threads", "read GB/s", "copy GB/s", "MB/token",
               "limit tok/s", "decode tok/s", "of limit", prompt_tokens > 0 ? prefill_header : "");
    for (int threads : thread_counts) {
      ThreadPool pool(threads);
      const double bandwidth = read_bandwidth(pool, buffer, 8);
      const double copy = copy_bandwidth(pool, buffer, 4);
      KvCache kv(c, n_tokens + 8);
      auto scratch = model->make_scratch(8, kv.n_ctx());
      std::vector<float> logits(size_t(c.n_vocab));
      const std::vector<int32_t> prompt = {1, 2, 3, 4};
      model->forward(prompt, 0, kv, *scratch, pool, logits.data(), false, hooks);
      routed_bytes = 0;
      route_events = 0;
      int32_t token = 5;
      const double start = now_seconds();
      for (int64_t i = 0; i < n_tokens; ++i) {
        model->forward(std::span<const int32_t>(&token, 1), 4 + i, kv, *scratch, pool, logits.data(), false, hooks);
        token = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
      }
      const double seconds = now_seconds() - start;
      const double routed_tokens = double(route_events) / double(std::max<int64_t>(c.n_moe_layers(), 1));
      const double per_token = double(touched.dense) + double(routed_bytes) / std::max(routed_tokens, 1.0);
      const double limit = bandwidth / per_token;
      const double rate = double(n_tokens) / seconds;
      // Prefill: the prompt (tokens 1..prompt, all within the vocabulary) from position 0 into an
      // empty cache, in forward steps of `b` tokens, logits of the last token only (as generate).
      nlohmann::json prefill = nlohmann::json::object();
      std::string prefill_text;
      if (prompt_tokens > 0) {
        std::vector<int32_t> tokens(static_cast<size_t>(prompt_tokens));
        for (int64_t i = 0; i < prompt_tokens; ++i) tokens[size_t(i)] = int32_t(1 + i % (c.n_vocab - 1));
        for (int64_t b : batch_sizes) {
          KvCache prefill_kv(c, prompt_tokens + 8);
          auto prefill_scratch = model->make_scratch(b, prefill_kv.n_ctx());
          const double prefill_start = now_seconds();
          model->forward(tokens, 0, prefill_kv, *prefill_scratch, pool, logits.data(), false, hooks);
          const double prefill_rate = double(prompt_tokens) / (now_seconds() - prefill_start);
          prefill[std::to_string(b)] = prefill_rate;
          prefill_text += fmt::format(" {:>12.2f}", prefill_rate);
        }
      }
      fmt::print("{:>7} {:>10.2f} {:>10.2f} {:>10.1f} {:>12.2f} {:>13.2f} {:>8.1f}%{}\n", threads, bandwidth / 1e9,
                 copy / 1e9, per_token / 1e6, limit, rate, 100.0 * rate / limit, prefill_text);
      results.push_back({{"threads", threads},
                         {"read_bandwidth_bytes_per_second", bandwidth},
                         {"copy_bandwidth_bytes_per_second", copy},
                         {"bytes_per_token", per_token},
                         {"limit_tokens_per_second", limit},
                         {"decode_tokens_per_second", rate},
                         {"fraction_of_limit", rate / limit},
                         {"prompt_tokens", prompt_tokens},
                         {"prefill_tokens_per_second_by_batch", prefill}});
    }
    if (!json_path.empty()) std::ofstream(json_path) << results.dump(2) << "\n";
  } catch (const Error& e) {
    fmt::print(stderr, "chronos_bench_decode: {}\n", e.what());
    return 1;
  }
  return 0;
}
