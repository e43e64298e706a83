// Many sequences in one forward: rows of (sequence, position, token) from sequences in prefill and
// in decode, joining and leaving, give each sequence the logits and greedy tokens it gets alone;
// the experts of a layer step are acquired once for all rows; KvStore slots are reused and a full
// store is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include "chronos/error.h"
#include "chronos/model.h"
#include "chronos/model_runner.h"
#include "chronos/thread_pool.h"

namespace chronos {
namespace {

const std::filesystem::path kModels = std::filesystem::path(CHRONOS_TEST_DATA_DIR) / "models";

int32_t argmax(const float* logits, int64_t n) { return int32_t(std::max_element(logits, logits + n) - logits); }

std::vector<int32_t> prompt_of(int64_t length, int32_t salt, int64_t n_vocab) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < length; ++i) ids.push_back(int32_t((salt * 37 + i * 11 + 3) % n_vocab));
  return ids;
}

// The logits of each step of one sequence run alone: its prompt (the last row), then `steps`
// greedy single-token steps.
std::vector<std::vector<float>> alone(const Model& model, const std::vector<int32_t>& prompt, int64_t steps,
                                      ThreadPool& pool) {
  const int64_t n_vocab = model.config().n_vocab;
  KvCache kv(model.config(), 64);
  auto scratch = model.make_scratch(8, kv.n_ctx());
  std::vector<std::vector<float>> out(size_t(steps + 1), std::vector<float>(size_t(n_vocab)));
  model.forward(prompt, 0, kv, *scratch, pool, out[0].data(), false);
  for (int64_t step = 1; step <= steps; ++step) {
    const int32_t token = argmax(out[size_t(step - 1)].data(), n_vocab);
    model.forward({&token, 1}, std::ssize(prompt) + step - 1, kv, *scratch, pool, out[size_t(step)].data(), false);
  }
  return out;
}

// Records, per layer of one forward step, the experts acquired and the experts the rows selected.
class CountingProvider final : public ExpertProvider {
 public:
  explicit CountingProvider(const Model& model) : model_(model) {}
  void acquire(int64_t layer, std::span<const int32_t> experts, std::span<const float>,
               std::span<const FfnWeights*> views) override {
    for (size_t i = 0; i < experts.size(); ++i) {
      ++acquired[layer][experts[i]];
      views[i] = &model_.weights().layers[size_t(layer)].experts[size_t(experts[i])];
    }
  }
  void release(int64_t, std::span<const int32_t>) override {}
  void clear() {
    acquired.clear();
    routed.clear();
  }
  std::map<int64_t, std::map<int32_t, int>> acquired;  // layer -> expert -> acquire count
  std::map<int64_t, std::set<int32_t>> routed;         // layer -> experts any row selected
  std::set<int32_t> sequences_seen;

 private:
  const Model& model_;
};

struct Sequence {
  std::vector<int32_t> prompt;
  int64_t join_step = 0;  // the batch step that runs its prompt
  int64_t steps = 0;      // decode steps after the prompt
  int32_t slot = -1;
  int64_t done = -1;  // steps run: -1 before the prompt
  std::vector<std::vector<float>> logits;
};

// A prefills 9 tokens at step 1 while B and C decode; B leaves after step 3 and D joins at step 4
// in B's slot, prefilling 4 tokens beside the decoding A and C. Each step is one forward of every
// sequence's rows; a scratch of max_batch rows runs a larger step in chunks.
std::vector<Sequence> run_schedule(const Model& model, int64_t max_batch, ThreadPool& pool) {
  const ModelConfig& c = model.config();
  const int64_t n_vocab = c.n_vocab;
  std::vector<Sequence> seqs = {{prompt_of(9, 1, n_vocab), 1, 5},
                                {prompt_of(3, 2, n_vocab), 0, 3},
                                {prompt_of(5, 3, n_vocab), 0, 6},
                                {prompt_of(4, 4, n_vocab), 4, 3}};
  KvStore store(c, 64, 3);
  auto scratch = model.make_scratch(max_batch, 64);
  CountingProvider provider(model);
  ForwardHooks hooks;
  hooks.experts = &provider;
  hooks.route = [&](const RouteEvent& ev) {
    provider.routed[ev.layer].insert(ev.expert_ids.begin(), ev.expert_ids.end());
    provider.sequences_seen.insert(ev.sequence);
  };
  std::vector<int32_t> block_sequences;  // what the block hook was told, over the step's chunks
  hooks.block = [&](int64_t layer, std::span<const float> hidden, std::span<const int32_t> sequences) {
    EXPECT_EQ(std::ssize(hidden), std::ssize(sequences) * c.n_embd) << "layer " << layer;
    block_sequences.insert(block_sequences.end(), sequences.begin(), sequences.end());
  };
  hooks.block_last_layer = 0;
  Batch batch;
  std::vector<float> logits(size_t(32 * n_vocab));
  std::vector<Sequence*> row_owner;
  for (int64_t step = 0; step < 8; ++step) {
    batch.clear();
    row_owner.clear();
    for (Sequence& s : seqs) {
      if (step == s.join_step) {
        s.slot = store.allocate();
        for (size_t i = 0; i < s.prompt.size(); ++i)
          batch.add(s.slot, int64_t(i), s.prompt[i], i + 1 == s.prompt.size());
        row_owner.push_back(&s);
      } else if (s.done >= 0 && s.done < s.steps) {
        const int32_t token = argmax(s.logits.back().data(), n_vocab);
        batch.add(s.slot, std::ssize(s.prompt) + s.done, token, true);
        row_owner.push_back(&s);
      }
    }
    if (batch.size() == 0) break;
    provider.clear();
    block_sequences.clear();
    model.forward(batch, store, *scratch, pool, logits.data(), hooks);
    EXPECT_TRUE(std::ranges::equal(block_sequences, batch.seqs())) << "step " << step;
    EXPECT_EQ(std::ssize(row_owner), batch.n_logits());
    for (size_t i = 0; i < row_owner.size(); ++i) {
      Sequence& s = *row_owner[i];
      s.logits.emplace_back(logits.begin() + int64_t(i) * n_vocab, logits.begin() + int64_t(i + 1) * n_vocab);
      ++s.done;
      if (s.done == s.steps) store.free(s.slot);  // leaves: its slot is free for the next one
    }
    if (batch.size() > max_batch) continue;  // chunks: one acquire per chunk
    // One acquire per expert and layer for the whole batch, of exactly the rows' experts.
    for (const auto& [layer, experts] : provider.routed) {
      std::set<int32_t> acquired;
      for (const auto& [expert, count] : provider.acquired[layer]) {
        EXPECT_EQ(count, 1) << "step " << step << " layer " << layer << " expert " << expert;
        acquired.insert(expert);
      }
      EXPECT_EQ(acquired, experts) << "step " << step << " layer " << layer;
    }
    EXPECT_EQ(provider.acquired.size(), provider.routed.size());
  }
  EXPECT_EQ(seqs[3].slot, seqs[1].slot) << "D reuses the slot B freed";
  EXPECT_EQ(provider.sequences_seen, (std::set<int32_t>{seqs[0].slot, seqs[2].slot, seqs[3].slot}));
  return seqs;
}

class Batched : public ::testing::TestWithParam<const char*> {};

TEST_P(Batched, EachSequenceGetsItsAloneLogitsAndTokens) {
  const auto model = Model::load(kModels / GetParam());
  const int64_t n_vocab = model->config().n_vocab;
  ThreadPool pool(2);
  for (const int64_t max_batch : {16, 4}) {  // every step in one forward chunk; steps in chunks of 4
    const std::vector<Sequence> seqs = run_schedule(*model, max_batch, pool);
    for (size_t i = 0; i < seqs.size(); ++i) {
      const Sequence& s = seqs[i];
      ASSERT_EQ(std::ssize(s.logits), s.steps + 1) << "sequence " << i;
      const auto expected = alone(*model, s.prompt, s.steps, pool);
      for (int64_t step = 0; step <= s.steps; ++step) {
        const auto& got = s.logits[size_t(step)];
        const auto& want = expected[size_t(step)];
        EXPECT_EQ(argmax(got.data(), n_vocab), argmax(want.data(), n_vocab))
            << "max_batch " << max_batch << " sequence " << i << " step " << step;
        float scale = 0.0f, worst = 0.0f;
        for (int64_t v = 0; v < n_vocab; ++v) {
          scale = std::max(scale, std::abs(want[size_t(v)]));
          worst = std::max(worst, std::abs(got[size_t(v)] - want[size_t(v)]));
        }
        EXPECT_LE(worst, 1e-5f * scale) << "max_batch " << max_batch << " sequence " << i << " step " << step;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Batched,
                         ::testing::Values("mixtral-bf16", "qwen2_moe-f32", "qwen3_moe-bf16", "olmoe-f32",
                                           "glm4_moe-f32", "minimax_m2-f32", "deepseek_v2-f32", "deepseek_v3-f32",
                                           "glm4_moe_lite-f32", "gpt_oss-f32", "gpt_oss-mxfp4", "qwen3_next-f32",
                                           "qwen3_5_moe-bf16"));

TEST(KvStore, SlotsAreReusedAndAFullStoreIsAClearError) {
  const auto model = Model::load(kModels / "qwen3_moe-f32");
  KvStore store(model->config(), 16, 2);
  EXPECT_EQ(store.slot_bytes(), KvStore::bytes_per_slot(model->config(), 16));
  EXPECT_EQ(store.n_bytes(), 2 * store.slot_bytes());
  const int32_t a = store.allocate(), b = store.allocate();
  EXPECT_NE(a, b);
  EXPECT_EQ(store.n_in_use(), 2);
  try {
    store.allocate();
    FAIL() << "a third sequence fit in two slots";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all 2 slots are in use"), std::string::npos) << e.what();
  }
  store.free(a);
  EXPECT_EQ(store.allocate(), a);
  EXPECT_EQ(store.length(a), 0) << "a reused slot starts empty";
  EXPECT_THROW(store.free(5), Error);
  store.free(b);
  EXPECT_THROW(store.free(b), Error);  // twice

  // Slots for a byte budget: as many as fit, and a clear error when not one does.
  EXPECT_EQ(KvStore::slots_for_budget(model->config(), 16, 3 * store.slot_bytes() + 1), 3);
  EXPECT_THROW(KvStore::slots_for_budget(model->config(), 16, store.slot_bytes() - 1), Error);
}

TEST(KvStore, BadRowsAreRefusedBeforeAnythingRuns) {
  const auto model = Model::load(kModels / "qwen3_moe-f32");
  ThreadPool pool(1);
  KvStore store(model->config(), 16, 2);
  auto scratch = model->make_scratch(4, 16);
  std::vector<float> logits(size_t(4 * model->config().n_vocab));
  const int32_t a = store.allocate();
  const auto refused = [&](const Batch& batch, const std::string& needle) {
    try {
      model->forward(batch, store, *scratch, pool, logits.data());
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  Batch batch;
  batch.add(1, 0, 5, true);  // slot 1 is not allocated
  refused(batch, "sequence 1 is not in use");
  batch.clear();
  batch.add(a, 1, 5, true);  // position 1 of an empty sequence: position 0 was never run
  refused(batch, "sequence 0 has 0 positions");
  batch.clear();
  batch.add(a, 0, 5, false);
  batch.add(a, 2, 6, true);  // a gap
  refused(batch, "not consecutive");
  batch.clear();
  batch.add(a, 16, 5, true);
  refused(batch, "context is full");
  EXPECT_EQ(store.length(a), 0) << "a refused batch runs nothing";
  batch.clear();
  batch.add(a, 0, 5, false);
  batch.add(a, 1, 6, true);
  model->forward(batch, store, *scratch, pool, logits.data());
  EXPECT_EQ(store.length(a), 2);
}

// A one-slot runner serves either a batch user (add_sequence takes the slot; a second is refused)
// or the one-sequence call, which takes sequence 0's slot when it is free.
TEST(Runner, OneSlotRunnerServesABatchSequenceOrTheOneSequenceCall) {
  const auto model = Model::load(kModels / "qwen3_moe-f32");
  ThreadPool pool(1);
  auto runner = make_cpu_runner(*model, pool, 16, 4);
  std::vector<float> logits(size_t(model->config().n_vocab));
  const int32_t seq = runner->add_sequence();
  EXPECT_EQ(seq, 0);
  EXPECT_THROW(runner->add_sequence(), Error);
  Batch batch;
  batch.add(seq, 0, 5, true);
  runner->forward(batch, logits.data());
  runner->remove_sequence(seq);
  const std::vector<int32_t> prompt = {5, 6, 7};
  runner->forward(prompt, 0, logits.data(), false);  // takes slot 0 again
  EXPECT_THROW(runner->add_sequence(), Error) << "the one slot is sequence 0's";
}

}  // namespace
}  // namespace chronos
