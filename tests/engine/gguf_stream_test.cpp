// A GGUF file's routed experts streamed in place (no pack): each expert's three slices of the
// stacked ffn_*_exps tensors read as aligned pieces into one cache slot. At one and two slots in
// wait mode, under every prefetch mode and eviction policy, with reads delayed at random, the run
// equals the resident model logit for logit; fallback counts its misses; predictors come from a
// sidecar folder and must be this file's; a file changed or truncated after the model loaded is a
// clear error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "chronos/backend.h"
#include "chronos/error.h"
#include "chronos/expert_streamer.h"
#include "chronos/gguf.h"
#include "chronos/model_runner.h"
#include "chronos/pack.h"
#include "chronos/pack_format.h"
#include "chronos/predictors.h"
#include "chronos/thread_pool.h"
#include "chronos/tokenizer.h"
#include "chronos/trace.h"
#include "chronos/trace_file.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

fs::path gguf_fixture(const std::string& name) { return fs::path(CHRONOS_TEST_DATA_DIR) / "gguf" / (name + ".gguf"); }

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

// Making a streamer over `file` with `options` throws Error, its message holding `words`.
void expect_streamer_refused(const Model& model, const fs::path& file, const StreamerOptions& options,
                             const std::string& words) {
  const auto backend = make_cpu_backend();
  try {
    ExpertStreamer streamer(model, file, *backend, options);
    ADD_FAILURE() << "the streamer was made; expected an error saying: " << words;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

struct RunResult {
  std::vector<int32_t> tokens;  // the prompt's greedy continuation
  std::vector<float> logits;    // every position's
  StreamerStats stats;
};

// A fixed prompt, then `n_decode` greedy steps, resident (options == nullptr) or streamed from the
// file in place.
RunResult run(const fs::path& file, const StreamerOptions* options, int64_t n_decode = 12) {
  const auto model = Model::load(file, ModelLoadOptions{.stream_gguf_experts = options != nullptr});
  EXPECT_EQ(model->experts_streamed(), options != nullptr);
  const ModelConfig& c = model->config();
  ThreadPool pool(2);
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ExpertStreamer> streamer;
  if (options != nullptr) {
    backend = make_cpu_backend();
    streamer = std::make_unique<ExpertStreamer>(*model, file, *backend, *options);
  }
  auto runner = make_cpu_runner(*model, pool, 64, 8, streamer ? streamer->hooks() : ForwardHooks{});
  std::vector<int32_t> prompt(10);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 53 + 7) % size_t(c.n_vocab));
  const int64_t n = std::ssize(prompt);
  RunResult out;
  out.logits.resize(size_t((n + n_decode) * c.n_vocab));
  if (streamer) {
    streamer->begin_request();
    streamer->begin_step();
  }
  runner->forward(prompt, 0, out.logits.data(), true);
  for (int64_t step = 0; step < n_decode; ++step) {
    const float* last = out.logits.data() + (n + step - 1) * c.n_vocab;
    const auto next = int32_t(std::max_element(last, last + c.n_vocab) - last);
    out.tokens.push_back(next);
    if (streamer) streamer->begin_step();
    runner->forward({&next, 1}, n + step, out.logits.data() + (n + step) * c.n_vocab, false);
  }
  if (streamer) out.stats = streamer->stats();
  return out;
}

class GgufStream : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = fs::temp_directory_path() / fmt::format("chronos_gguf_stream_{}_{}", ::getpid(), counter_++);
    fs::remove_all(work_);
    fs::create_directories(work_);
  }
  void TearDown() override { fs::remove_all(work_); }

  // Predictors trained briefly on traces of the file, in a sidecar folder.
  fs::path sidecar(const fs::path& file, const std::string& name) {
    const auto model = Model::load(file);
    const Tokenizer tokenizer = Tokenizer::from_gguf(*model->gguf_file());
    const std::vector<PromptRecord> prompts = {{"a", "prose", "The river keeps its own time"},
                                               {"b", "code", "int main() { return 0; }"},
                                               {"c", "prose", "A mill by the river, and the"}};
    TraceOptions options;
    options.max_new_tokens = 16;
    ThreadPool pool(2);
    record_traces(*model, tokenizer, file, prompts, work_ / (name + "_traces"), options, pool,
                  [](const TraceProgress&) {});
    PredictorTrainOptions train;
    train.epochs = 2;
    train.rank = 16;
    train.intent_hidden = 16;
    train.intent_epochs = 4;
    const std::vector<TraceReader> traces = open_traces(work_ / (name + "_traces"));
    train_predictors(traces, work_ / name, train, pool);
    return work_ / name;
  }

  fs::path copy_of(const fs::path& file) {
    const fs::path out = work_ / file.filename();
    fs::copy_file(file, out);
    return out;
  }

  fs::path work_;
  static inline int counter_ = 0;
};

// The manifest the model describes: the experts are not bound, every piece is an aligned read that
// holds its tensor, and the expert bytes are the resident model's.
TEST_F(GgufStream, ExpertsAreSlicesOfTheFileReadAsAlignedPieces) {
  const fs::path file = gguf_fixture("mixtral-q4_k_m");
  const auto resident = Model::load(file);
  const auto streamed = Model::load(file, ModelLoadOptions{.stream_gguf_experts = true});
  ASSERT_NE(streamed->gguf_experts(), nullptr);
  EXPECT_EQ(resident->gguf_experts(), nullptr);
  EXPECT_EQ(streamed->sizes().expert_bytes, resident->sizes().expert_bytes);
  EXPECT_EQ(streamed->sizes().dense_bytes, resident->sizes().dense_bytes);
  EXPECT_EQ(streamed->sizes().expert_dtype, resident->sizes().expert_dtype);
  const PackManifest& m = *streamed->gguf_experts();
  ASSERT_EQ(m.clusters.size(), 1u);
  EXPECT_EQ(m.clusters[0].file, file.filename().string());
  EXPECT_EQ(m.clusters[0].bytes, int64_t(fs::file_size(file)));
  EXPECT_EQ(m.dtypes, (std::vector<std::string>{"Q5_0", "Q8_0"}));  // the Q4_K_M-style mix
  const ModelConfig& c = streamed->config();
  EXPECT_EQ(std::ssize(m.experts), c.n_moe_layers() * c.n_expert);
  for (const auto& [key, e] : m.experts) {
    SCOPED_TRACE(fmt::format("layer {} expert {}", key.layer, key.expert));
    EXPECT_FALSE(streamed->weights().layers[size_t(key.layer)].experts[size_t(key.expert)].present());
    const FfnWeights& w = resident->weights().layers[size_t(key.layer)].experts[size_t(key.expert)];
    ASSERT_EQ(e.pieces.size(), 3u);
    int64_t slot = 0;
    for (const ExpertPiece& p : e.pieces) {
      EXPECT_EQ(p.offset % 4096, 0);
      EXPECT_EQ(p.slot_offset, slot);
      EXPECT_TRUE(p.bytes % 4096 == 0 || p.offset + p.bytes == m.clusters[0].bytes);
      slot += (p.bytes + 4095) / 4096 * 4096;
    }
    EXPECT_EQ(e.bytes, slot);
    const WeightView* views[3] = {&w.gate, &w.up, &w.down};
    const PackedTensor* tensors[3] = {&e.gate, &e.up, &e.down};
    for (int i = 0; i < 3; ++i) {
      const PackedTensor& t = *tensors[i];
      EXPECT_EQ(t.dtype, views[i]->dtype);
      EXPECT_EQ(t.shape, (std::vector<int64_t>{views[i]->rows, views[i]->cols}));
      EXPECT_EQ(t.bytes, views[i]->rows * dtype_row_bytes(views[i]->dtype, views[i]->cols));
      const ExpertPiece& p = e.pieces[size_t(i)];
      EXPECT_LE(p.offset, t.offset);
      EXPECT_LE(t.offset + t.bytes, p.offset + p.bytes);
      EXPECT_EQ(e.slot_offset(t), p.slot_offset + (t.offset - p.offset));
    }
  }
}

// At one and two slots, wait mode gives the resident logits bit for bit under every prefetch mode
// (predictors from a sidecar folder) and eviction policy, reads delayed at random by the fault
// injector on both I/O backends. Two files: mixed expert types, and a shared expert.
TEST_F(GgufStream, WaitModeEqualsResidentAtOneAndTwoSlotsUnderEveryPolicy) {
  for (const std::string name : {"mixtral-q4_k_m", "qwen2_moe-q8_0"}) {
    SCOPED_TRACE(name);
    const fs::path file = gguf_fixture(name);
    const RunResult resident = run(file, nullptr);
    const fs::path predictors = sidecar(file, name + "_sidecar");
    int64_t slot = 0;
    const auto streamed_model = Model::load(file, {.stream_gguf_experts = true});
    for (const auto& [key, e] : streamed_model->gguf_experts()->experts) slot = std::max(slot, e.bytes);
    int configuration = 0;
    for (const int64_t slots : {1, 2})
      for (const PrefetchMode mode : {PrefetchMode::kNone, PrefetchMode::kLru, PrefetchMode::kPredict})
        for (const EvictionPolicy policy : {EvictionPolicy::kLru, EvictionPolicy::kLruFrequency,
                                            EvictionPolicy::kPerLayer, EvictionPolicy::kNextUse}) {
          SCOPED_TRACE(fmt::format("{} slots, prefetch {}, eviction {}", slots, int(mode), int(policy)));
          auto draws = std::make_shared<std::atomic<uint64_t>>(uint64_t(++configuration) << 32);
          StreamerOptions options;
          options.budget_bytes = slots * slot;
          options.mode = mode;
          options.policy = policy;
          if (mode == PrefetchMode::kPredict) options.predictors_dir = predictors;
          options.prefetch.force_pread = configuration % 2 == 0;
          options.prefetch.fault_injector = [draws](const ReadRequest&) {
            const uint64_t r = mix(draws->fetch_add(1));
            if (r % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(r % 300));
            return 0;
          };
          const RunResult streamed = run(file, &options);
          EXPECT_EQ(streamed.tokens, resident.tokens);
          EXPECT_TRUE(streamed.logits == resident.logits) << "a logit differs from the resident run";
          EXPECT_LE(streamed.stats.cache.peak_bytes, options.budget_bytes);
          EXPECT_GT(streamed.stats.misses, 0);
          EXPECT_EQ(streamed.stats.fallbacks, 0);
          EXPECT_GE(streamed.stats.prefetch.io_requests, 3 * streamed.stats.prefetch.reads);  // three pieces each
          if (mode != PrefetchMode::kNone) {
            EXPECT_GT(streamed.stats.predicted, 0);
          }
        }
  }
}

// gpt-oss's MXFP4 file streamed in place: the experts' biases stay resident beside the dense part,
// and wait mode at one and two slots gives the resident logits bit for bit.
TEST_F(GgufStream, GptOssStreamsItsMxfp4ExpertsInPlace) {
  const fs::path file = gguf_fixture("gpt_oss-mxfp4");
  const RunResult resident = run(file, nullptr);
  const auto streamed_model = Model::load(file, {.stream_gguf_experts = true});
  int64_t slot = 0;
  for (const auto& [key, e] : streamed_model->gguf_experts()->experts) slot = std::max(slot, e.bytes);
  EXPECT_FALSE(streamed_model->weights().layers[0].expert_down_bias.empty());
  for (const int64_t slots : {1, 2}) {
    StreamerOptions options;
    options.budget_bytes = slots * slot;
    const RunResult streamed = run(file, &options);
    EXPECT_EQ(streamed.tokens, resident.tokens);
    EXPECT_TRUE(streamed.logits == resident.logits) << "a logit differs from the resident run at " << slots;
    EXPECT_GT(streamed.stats.misses, 0);
    EXPECT_EQ(streamed.stats.fallbacks, 0);
  }
}

// Fallback never waits: with every read late it leaves experts out and counts them. Low-bit copies
// do not exist in a GGUF file: refused, saying what to do.
TEST_F(GgufStream, FallbackCountsItsMissesAndLowbitIsRefused) {
  const fs::path file = gguf_fixture("qwen2_moe-q8_0");
  const RunResult resident = run(file, nullptr);
  StreamerOptions options;
  options.budget_bytes = int64_t(1) << 30;
  options.on_miss = OnMiss::kFallback;
  options.prefetch.io_latency_ms = 5;
  const RunResult streamed = run(file, &options);
  EXPECT_GT(streamed.stats.fallbacks, 0);
  EXPECT_EQ(streamed.stats.waits, 0);
  EXPECT_EQ(streamed.stats.fallbacks + streamed.stats.hits, streamed.stats.lookups);  // all but the usable ones
  EXPECT_FALSE(streamed.logits == resident.logits);

  options.on_miss = OnMiss::kLowbit;
  const auto model = Model::load(file, {.stream_gguf_experts = true});
  expect_streamer_refused(*model, file, options, "--lowbit-only -o DIR, then --lowbit DIR");
}

// Low-bit copies for a file in place live in a folder of their own (pack --lowbit-only): copies in
// the experts' own type are the experts, so every late expert is computed from its copy without a
// wait and the logits are the resident ones; another model's copies are refused.
TEST_F(GgufStream, LowbitCopiesFromASidecarFolder) {
  const fs::path file = gguf_fixture("qwen2_moe-q8_0");
  const auto write_copies = [&](const fs::path& model_file, const fs::path& out) {
    const auto model = Model::load(model_file);
    PackOptions options;
    options.method = ClusterMethod::kNone;
    options.lowbit_type = DType::kQ8_0;
    options.lowbit_only = true;
    const PackSummary summary = write_pack(*model, model_file, out, options, [](int64_t, int64_t) {});
    EXPECT_GT(summary.lowbit_bytes, 0);
    EXPECT_TRUE(fs::exists(out / kLowbitSidecarFileName));
    EXPECT_FALSE(fs::exists(out / kManifestFileName));  // no pack
  };
  write_copies(file, work_ / "copies");
  const RunResult resident = run(file, nullptr);
  StreamerOptions options;
  options.budget_bytes = int64_t(1) << 30;
  options.on_miss = OnMiss::kLowbit;
  options.lowbit_dir = work_ / "copies";
  options.prefetch.io_latency_ms = 5;  // every read arrives late
  const RunResult streamed = run(file, &options);
  EXPECT_GT(streamed.stats.lowbit, 0);
  EXPECT_EQ(streamed.stats.waits, 0);
  EXPECT_EQ(streamed.stats.fallbacks, 0);
  EXPECT_EQ(streamed.tokens, resident.tokens);
  EXPECT_TRUE(streamed.logits == resident.logits);

  write_copies(gguf_fixture("qwen2_moe-f32"), work_ / "other");
  options.lowbit_dir = work_ / "other";
  const auto model = Model::load(file, {.stream_gguf_experts = true});
  expect_streamer_refused(*model, file, options, "copies of another model");
}

// Predictors are keyed by the model's fingerprint: another file's are refused, and a missing
// folder says how to make them.
TEST_F(GgufStream, PredictorsOfAnotherFileAreRefused) {
  const fs::path other = sidecar(gguf_fixture("qwen2_moe-f32"), "qwen2_moe_f32");
  const fs::path file = gguf_fixture("qwen2_moe-q8_0");  // same shapes, other weights
  const auto model = Model::load(file, {.stream_gguf_experts = true});
  StreamerOptions options;
  options.budget_bytes = int64_t(1) << 30;
  options.mode = PrefetchMode::kPredict;
  options.predictors_dir = other;
  expect_streamer_refused(*model, file, options, "trained for another model");
  options.predictors_dir = work_;  // no predictors.safetensors
  expect_streamer_refused(*model, file, options, "--predictors DIR");
}

// No checksum guards a GGUF file's bytes: its size and identity at load do. A file rewritten after
// the model loaded (same size, new modification time) or grown is refused when the reads begin;
// one truncated while streaming fails the read that comes short, naming the expert.
TEST_F(GgufStream, ChangedOrTruncatedFileIsAClearError) {
  const auto backend = make_cpu_backend();
  StreamerOptions options;
  options.budget_bytes = int64_t(1) << 30;
  const auto expect_refused = [&](const fs::path& file, const auto& change) {
    const auto model = Model::load(file, {.stream_gguf_experts = true});
    change(file);
    expect_streamer_refused(*model, file, options, "the file changed since the model was loaded");
  };
  const fs::path touched = copy_of(gguf_fixture("qwen2_moe-q8_0"));
  expect_refused(touched,
                 [](const fs::path& f) { fs::last_write_time(f, fs::last_write_time(f) + std::chrono::hours(1)); });
  fs::remove(touched);
  const fs::path grown = copy_of(gguf_fixture("qwen2_moe-q8_0"));
  expect_refused(grown, [](const fs::path& f) { std::ofstream(f, std::ios::app | std::ios::binary) << 'x'; });
  fs::remove(grown);

  // Truncated in the middle of the last expert in the file, after the streamer opened it: reading
  // that expert comes short. Only the expert provider runs, so the dense mapping is not touched.
  const fs::path file = copy_of(gguf_fixture("qwen2_moe-q8_0"));
  const auto model = Model::load(file, {.stream_gguf_experts = true});
  ExpertStreamer streamer(*model, file, *backend, options);
  const PackedExpert* last = nullptr;
  for (const auto& [key, e] : model->gguf_experts()->experts)
    if (last == nullptr || e.down.offset > last->down.offset) last = &e;
  ASSERT_NE(last, nullptr);
  fs::resize_file(file, uint64_t(last->down.offset + last->down.bytes / 2));
  streamer.begin_step();
  const int32_t expert = last->key.expert;
  const FfnWeights* view = nullptr;
  try {
    streamer.experts().acquire(last->key.layer, {&expert, 1}, {&view, 1});
    FAIL() << "an expert past the end of the file was computed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  fmt::format("{}: layer {} expert {}: short read", file.filename().string(), last->key.layer, expert)),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace chronos
