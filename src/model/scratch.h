// Model::Scratch: every activation buffer of the forward pass, sized once from the config.
#pragma once

#include <vector>

#include "chronos/model.h"
#include "model/moe_plan.h"

namespace chronos {

struct Model::Scratch {
  int64_t max_batch = 0;
  int64_t n_ctx = 0;
  const ForwardHooks* hooks = nullptr;  // the running forward call's (set for its duration)
  std::vector<float> x;                 // [max_batch, n_embd] residual stream
  std::vector<float> xn;                // [max_batch, n_embd] normed input of a sub-block
  std::vector<float> q;                 // [max_batch, q_dim]
  std::vector<float> k;                 // [max_batch, kv_dim]
  std::vector<float> v;                 // [max_batch, kv_dim]
  std::vector<float> attn;              // [max_batch, q_dim]
  std::vector<float> ffn_out;           // [max_batch, n_embd]
  std::vector<float> ff_gate;           // [max_batch * max(n_expert_used, 1), n_ff_max]
  std::vector<float> ff_up;             // same
  std::vector<float> ff_in;             // [max_batch * max(n_expert_used, 1), n_embd] gathered expert inputs
  std::vector<float> ff_down;           // same shape, expert outputs
  std::vector<float> router;            // [max_batch, n_expert] logits, then probabilities
  std::vector<int32_t> top_ids;         // [max_batch, n_expert_used]
  std::vector<float> top_w;             // [max_batch, n_expert_used]
  MoePlan plan;                         // the MoE block's host bookkeeping (grouping, waves, missing mass)
  struct WorkItem {
    int32_t expert, row_begin, row_end;
    const FfnWeights* weights;
  };
  std::vector<WorkItem> items;  // capacity n_expert * 64: (expert, row range) tasks
  // The wave's expert inputs as 8-bit activation blocks (grown on first use), and [n_expert] each
  // expert's offset in expert_xq, in bytes.
  std::vector<uint64_t> expert_xq;
  std::vector<int64_t> expert_xq_at;
  MoeCounters counters;
  std::vector<float> rope_cos;        // [n_ctx, n_rot / 2]
  std::vector<float> rope_sin;        // [n_ctx, n_rot / 2]
  std::vector<float> logits;          // [n_vocab] logits of the last token when not requested all
  Batch one_sequence;                 // the rows of the one-sequence forward (capacity max_batch)
  std::span<const int32_t> row_seqs;  // the running chunk's sequence of each row
};

}  // namespace chronos
