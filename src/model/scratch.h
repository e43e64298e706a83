// Model::Scratch: the CPU forward's state, sized once from the config: the host side every device
// shares (ForwardState), the weights as the CPU reads them, and the buffers of the CPU's op table
// (cpu_ops.cpp).
#pragma once

#include <vector>

#include "chronos/model.h"
#include "model/device_ops.h"

namespace chronos {

struct Model::Scratch {
  ForwardState state;
  ModelViews views;
  // The activations (device_ops.h's Activations point into these).
  std::vector<float> x, xn, q, k, v, attn, mix, gate, mix_ba, ffn_out, ff_gate, ff_up, ff_in, ff_down, shared_out,
      shared_logit, router;
  std::vector<float> lin_conv_out;   // [max_batch, conv_dim] a Gated DeltaNet's convolved q, k, v
  std::vector<int64_t> lin_columns;  // [conv_dim] each convolution channel's column in a qkv row
  Activations act;
  std::vector<int32_t> top_ids;  // [max_batch, n_expert_used] the router's choices
  std::vector<float> top_w;      // [max_batch, n_expert_used] and their weights
  struct WorkItem {
    int32_t expert, row_begin, row_end;
    const FfnWeights* weights;
  };
  std::vector<WorkItem> items;  // capacity n_expert * 64: (expert, row range) tasks of a wave
  // The wave's expert inputs as 8-bit activation blocks (grown on first use), and [n_expert] each
  // expert's offset in expert_xq, in bytes.
  std::vector<uint64_t> expert_xq;
  std::vector<int64_t> expert_xq_at;
  std::vector<float> rope_cos;  // [n_ctx, n_rot / 2]
  std::vector<float> rope_sin;  // [n_ctx, n_rot / 2]
};

}  // namespace chronos
