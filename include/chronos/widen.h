// widen_model: a copy of a Hugging Face MoE checkpoint whose routed experts are zero-padded to a
// larger FFN size (same function, bigger experts: for I/O and cache experiments at real sizes).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>

namespace chronos {

struct WidenOptions {
  int64_t expert_ffn = 0;  // new routed-expert FFN size; must exceed the model's
  // Output above this many bytes is sharded the way transformers does it
  // (model-0000i-of-0000n.safetensors + model.safetensors.index.json), shards of at most this
  // size (a tensor larger than it gets a shard of its own). The widened tensors of one shard are
  // held in memory while it is written, so this also bounds the extra RAM.
  int64_t max_shard_bytes = int64_t(4) << 30;
  // Called after each tensor is prepared and after each shard is written, with work done and work
  // total in bytes, where every tensor counts once when prepared and once when written (so total
  // is twice the output size). May throw to abandon the run (nothing is left behind).
  std::function<void(int64_t done, int64_t total)> progress;
};

struct WidenResult {
  int64_t old_expert_ffn = 0;
  int64_t n_tensors = 0;
  int64_t n_widened = 0;  // routed-expert tensors that were padded
  int64_t n_shards = 0;   // 1: a single model.safetensors
  int64_t total_bytes = 0;
};

// Reads `model_dir` (validated as Model::load does), writes the widened copy to `out_dir` via a
// temporary sibling folder renamed into place at the end: gate and up get expert_ffn - I zero
// rows, down gets expert_ffn - I zero columns, config.json's expert-size key is set, every other
// tensor is copied unchanged, tokenizer/generation/license files are copied. Refuses an existing
// `out_dir` and expert_ffn <= I (UsageError).
WidenResult widen_model(const std::filesystem::path& model_dir, const std::filesystem::path& out_dir,
                        const WidenOptions& options);

}  // namespace chronos
