// Multi-head latent attention: the absorbed form the CPU runs (the cache holds the latent and the
// rotary key; kv_b_proj folded into each head's query and output) against the expanded form
// transformers runs (every head's keys and values rebuilt from kv_b_proj), in double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <vector>

#include "chronos/model.h"
#include "chronos/ops.h"
#include "chronos/thread_pool.h"
#include "model/cpu_ops.h"
#include "model/scratch.h"

namespace chronos {
namespace {

const std::filesystem::path kModels = std::filesystem::path(CHRONOS_TEST_DATA_DIR) / "models";

TEST(LatentAttention, AbsorbedEqualsTheExpandedForm) {
  for (const char* name : {"deepseek_v3-f32", "deepseek_v2-greedy-f32"}) {
    const auto model = Model::load(kModels / name);
    const ModelConfig& c = model->config();
    ASSERT_TRUE(c.mla());
    const int64_t n = 9, layer = 1, rank = c.kv_lora_rank, rope = c.qk_rope_dim, nope = c.qk_nope_dim;
    const int64_t vd = c.v_head_dim, hd = c.head_dim, q_dim = c.q_dim();
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> q(size_t(n * q_dim)), latent(size_t(n * rank)), k_rot(size_t(n * rope));
    for (auto* v : {&q, &latent, &k_rot})
      for (float& x : *v) x = normal(rng);

    // The absorbed form, as the forward calls it: a prefill chunk of 6 rows, then 3 decode steps.
    ThreadPool pool(2);
    auto scratch = model->make_scratch(8, 16);
    KvStore kv(c, 16, 1);
    const int32_t slot = kv.allocate();
    Batch batch;
    for (int64_t p = 0; p < n; ++p) batch.add(slot, p, 0, true);
    CpuOps ops(c, *scratch, pool, kv);
    std::vector<float> got(size_t(n * c.attn_out_dim()));
    for (const auto& [begin, count] : {std::pair<int64_t, int64_t>{0, 6}, {6, 1}, {7, 1}, {8, 1}}) {
      ops.set_rows(batch, begin, count);
      ops.attend_latent(got.data() + begin * c.attn_out_dim(), q.data() + begin * q_dim, latent.data() + begin * rank,
                        k_rot.data() + begin * rope, layer);
    }

    // The expanded form from kv_b_proj itself: per head, keys [W_uk c | k_rot] and values W_uv c.
    const WeightView& kv_b = model->weights().layers[size_t(layer)].wkv_b;
    std::vector<float> row(static_cast<size_t>(rank));
    std::vector<double> w(size_t(kv_b.rows * rank));
    for (int64_t r = 0; r < kv_b.rows; ++r) {
      ops::weight_row_to_f32(row.data(), kv_b, r);
      std::copy(row.begin(), row.end(), w.begin() + r * rank);
    }
    const auto project = [&](int64_t w_row, int64_t pos) {  // kv_b row w_row times the latent at pos
      double sum = 0.0;
      for (int64_t i = 0; i < rank; ++i) sum += w[size_t(w_row * rank + i)] * double(latent[size_t(pos * rank + i)]);
      return sum;
    };
    const double scale = c.softmax_scale();
    double worst = 0.0, largest = 0.0;
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < c.n_head; ++h) {
        const float* qh = q.data() + t * q_dim + h * hd;
        std::vector<double> scores(size_t(t + 1));
        double max = -INFINITY;
        for (int64_t p = 0; p <= t; ++p) {
          double s = 0.0;
          for (int64_t i = 0; i < nope; ++i) s += double(qh[i]) * project(h * (nope + vd) + i, p);
          for (int64_t i = 0; i < rope; ++i) s += double(qh[nope + i]) * double(k_rot[size_t(p * rope + i)]);
          scores[size_t(p)] = s * scale;
          max = std::max(max, scores[size_t(p)]);
        }
        double sum = 0.0;
        for (double& s : scores) sum += (s = std::exp(s - max));
        for (int64_t j = 0; j < vd; ++j) {
          double want = 0.0;
          for (int64_t p = 0; p <= t; ++p) want += scores[size_t(p)] / sum * project(h * (nope + vd) + nope + j, p);
          const double have = got[size_t(t * c.attn_out_dim() + h * vd + j)];
          worst = std::max(worst, std::abs(have - want));
          largest = std::max(largest, std::abs(want));
        }
      }
    }
    EXPECT_LE(worst, 1e-5 * largest) << name << ": worst " << worst << " of " << largest;
    EXPECT_GT(largest, 0.1) << name;  // the values are not trivially small
  }
}

}  // namespace
}  // namespace chronos
