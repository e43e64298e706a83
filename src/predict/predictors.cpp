// Predictors: the LookaheadRouter and IntentClassifier of a pack folder at run time.
#include "chronos/predictors.h"

#include <algorithm>
#include <numeric>

#include "chronos/error.h"
#include "predict/pack.h"

namespace chronos {

struct Predictors::Scratch {
  predict::MlpWork<float> lookahead, intent;
  std::vector<int32_t> order;  // [n_expert]
  std::vector<float> pooled;   // [2 * n_embd]
};

namespace {

// Appends the top `count` entries of probs[order.size()] in decreasing order (ties: lower id first).
void append_top(const float* probs, int32_t count, int32_t layer, int32_t horizon, std::vector<int32_t>& order,
                std::vector<ExpertScore>& out) {
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + count, order.end(),
                    [&](int32_t a, int32_t b) { return probs[a] > probs[b] || (probs[a] == probs[b] && a < b); });
  for (int32_t i = 0; i < count; ++i) out.push_back({{layer, order[size_t(i)]}, horizon, probs[order[size_t(i)]]});
}

}  // namespace

Predictors::Predictors(std::unique_ptr<predict::PredictorPack> pack)
    : pack_(std::move(pack)), scratch_(std::make_unique<Scratch>()) {
  CHRONOS_CHECK(pack_ != nullptr);
  scratch_->order.resize(size_t(pack_->shape.n_expert));
  scratch_->pooled.resize(size_t(2 * pack_->shape.n_embd));
  scratch_->lookahead.reserve(pack_->lookahead, 1);
  scratch_->intent.reserve(pack_->intent, 1);
}

Predictors::~Predictors() = default;

std::unique_ptr<Predictors> Predictors::load(const std::filesystem::path& pack_dir) {
  auto pack = predict::load_pack(pack_dir);
  if (pack == nullptr) return nullptr;
  return std::make_unique<Predictors>(std::move(pack));
}

int32_t Predictors::horizon() const { return pack_->horizon; }
const std::string& Predictors::model_fingerprint() const { return pack_->model_fingerprint; }
int32_t Predictors::n_embd() const { return pack_->shape.n_embd; }
int32_t Predictors::n_expert() const { return pack_->shape.n_expert; }
int32_t Predictors::n_expert_used() const { return pack_->shape.n_expert_used; }
const std::vector<int32_t>& Predictors::moe_layers() const { return pack_->shape.moe_layers; }
double Predictors::lookahead_flops() const { return pack_->lookahead.forward_flops(); }

void Predictors::lookahead(std::span<const float> h0, int32_t per_layer, std::vector<ExpertScore>& out) {
  CHRONOS_CHECK_MSG(std::ssize(h0) == pack_->shape.n_embd, "h0 has {} values, expected {}", h0.size(),
                    pack_->shape.n_embd);
  out.clear();
  const int32_t E = pack_->shape.n_expert;
  const int32_t count = std::clamp(per_layer, 0, E);
  if (count == 0) return;
  predict::mlp_forward(pack_->lookahead, h0.data(), 1, scratch_->lookahead);
  const float* probs = scratch_->lookahead.out.data();  // [n_slots, n_expert]
  for (size_t s = 0; s < pack_->slots.size(); ++s) {
    const predict::Slot slot = pack_->slots[s];
    append_top(probs + int64_t(s) * E, count, pack_->shape.moe_layers[size_t(slot.moe_index)], slot.horizon,
               scratch_->order, out);
  }
}

void Predictors::intent(std::span<const float> h0_rows, int64_t n_tokens, std::vector<ExpertScore>& out) {
  if (n_tokens < 1) throw_error("IntentClassifier: the prompt has no tokens");
  const int64_t d = pack_->shape.n_embd;
  CHRONOS_CHECK_MSG(std::ssize(h0_rows) == n_tokens * d, "h0 rows hold {} values, expected {} x {}", h0_rows.size(),
                    n_tokens, d);
  out.clear();
  predict::pool_prompt(h0_rows.data(), n_tokens, d, scratch_->pooled.data());
  predict::mlp_forward(pack_->intent, scratch_->pooled.data(), 1, scratch_->intent);
  const float* share = scratch_->intent.out.data();  // [n_moe_layers, n_expert]
  const int32_t E = pack_->shape.n_expert;
  for (int64_t l = 0; l < pack_->shape.n_moe_layers(); ++l)
    append_top(share + l * E, E, pack_->shape.moe_layers[size_t(l)], kIntentHorizon, scratch_->order, out);
}

}  // namespace chronos
