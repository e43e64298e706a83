// Qwen3-Next and Qwen3.5 (their logits: the parity suite, against float64): prefill chunks against
// decode, each sequence's recurrent state in the KV store (its bytes, zeroed when a slot
// starts again, never rewound), and the config's layer schedule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "chronos/error.h"
#include "chronos/model.h"
#include "chronos/thread_pool.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

const fs::path kModels = fs::path(CHRONOS_TEST_DATA_DIR) / "models";

nlohmann::json reference(const std::string& fixture) {
  std::ifstream in(kModels / fixture / "reference.json");
  return nlohmann::json::parse(in);
}

std::vector<float> prompt_logits(const Model& model, const std::vector<int32_t>& ids, int64_t batch, ThreadPool& pool) {
  const ModelConfig& c = model.config();
  KvCache kv(c, std::ssize(ids) + 1);
  auto scratch = model.make_scratch(batch, kv.n_ctx());
  std::vector<float> logits(ids.size() * size_t(c.n_vocab));
  model.forward(ids, 0, kv, *scratch, pool, logits.data(), true);
  return logits;
}

// Prefill in chunks of any size and decode one token at a time give the same logits, bit for bit:
// the recurrent state carries across chunk boundaries exactly.
TEST(Qwen3Next, PrefillChunksEqualTokenByTokenDecodeBitForBit) {
  const auto model = Model::load(kModels / "qwen3_next-f32");
  const auto ids = reference("qwen3_next-f32")["cases"][3]["ids"].get<std::vector<int32_t>>();
  ASSERT_GT(ids.size(), 128u);
  ThreadPool pool1(1), pool2(2);
  const auto one = prompt_logits(*model, ids, 1, pool1);
  for (const auto& [batch, pool] : {std::pair<int64_t, ThreadPool*>{3, &pool2}, {64, &pool1}, {150, &pool2}}) {
    const auto chunked = prompt_logits(*model, ids, batch, *pool);
    EXPECT_EQ(0, std::memcmp(one.data(), chunked.data(), one.size() * sizeof(float))) << "batch " << batch;
  }
}

// The state is per sequence: a slot reused by a new sequence starts from zero (its first row is at
// position 0), two sequences interleaved in one batch each get what they get alone, and a sequence
// cannot be taken back to an earlier position except 0.
TEST(Qwen3Next, RecurrentStateLivesInTheSlotAndStartsAgainAtZero) {
  const auto model = Model::load(kModels / "qwen3_next-f32");
  const ModelConfig& c = model->config();
  const auto cases = reference("qwen3_next-f32")["cases"];
  const auto a = cases[2]["ids"].get<std::vector<int32_t>>(), b = cases[1]["ids"].get<std::vector<int32_t>>();
  ThreadPool pool(2);
  const auto alone_a = prompt_logits(*model, a, 16, pool), alone_b = prompt_logits(*model, b, 16, pool);

  KvStore kv(c, 64, 2);
  // Three recurrent layers, each a convolution's last 3 inputs of 2 * 32 + 96 channels and four
  // 16 x 24 matrices; one full-attention layer's keys and values.
  EXPECT_EQ(c.lin_state_floats(), 3 * 160 + 4 * 16 * 24);
  EXPECT_EQ(kv.state_bytes(), 2 * 3 * c.lin_state_floats() * int64_t(sizeof(float)));
  EXPECT_EQ(kv.n_bytes(), kv.state_bytes() + 2 * 64 * 2 * c.kv_dim() * int64_t(sizeof(float)));
  auto scratch = model->make_scratch(16, kv.n_ctx());
  const int64_t n_vocab = c.n_vocab;
  // Sequence 0 runs b and is left with its state; the slot then starts a at position 0.
  const int32_t s0 = kv.allocate(), s1 = kv.allocate();
  Batch batch;
  for (size_t i = 0; i < b.size(); ++i) batch.add(s0, int64_t(i), b[i], false);
  model->forward(batch, kv, *scratch, pool, nullptr);
  // a on slot 0 from position 0 and b on slot 1, their rows interleaved, logits for every row.
  batch.clear();
  const size_t longest = std::max(a.size(), b.size());
  std::vector<std::pair<int, size_t>> order;
  for (size_t i = 0; i < longest; ++i) {
    if (i < a.size()) order.emplace_back(0, i);
    if (i < b.size()) order.emplace_back(1, i);
  }
  for (const auto& [which, i] : order) batch.add(which == 0 ? s0 : s1, int64_t(i), (which == 0 ? a : b)[i], true);
  std::vector<float> logits(order.size() * size_t(n_vocab));
  model->forward(batch, kv, *scratch, pool, logits.data());
  double worst = 0.0;
  for (size_t row = 0; row < order.size(); ++row) {
    const auto& [which, i] = order[row];
    const float* expected = (which == 0 ? alone_a : alone_b).data() + i * size_t(n_vocab);
    for (int64_t v = 0; v < n_vocab; ++v)
      worst = std::max(worst, double(std::fabs(logits[row * size_t(n_vocab) + size_t(v)] - expected[v])));
  }
  EXPECT_LE(worst, 1e-5);

  batch.clear();
  batch.add(s0, 3, a[3], true);
  try {
    model->forward(batch, kv, *scratch, pool, logits.data());
    FAIL() << "a recurrent sequence was rewound";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("recurrent state, which cannot be taken back to position 3"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(kv.length(s0), std::ssize(a));  // the refused batch left the sequence as it was
}

TEST(Qwen3Next, LayerScheduleFromLayerTypesOrTheInterval) {
  std::ifstream in(kModels / "qwen3_next-f32" / "config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  ModelConfig c = ModelConfig::from_json_text(j.dump(), "config.json");
  ASSERT_EQ(c.n_layer, 4);
  EXPECT_EQ(c.layers[0].attention, AttentionKind::kGatedDeltaNet);
  EXPECT_EQ(c.layers[1].attention, AttentionKind::kGqa);
  EXPECT_EQ(c.layers[1].ffn, FfnKind::kMoe);
  EXPECT_EQ(c.n_rot, 8);  // a quarter of 32
  EXPECT_TRUE(c.attn_output_gate && c.norm_plus_one && c.lin_qkvz_grouped && c.lin_ba_grouped && !c.lin_v_tiled &&
              c.shared_expert_gated);

  j.erase("layer_types");
  j["num_hidden_layers"] = 8;
  j["full_attention_interval"] = 4;
  j["mlp_only_layers"] = nlohmann::json::array();
  c = ModelConfig::from_json_text(j.dump(), "config.json");
  for (int64_t i = 0; i < 8; ++i)
    EXPECT_EQ(c.layers[size_t(i)].attention, i % 4 == 3 ? AttentionKind::kGqa : AttentionKind::kGatedDeltaNet) << i;

  j["linear_num_value_heads"] = 3;  // not a multiple of the 2 key heads
  try {
    ModelConfig::from_json_text(j.dump(), "config.json");
    FAIL() << "accepted 3 value heads for 2 key heads";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear_num_value_heads (3) is not a multiple of linear_num_key_heads (2)"),
              std::string::npos)
        << e.what();
  }
  j["linear_num_value_heads"] = 4;
  j["linear_conv_kernel_dim"] = 1;  // a convolution without a state
  EXPECT_THROW(ModelConfig::from_json_text(j.dump(), "config.json"), Error);
  j["linear_conv_kernel_dim"] = 4;
  j["layer_types"] = nlohmann::json::array({"linear_attention", "sliding_attention"});
  EXPECT_THROW(ModelConfig::from_json_text(j.dump(), "config.json"), Error);
}

}  // namespace
}  // namespace chronos
