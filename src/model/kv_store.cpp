// KvStore (model.h): per-sequence key/value slots, allocated once; and Batch's reserve.
#include <algorithm>

#include "chronos/error.h"
#include "chronos/model.h"

namespace chronos {

KvStore::KvStore(const ModelConfig& cfg, int64_t n_ctx, int64_t n_slots, int64_t max_rows)
    : n_layer_(cfg.n_layer),
      n_ctx_(n_ctx),
      key_width_(cfg.kv_key_width()),
      value_width_(cfg.kv_value_width()),
      n_slots_(n_slots),
      max_rows_(max_rows),
      slot_bytes_(bytes_per_slot(cfg, n_ctx, max_rows)) {
  CHRONOS_CHECK(n_ctx > 0 && n_slots > 0 && max_rows >= 0);
  lay_out(cfg);
  const size_t positions = size_t(n_slots * slot_positions_);
  k_.resize(positions * size_t(key_width_));
  v_.resize(positions * size_t(value_width_));
  k_base_ = k_.data();
  v_base_ = v_.data();
  in_use_.assign(size_t(n_slots), 0);
  length_.assign(size_t(n_slots), 0);
  next_.assign(size_t(n_slots), -1);
  state_.resize(size_t(n_slots * state_per_slot_));
  state_base_ = state_.data();
}

KvStore::KvStore(const ModelConfig& cfg, int64_t n_ctx, int64_t n_slots, float* k, float* v, float* state)
    : n_layer_(cfg.n_layer),
      n_ctx_(n_ctx),
      key_width_(cfg.kv_key_width()),
      value_width_(cfg.kv_value_width()),
      n_slots_(n_slots),
      max_rows_(0),
      slot_bytes_(bytes_per_slot(cfg, n_ctx)),
      k_base_(k),
      v_base_(v) {
  CHRONOS_CHECK(n_ctx > 0 && n_slots > 0 && k != nullptr && (v != nullptr || value_width_ == 0));
  lay_out(cfg);
  state_base_ = state;
  CHRONOS_CHECK_MSG(state_per_slot_ == 0 || state != nullptr, "a recurrent model's KV store needs state memory");
  in_use_.assign(size_t(n_slots), 0);
  length_.assign(size_t(n_slots), 0);
  next_.assign(size_t(n_slots), -1);
}

void KvStore::lay_out(const ModelConfig& cfg) {
  layer_cap_.resize(size_t(n_layer_));
  layer_base_.resize(size_t(n_layer_));
  layer_state_.assign(size_t(n_layer_), -1);
  slot_positions_ = 0;
  state_per_slot_ = 0;
  for (int64_t il = 0; il < n_layer_; ++il) {
    layer_base_[size_t(il)] = slot_positions_;
    layer_cap_[size_t(il)] = layer_positions(cfg, il, n_ctx_, max_rows_);
    slot_positions_ += layer_cap_[size_t(il)];
    if (cfg.layers[size_t(il)].attention == AttentionKind::kGatedDeltaNet) {
      layer_state_[size_t(il)] = state_per_slot_;
      state_per_slot_ += cfg.lin_state_floats();
    }
  }
}

int64_t KvStore::layer_positions(const ModelConfig& cfg, int64_t layer, int64_t n_ctx, int64_t max_rows) {
  // A chunk's rows are all stored before any attends: its first row still needs the window before
  // it, so the ring holds the window and the chunk's other rows.
  if (cfg.layers[size_t(layer)].attention == AttentionKind::kGatedDeltaNet) return 0;  // a state, no positions
  const int64_t window = cfg.layers[size_t(layer)].window;
  if (window <= 0 || max_rows <= 0) return n_ctx;
  return std::min(n_ctx, window + max_rows - 1);
}

int64_t KvStore::state_bytes_per_slot(const ModelConfig& cfg) {
  int64_t floats = 0;
  for (const LayerKind& layer : cfg.layers)
    if (layer.attention == AttentionKind::kGatedDeltaNet) floats += cfg.lin_state_floats();
  return floats * int64_t(sizeof(float));
}

int64_t KvStore::bytes_per_slot(const ModelConfig& cfg, int64_t n_ctx, int64_t max_rows) {
  int64_t positions = 0;
  for (int64_t il = 0; il < cfg.n_layer; ++il) positions += layer_positions(cfg, il, n_ctx, max_rows);
  return positions * (cfg.kv_key_width() + cfg.kv_value_width()) * int64_t(sizeof(float)) + state_bytes_per_slot(cfg);
}

int64_t KvStore::slots_for_budget(const ModelConfig& cfg, int64_t n_ctx, int64_t budget) {
  const int64_t per_slot = bytes_per_slot(cfg, n_ctx);
  if (per_slot <= 0 || budget < per_slot)
    throw_error("a KV budget of {} bytes holds no sequence of {} positions (one needs {} bytes)", budget, n_ctx,
                per_slot);
  return budget / per_slot;
}

int32_t KvStore::allocate() {
  const auto free_slot = std::find(in_use_.begin(), in_use_.end(), 0);
  if (free_slot == in_use_.end())
    throw_error("the KV store is full: all {} slots are in use ({} positions each); free a sequence first", n_slots_,
                n_ctx_);
  *free_slot = 1;
  const auto slot = int32_t(free_slot - in_use_.begin());
  length_[size_t(slot)] = 0;
  return slot;
}

int32_t KvStore::allocate(int32_t slot, int64_t keep) {
  if (slot < 0 || slot >= n_slots_) throw_error("KV store: there is no slot {} (the store has {})", slot, n_slots_);
  if (in_use(slot)) throw_error("KV store: slot {} is in use", slot);
  if (keep < 0 || keep >= n_ctx_)
    throw_error("KV store: cannot keep {} positions of slot {} (the context holds {})", keep, slot, n_ctx_);
  in_use_[size_t(slot)] = 1;
  length_[size_t(slot)] = keep;
  return slot;
}

void KvStore::free(int32_t slot) {
  if (!in_use(slot)) throw_error("KV store: sequence {} is not in use (the store has {} slots)", slot, n_slots_);
  in_use_[size_t(slot)] = 0;
  length_[size_t(slot)] = 0;
}

int64_t KvStore::n_in_use() const { return std::count(in_use_.begin(), in_use_.end(), 1); }

void Batch::reserve(int64_t rows) {
  seqs_.reserve(size_t(rows));
  positions_.reserve(size_t(rows));
  tokens_.reserve(size_t(rows));
  logits_.reserve(size_t(rows));
}

}  // namespace chronos
