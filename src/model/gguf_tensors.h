// The tensors of a GGUF file under the Hugging Face names the architecture tables expect: stacked
// experts split into per-expert views, llama's permuted Q/K rows restored, routers made f32.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chronos/gguf.h"
#include "chronos/model_config.h"
#include "chronos/safetensors.h"

namespace chronos {

struct GgufTensors {
  std::unique_ptr<GgufFile> file;
  std::deque<TensorInfo> tensors;  // HF names; a block-typed one has its block dtype and [rows, cols]
  std::map<std::string, const TensorInfo*, std::less<>> by_name;
  std::vector<std::vector<std::byte>> owned;  // the rows of tensors that are copies, not views

  const TensorInfo* find(std::string_view name) const {
    const auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : it->second;
  }
  std::vector<const TensorInfo*> all() const;  // sorted by name
};

// Maps every tensor of `file` for the model `cfg` (ModelConfig::from_gguf of the same file).
// Throws Error naming the file and the tensor for a name it cannot place or a shape that does not
// fit its role; tensors it does not know are left out with a warning.
std::shared_ptr<const GgufTensors> map_gguf_tensors(std::unique_ptr<GgufFile> file, const ModelConfig& cfg);

}  // namespace chronos
