// Where a Gated DeltaNet layer's inputs sit in its in-projections' rows, one rule for both devices
// (the CPU's CpuOps::gated_delta_net, kernels/cuda/gated_delta_net.cu; nvcc builds it __host__
// __device__). Grouped, as Qwen3-Next's in_proj_qkvz and in_proj_ba store them: per key head g,
// [q (k_dim), k (k_dim), its value heads' v, their z] and [their b, their a]; otherwise the rows are
// in the order used (q, k, v by head; z, b and a by value head). Tiled value heads (Qwen3.5's GGUF
// files): value head p belongs to key head p % k_heads, else to p / (v_heads / k_heads).
#pragma once

#include <cstdint>

#include "kernels/host_device.h"

namespace chronos {

struct DeltaNetLayout {
  int64_t k_heads, v_heads, k_dim, v_dim;
  bool qkvz_grouped, ba_grouped, v_tiled;

  CHRONOS_HD int64_t per_key() const { return v_heads / k_heads; }
  CHRONOS_HD int64_t key_width() const { return k_heads * k_dim; }
  CHRONOS_HD int64_t conv_dim() const { return 2 * key_width() + v_heads * v_dim; }
  CHRONOS_HD int64_t group() const { return 2 * k_dim + 2 * per_key() * v_dim; }  // a key head's qkvz columns
  CHRONOS_HD int64_t qkv_row_width() const { return qkvz_grouped ? k_heads * group() : conv_dim(); }
  CHRONOS_HD int64_t key_head(int64_t value_head) const {
    return v_tiled ? value_head % k_heads : value_head / per_key();
  }
  // A convolution channel's (q, k, then v, by head) column in a row of the qkv projection.
  CHRONOS_HD int64_t qkv_column(int64_t channel) const {
    if (!qkvz_grouped) return channel;
    if (channel < 2 * key_width()) {
      const int64_t part = channel / key_width(), within = channel % key_width();
      return within / k_dim * group() + part * k_dim + within % k_dim;
    }
    const int64_t value = channel - 2 * key_width(), head = value / v_dim;
    return head / per_key() * group() + 2 * k_dim + head % per_key() * v_dim + value % v_dim;
  }
  // Value head h's z (v_dim floats) within a row of in_proj_qkvz (grouped; otherwise z's own row
  // holds it at h * v_dim).
  CHRONOS_HD int64_t z_column(int64_t h) const {
    return h / per_key() * group() + 2 * k_dim + per_key() * v_dim + h % per_key() * v_dim;
  }
  // Value head h's b and a within a row of in_proj_ba (grouped), or of in_proj_b / in_proj_a.
  CHRONOS_HD int64_t b_column(int64_t h) const {
    return ba_grouped ? h / per_key() * 2 * per_key() + h % per_key() : h;
  }
  CHRONOS_HD int64_t a_column(int64_t h) const { return ba_grouped ? b_column(h) + per_key() : h; }
  CHRONOS_HD int64_t ba_row_width() const { return ba_grouped ? 2 * v_heads : v_heads; }
};

}  // namespace chronos
