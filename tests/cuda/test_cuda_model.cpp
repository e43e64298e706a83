// The CUDA runner end to end against the CPU runner on the fixture checkpoints (every
// architecture, f32 and bf16) and on a Q8_0 pack, and expert streaming on CUDA: wait mode
// token-identical to the all-in-VRAM run at every budget, fallback never blocking; many sequences
// in one forward, each getting its logits alone, resident and streamed at two slots. Skipped
// without a CUDA device.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <numeric>
#include <optional>
#include <string>

#include "chronos/backend.h"
#include "chronos/error.h"
#include "chronos/expert_streamer.h"
#include "chronos/generate.h"
#include "chronos/model_runner.h"
#include "chronos/ops.h"
#include "chronos/pack.h"
#include "chronos/pack_format.h"
#include "chronos/thread_pool.h"
#include "chronos/tokenizer.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

fs::path fixture(const std::string& name) { return fs::path(CHRONOS_TEST_DATA_DIR) / "models" / name; }

// The CUDA backend, or nullptr (and the reason) when this machine has no usable device.
std::unique_ptr<Backend> cuda_backend(std::string& why) {
  try {
    return make_backend("cuda");
  } catch (const Error& e) {
    why = e.what();
    return nullptr;
  }
}

#define REQUIRE_CUDA(backend)               \
  std::string why_skipped;                  \
  auto backend = cuda_backend(why_skipped); \
  if (!backend) GTEST_SKIP() << why_skipped

int32_t argmax(const std::vector<float>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

// Logits of a prompt (all positions, prefilled in chunks of `batch`) and then of `steps`
// greedy decode tokens, on one runner.
std::vector<std::vector<float>> run(ModelRunner& runner, const ModelConfig& c, const std::vector<int32_t>& prompt,
                                    int steps) {
  std::vector<std::vector<float>> out;
  std::vector<float> all(prompt.size() * size_t(c.n_vocab));
  runner.forward(prompt, 0, all.data(), true);
  for (size_t t = 0; t < prompt.size(); ++t)
    out.emplace_back(all.begin() + std::ptrdiff_t(t * size_t(c.n_vocab)),
                     all.begin() + std::ptrdiff_t((t + 1) * size_t(c.n_vocab)));
  std::vector<float> logits = out.back();
  for (int i = 0; i < steps; ++i) {
    const int32_t token = argmax(logits);
    runner.forward({&token, 1}, int64_t(prompt.size()) + i, logits.data(), false);
    out.push_back(logits);
  }
  return out;
}

class CudaParity : public ::testing::TestWithParam<const char*> {};

// Decode and small prefill chunks go through the matvec kernel (f32 activations, f32 sums in
// another order than the CPU): the logits agree with the CPU runner to 1e-3 absolute (|logit| <
// 10), the bound of the CPU-vs-transformers parity tests. A 40-token chunk goes through cuBLAS;
// with bf16 weights the activations enter it as bf16 hi + lo (about 16 significant bits, relative
// error ~2^-17), which these spiky random fixtures amplify to at most 2.5e-3 by the last layer
// (measured under the CPU emulation of the CUDA runtime; rounding x to bf16 alone gave 0.21), so
// that path gets 5e-3.
TEST_P(CudaParity, LogitsMatchTheCpuRunner) {
  REQUIRE_CUDA(backend);
  // Block-typed experts (gpt-oss's MXFP4): the CPU on its exact path, f32 activations as CUDA's
  // kernels take them (its default 8-bit activations are judged by the quantized-type tests).
  const ops::BlockActivationMode saved = ops::block_activation_mode();
  struct Restore {
    ops::BlockActivationMode mode;
    ~Restore() { ops::set_block_activation_mode(mode); }
  } restore{saved};
  if (std::string(GetParam()).find("mxfp4") != std::string::npos)
    ops::set_block_activation_mode(ops::BlockActivationMode::kF32);
  auto model = Model::load(fixture(GetParam()));
  const ModelConfig& c = model->config();
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 37 + 11) % size_t(c.n_vocab));
  for (const int64_t batch : {int64_t(7), int64_t(64)}) {
    ThreadPool pool(2);
    auto cpu = make_cpu_runner(*model, pool, 96, batch);
    auto gpu = make_cuda_runner(*model, *backend, 96, batch);
    const auto expected = run(*cpu, c, prompt, 8);
    const auto got = run(*gpu, c, prompt, 8);
    ASSERT_EQ(got.size(), expected.size());
    const bool half_weights = model->sizes().expert_dtype != DType::kF32;
    const double tolerance = batch > 16 && half_weights ? 5e-3 : 1e-3;
    for (size_t t = 0; t < got.size(); ++t) {
      double worst = 0;
      for (size_t i = 0; i < got[t].size(); ++i) worst = std::max(worst, double(std::fabs(got[t][i] - expected[t][i])));
      EXPECT_LE(worst, tolerance) << GetParam() << " batch " << batch << " position " << t;
    }
  }
}

// The CUDA runner reports the CPU forward's named intermediates (same names, same layers, same
// order), so a first GPU run can be diffed tensor by tensor; and the values agree (f32 weights,
// matvec path: the logits' 1e-3 bound holds for every intermediate of these fixtures too).
TEST(CudaTraces, SameNamedTensorsAsTheCpuForward) {
  REQUIRE_CUDA(backend);
  for (const char* name : {"qwen2_moe-f32", "olmoe-f32"}) {
    auto model = Model::load(fixture(name));
    struct Traced {
      std::string name;
      int64_t layer;
      std::vector<float> values;
    };
    auto recorder = [](std::vector<Traced>& out) {
      ForwardHooks hooks;
      hooks.trace = [&out](const char* n, int64_t layer, std::span<const float> values) {
        out.push_back({n, layer, {values.begin(), values.end()}});
      };
      return hooks;
    };
    std::vector<Traced> cpu_traces, gpu_traces;
    ThreadPool pool(2);
    auto cpu = make_cpu_runner(*model, pool, 32, 8, recorder(cpu_traces));
    auto gpu = make_cuda_runner(*model, *backend, 32, 8, recorder(gpu_traces));
    const std::vector<int32_t> prompt = {3, 17, 5, 29, 11};
    std::vector<float> logits(size_t(model->config().n_vocab));
    cpu->forward(prompt, 0, logits.data(), false);
    gpu->forward(prompt, 0, logits.data(), false);
    ASSERT_FALSE(cpu_traces.empty());
    ASSERT_EQ(gpu_traces.size(), cpu_traces.size()) << name;
    for (size_t i = 0; i < cpu_traces.size(); ++i) {
      const Traced &want = cpu_traces[i], &got = gpu_traces[i];
      ASSERT_EQ(got.name, want.name) << name << " trace " << i;
      ASSERT_EQ(got.layer, want.layer) << name << " " << want.name;
      ASSERT_EQ(got.values.size(), want.values.size()) << name << " " << want.name << " layer " << want.layer;
      double worst = 0;
      for (size_t j = 0; j < want.values.size(); ++j)
        worst = std::max(worst, double(std::fabs(got.values[j] - want.values[j])));
      EXPECT_LE(worst, 1e-3) << name << " " << want.name << " layer " << want.layer;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaParity,
                         ::testing::Values("mixtral-f32", "mixtral-bf16", "mixtral-tied-f32", "qwen2_moe-f32",
                                           "qwen2_moe-bf16", "qwen3_moe-f32", "qwen3_moe-bf16", "olmoe-f32",
                                           "olmoe-bf16", "glm4_moe-f32", "glm4_moe-plain-f32", "minimax_m2-f32",
                                           "deepseek_v3-f32", "deepseek_v2-f32", "glm4_moe_lite-f32", "gpt_oss-f32",
                                           "gpt_oss-bf16", "gpt_oss-mxfp4", "qwen3_next-f32", "qwen3_5_moe-f32"));

class CudaStreaming : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = fs::temp_directory_path() / ("chronos_cuda_stream_" + std::to_string(::getpid()));
    fs::remove_all(work_);
    fs::create_directories(work_);
  }
  void TearDown() override { fs::remove_all(work_); }

  // The fixture packed as `chronos pack` does, its experts and dense matrices converted when asked
  // (--expert-type / --dense-type).
  fs::path pack(const std::string& name, std::optional<DType> expert_type = std::nullopt,
                std::optional<DType> dense_type = std::nullopt, std::optional<DType> lowbit_type = std::nullopt) {
    PackOptions options;
    options.method = ClusterMethod::kNone;
    options.expert_type = expert_type;
    options.dense_type = dense_type;
    options.lowbit_type = lowbit_type;
    const fs::path out = work_ / (expert_type ? name + "-" + std::string(dtype_name(*expert_type)) : name);
    write_pack(*Model::load(fixture(name)), fixture(name), out, options, [](int64_t, int64_t) {});
    return out;
  }

  // Greedy tokens of a fixed prompt on CUDA: from the checkpoint (all experts in VRAM), or from a
  // pack through a streamer with `so`.
  std::vector<int32_t> generate(Backend& backend, const fs::path& dir, const StreamerOptions* so,
                                StreamerStats* stats = nullptr) {
    auto model = Model::load(dir);
    const Tokenizer tokenizer = Tokenizer::load(dir);
    std::unique_ptr<ExpertStreamer> streamer;
    GenerateOptions options;
    options.max_new_tokens = 24;
    options.ignore_eos = true;
    if (so != nullptr) {
      streamer = std::make_unique<ExpertStreamer>(*model, dir, backend, *so);
    }
    Generator generator(*model, tokenizer,
                        make_cuda_runner(*model, backend, 128, 8, streamer ? streamer->hooks() : ForwardHooks{}));
    generator.stream_experts_with(streamer.get());
    const auto prompt = tokenizer.encode("The river keeps its own time, and the mill", true);
    const auto result = generator.generate(prompt, options, [](std::string_view) { return true; });
    if (stats != nullptr && streamer) *stats = streamer->stats();
    return result.tokens;
  }

  // Logits of a fixed prompt and 8 greedy steps on the CPU and on CUDA, prefilled in chunks of 7
  // and 64, within 1e-3: a checkpoint or GGUF file with its experts resident, a pack through
  // streamers holding every expert.
  static void expect_cuda_matches_cpu(Backend& backend, const fs::path& dir, const std::string& what) {
    auto model = Model::load(dir);
    const ModelConfig& c = model->config();
    std::vector<int32_t> prompt(40);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 37 + 11) % size_t(c.n_vocab));
    StreamerOptions so;
    so.budget_bytes = int64_t(1) << 30;
    for (const int64_t batch : {int64_t(7), int64_t(64)}) {
      auto host = make_cpu_backend();
      std::unique_ptr<ExpertStreamer> cpu_streamer, gpu_streamer;
      if (model->experts_streamed()) {
        cpu_streamer = std::make_unique<ExpertStreamer>(*model, dir, *host, so);
        cpu_streamer->load_all();
        gpu_streamer = std::make_unique<ExpertStreamer>(*model, dir, backend, so);
        gpu_streamer->load_all();
      }
      ThreadPool pool(2);
      auto cpu = make_cpu_runner(*model, pool, 96, batch, cpu_streamer ? cpu_streamer->hooks() : ForwardHooks{});
      auto gpu = make_cuda_runner(*model, backend, 96, batch, gpu_streamer ? gpu_streamer->hooks() : ForwardHooks{});
      const auto expected = run(*cpu, c, prompt, 8);
      const auto got = run(*gpu, c, prompt, 8);
      ASSERT_EQ(got.size(), expected.size());
      for (size_t t = 0; t < got.size(); ++t) {
        double worst = 0;
        for (size_t i = 0; i < got[t].size(); ++i)
          worst = std::max(worst, double(std::fabs(got[t][i] - expected[t][i])));
        EXPECT_LE(worst, 1e-3) << what << " batch " << batch << " position " << t;
      }
    }
  }

  fs::path work_;
};

// One fixture per test (each is about a minute on the CPU emulation of a loaded machine).
class CudaStreamingBudgets : public CudaStreaming, public ::testing::WithParamInterface<const char*> {};

TEST_P(CudaStreamingBudgets, WaitModeIsTokenIdenticalToAllInVramAtEveryBudget) {
  REQUIRE_CUDA(backend);
  const char* name = GetParam();
  const auto resident = generate(*backend, fixture(name), nullptr);
  const fs::path packed = pack(name);
  const PackManifest manifest = PackManifest::load(packed);
  int64_t slot = 0;
  for (const auto& [key, e] : manifest.experts) slot = std::max(slot, e.bytes);
  const int64_t all = slot * std::ssize(manifest.experts);
  for (const int64_t budget : {all, all / 4, slot * 3, slot}) {
    StreamerOptions so;
    so.budget_bytes = budget;
    so.prefetch.staging_bytes = slot * 2;
    StreamerStats stats;
    EXPECT_EQ(generate(*backend, packed, &so, &stats), resident) << name << " budget " << budget;
    EXPECT_EQ(stats.prefetch.copies, stats.prefetch.reads);
    EXPECT_EQ(stats.fallbacks, 0);
    EXPECT_LE(stats.cache.peak_bytes, budget);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaStreamingBudgets,
                         ::testing::Values("qwen2_moe-bf16", "mixtral-bf16", "olmoe-f32"));

TEST_F(CudaStreaming, FallbackNeverBlocksTheHost) {
  REQUIRE_CUDA(backend);
  const fs::path packed = pack("qwen2_moe-bf16");
  StreamerOptions so;
  so.budget_bytes = Model::load(packed)->sizes().expert_bytes / 4;
  so.on_miss = OnMiss::kFallback;
  so.prefetch.io_latency_ms = 5;
  StreamerStats stats;
  EXPECT_EQ(generate(*backend, packed, &so, &stats).size(), 24u);
  EXPECT_EQ(stats.waits, 0);
  EXPECT_EQ(stats.stall_seconds, 0.0);
  EXPECT_GT(stats.fallbacks, 0);
}

// --on-miss lowbit on the device: the copies are uploaded to VRAM once and stand in for late
// experts without the host waiting. Copies in the experts' own type compute the same bytes, so the
// tokens are those of the all-in-VRAM run.
TEST_F(CudaStreaming, LowbitCopiesInVramStandInWithoutBlockingTheHost) {
  REQUIRE_CUDA(backend);
  const auto resident = generate(*backend, fixture("qwen2_moe-bf16"), nullptr);
  const fs::path packed = pack("qwen2_moe-bf16", std::nullopt, std::nullopt, DType::kBF16);
  const PackManifest manifest = PackManifest::load(packed);
  ASSERT_TRUE(manifest.lowbit);
  int64_t slot = 0;
  for (const auto& [key, e] : manifest.experts) slot = std::max(slot, e.bytes);
  StreamerOptions so;
  so.budget_bytes = manifest.lowbit->bytes + slot * 3;
  so.on_miss = OnMiss::kLowbit;
  so.prefetch.io_latency_ms = 5;
  so.prefetch.staging_bytes = slot * 2;
  StreamerStats stats;
  EXPECT_EQ(generate(*backend, packed, &so, &stats), resident);
  EXPECT_EQ(stats.waits, 0);
  EXPECT_EQ(stats.stall_seconds, 0.0);
  EXPECT_GT(stats.lowbit, 0);
  EXPECT_LE(stats.cache.peak_bytes, slot * 3);
}

// A pack with Q8_0 experts and dense matrices (pack --expert-type q8_0 --dense-type q8_0), every
// expert loaded by a streamer: the CUDA runner's logits match the CPU runner's on the same pack.
// Also Q4_K experts and Q6_K dense matrices, which on these fixtures' 32- and 64-wide rows are
// stored in their 32-weight fallbacks (Q5_0, Q8_0): the runner's expert type is the manifest's,
// its kernels get the fallbacks.
// Both sides compute with the same f32 weights (the block kernels dequantize exactly) and f32
// activations, prefill included (40 tokens at batch 64: the dequantized-tile SGEMM), so the f32
// fixtures' 1e-3 bound of CudaParity applies to every chunk size.
//
// The CPU side must multiply block weights by f32 activations too: an 8-bit-activation mode of the
// CPU matmul (CHRONOS_BLOCK_ACTIVATIONS) is chosen at first use, which in this process (ctest runs
// one test per process) is below.
TEST_F(CudaStreaming, BlockQuantizedPackMatchesTheCpuRunner) {
  REQUIRE_CUDA(backend);
  ::setenv("CHRONOS_BLOCK_ACTIVATIONS", "f32", 1);
  struct Case {
    const char* name;
    DType experts, dense, stored_dense;
  };
  for (const Case& test : {Case{"qwen2_moe-f32", DType::kQ8_0, DType::kQ8_0, DType::kQ8_0},
                           Case{"olmoe-f32", DType::kQ8_0, DType::kQ8_0, DType::kQ8_0},
                           Case{"mixtral-bf16", DType::kQ4_K, DType::kQ6_K, DType::kQ8_0}}) {
    const char* name = test.name;
    const fs::path packed = pack(name, test.experts, test.dense);
    auto model = Model::load(packed);
    ASSERT_EQ(model->sizes().expert_dtype, test.experts) << name;
    ASSERT_EQ(model->weights().layers[0].wq.dtype, test.stored_dense) << name;
    expect_cuda_matches_cpu(*backend, packed, name);
  }
}

// A GGUF file whose experts mix types (Q4_K_M-style: down projections Q5_0 in two layers, Q8_0 in
// the third): resident in VRAM, and packed and streamed, on CUDA as on the CPU.
TEST_F(CudaStreaming, MixedTypeGgufFileMatchesTheCpuRunner) {
  REQUIRE_CUDA(backend);
  ::setenv("CHRONOS_BLOCK_ACTIVATIONS", "f32", 1);
  const fs::path file = fs::path(CHRONOS_TEST_DATA_DIR) / "gguf" / "mixtral-q4_k_m.gguf";
  const fs::path packed = work_ / "q4_k_m";
  write_pack(*Model::load(file), file, packed, PackOptions{.method = ClusterMethod::kNone}, [](int64_t, int64_t) {});
  for (const fs::path& dir : {file, packed}) expect_cuda_matches_cpu(*backend, dir, dir.string());
}

TEST(CudaDevice, AbsentDeviceIsAClearError) {
  std::string why;
  if (cuda_backend(why)) GTEST_SKIP() << "this machine has a CUDA device";
  EXPECT_NE(why.find("--device cuda"), std::string::npos) << why;
}

// ---- many sequences in one forward ----------------------------------------------------------

struct Plan {
  std::vector<int32_t> prompt;
  int64_t join, steps;
};

// A prefills 6 tokens beside B's 3 at step 0; B decodes twice and leaves, and C joins at step 3 in
// its slot, prefilling beside the decoding A (each sequence gets its prompt's last logits, then one
// row per decode step). No step has more than 16 rows, so every chunk takes the matvec path, as
// the sequences alone do.
const std::vector<Plan> kPlan = {{{5, 9, 14, 3, 30, 31}, 0, 6}, {{40, 41, 7}, 0, 2}, {{8, 11, 12, 2}, 3, 3}};

// Each sequence's logits, step by step, from one batched run of kPlan on `runner` (made with 3
// slots); `begin_step` runs before each forward.
std::vector<std::vector<std::vector<float>>> run_batched(ModelRunner& runner, int64_t n_vocab,
                                                         const std::function<void()>& begin_step) {
  std::vector<std::vector<std::vector<float>>> out(kPlan.size());
  std::vector<int32_t> slot(kPlan.size(), -1);
  std::vector<int64_t> done(kPlan.size(), -1);
  std::vector<size_t> owner;
  Batch batch;
  std::vector<float> logits(size_t(16 * n_vocab));
  for (int64_t step = 0; step < 8; ++step) {
    batch.clear();
    owner.clear();
    for (size_t i = 0; i < kPlan.size(); ++i) {
      const Plan& q = kPlan[i];
      if (step == q.join) {
        slot[i] = runner.add_sequence();
        for (size_t t = 0; t < q.prompt.size(); ++t)
          batch.add(slot[i], int64_t(t), q.prompt[t], t + 1 == q.prompt.size());
      } else if (done[i] >= 0 && done[i] < q.steps) {
        batch.add(slot[i], std::ssize(q.prompt) + done[i], argmax(out[i].back()), true);
      } else {
        continue;
      }
      owner.push_back(i);
    }
    if (batch.size() == 0) break;
    if (begin_step) begin_step();
    runner.forward(batch, logits.data());
    for (size_t r = 0; r < owner.size(); ++r) {
      const size_t i = owner[r];
      out[i].emplace_back(logits.begin() + int64_t(r) * n_vocab, logits.begin() + int64_t(r + 1) * n_vocab);
      if (++done[i] == kPlan[i].steps) runner.remove_sequence(slot[i]);
    }
  }
  return out;
}

// One sequence alone on a one-sequence runner: its prompt, then greedy single-token steps.
std::vector<std::vector<float>> run_alone(ModelRunner& runner, int64_t n_vocab, const Plan& q) {
  std::vector<std::vector<float>> out(1, std::vector<float>(size_t(n_vocab)));
  runner.forward(q.prompt, 0, out[0].data(), false);
  for (int64_t step = 1; step <= q.steps; ++step) {
    const int32_t token = argmax(out.back());
    out.emplace_back(size_t(n_vocab));
    runner.forward({&token, 1}, std::ssize(q.prompt) + step - 1, out.back().data(), false);
  }
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(argmax(got), argmax(want)) << what;
  float scale = 0.0f, worst = 0.0f;
  for (size_t v = 0; v < want.size(); ++v) {
    scale = std::max(scale, std::abs(want[v]));
    worst = std::max(worst, std::abs(got[v] - want[v]));
  }
  EXPECT_LE(worst, 1e-5f * scale) << what;
}

class CudaBatched : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaBatched, EachSequenceGetsItsAloneLogitsResidentAndStreamedAtTwoSlots) {
  REQUIRE_CUDA(backend);
  const fs::path dir = fixture(GetParam());
  auto model = Model::load(dir);
  const int64_t n_vocab = model->config().n_vocab;

  auto batched = make_cuda_runner(*model, *backend, 32, 16, {}, 3);
  const auto resident = run_batched(*batched, n_vocab, nullptr);
  for (size_t i = 0; i < kPlan.size(); ++i) {
    auto alone_runner = make_cuda_runner(*model, *backend, 32, 16);
    const auto alone = run_alone(*alone_runner, n_vocab, kPlan[i]);
    ASSERT_EQ(resident[i].size(), alone.size()) << "sequence " << i;
    for (size_t step = 0; step < alone.size(); ++step)
      expect_close(resident[i][step], alone[step], "sequence " + std::to_string(i) + " step " + std::to_string(step));
  }

  // The same batch from a pack through a cache of two expert slots, waiting for every miss.
  const fs::path packed = fs::temp_directory_path() / ("chronos_cuda_batch_" + std::to_string(::getpid()));
  fs::remove_all(packed);
  write_pack(*model, dir, packed, PackOptions{.method = ClusterMethod::kNone}, [](int64_t, int64_t) {});
  {
    auto streamed_model = Model::load(packed);
    const PackManifest manifest = PackManifest::load(packed);
    int64_t slot = 0;
    for (const auto& [key, e] : manifest.experts) slot = std::max(slot, e.bytes);
    StreamerOptions so;
    so.budget_bytes = slot * 2;
    so.prefetch.staging_bytes = slot * 2;
    ExpertStreamer streamer(*streamed_model, packed, *backend, so);
    auto runner = make_cuda_runner(*streamed_model, *backend, 32, 16, streamer.hooks(), 3);
    streamer.begin_request();
    const auto streamed = run_batched(*runner, n_vocab, [&] { streamer.begin_step(); });
    for (size_t i = 0; i < kPlan.size(); ++i) {
      ASSERT_EQ(streamed[i].size(), resident[i].size()) << "sequence " << i;
      for (size_t step = 0; step < streamed[i].size(); ++step)
        expect_close(streamed[i][step], resident[i][step],
                     "streamed sequence " + std::to_string(i) + " step " + std::to_string(step));
    }
    EXPECT_EQ(streamer.stats().fallbacks, 0);
    EXPECT_GT(streamer.stats().misses, 0);
    EXPECT_LE(streamer.stats().cache.peak_bytes, slot * 2);
  }
  fs::remove_all(packed);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaBatched,
                         ::testing::Values("mixtral-bf16", "qwen2_moe-f32", "qwen3_moe-f32", "olmoe-f32",
                                           "glm4_moe-f32", "deepseek_v3-f32", "qwen3_next-f32"));

}  // namespace
}  // namespace chronos
