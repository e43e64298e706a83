// map_gguf_tensors: llama.cpp's tensor names (gguf-py's tensor_mapping.py) back to the Hugging
// Face names of src/model/arch/: the names every architecture shares here, the router's, the
// experts' and llama's permuted Q/K rows from the architecture's GgufNames.
#include "model/gguf_tensors.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "chronos/error.h"
#include "chronos/ops.h"
#include "model/arch/arch.h"

namespace chronos {
namespace {

// Per-layer tensors: GGUF suffix -> HF suffix after "model.layers.N.".
struct LayerName {
  const char* gguf;
  const char* hf;
};
constexpr LayerName kLayerNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"post_attention_norm.weight", "post_attention_layernorm.weight"},  // glm4moe's name for it
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.bias", "self_attn.o_proj.bias"},  // gpt-oss
    {"attn_sinks.weight", "self_attn.sinks"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},  // dense layers (Qwen's mlp_only_layers)
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"attn_q_a.weight", "self_attn.q_a_proj.weight"},  // deepseek2's latent attention
    {"attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight"},
    {"attn_q_b.weight", "self_attn.q_b_proj.weight"},
    {"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight"},
    {"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight"},
    {"attn_kv_b.weight", "self_attn.kv_b_proj.weight"},     // files from before the split below
    {"attn_qkv.weight", "linear_attn.in_proj_qkv.weight"},  // qwen3next and qwen35moe's Gated DeltaNet
    {"attn_gate.weight", "linear_attn.in_proj_z.weight"},
    {"ssm_ba.weight", "linear_attn.in_proj_ba.weight"},
    {"ssm_beta.weight", "linear_attn.in_proj_b.weight"},
    {"ssm_alpha.weight", "linear_attn.in_proj_a.weight"},
    {"ssm_dt.bias", "linear_attn.dt_bias"},
    {"ssm_norm.weight", "linear_attn.norm.weight"},
    {"ssm_out.weight", "linear_attn.out_proj.weight"},
};

// "blk.12.attn_q.weight" -> (12, "attn_q.weight"); false for other names.
bool split_layer_name(std::string_view name, int64_t& layer, std::string_view& rest) {
  if (name.substr(0, 4) != "blk.") return false;
  size_t i = 4;
  layer = 0;
  while (i < name.size() && i < 12 && name[i] >= '0' && name[i] <= '9') layer = layer * 10 + (name[i++] - '0');
  if (i == 4 || i >= name.size() || name[i] != '.') return false;
  rest = name.substr(i + 1);
  return true;
}

// llama.cpp's converter stores the Q and K rows of the llama architecture with each head's two
// rotary halves interleaved (LlamaModel.permute: reshape(n_head, 2, head_dim / 2, cols), swap the
// two middle axes). Chronos rotates halves as transformers does, so the HF row order is restored:
// HF row h*hd + i*hd/2 + j is GGUF row h*hd + 2*j + i.
std::vector<std::byte> unpermute_rows(const GgufTensor& t, int64_t n_head) {
  const int64_t rows = t.shape[0];
  const int64_t row_bytes = t.n_bytes / rows;
  const int64_t head_dim = rows / n_head;
  std::vector<std::byte> out(size_t(t.n_bytes));
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < head_dim / 2; ++j) {
        const int64_t hf_row = h * head_dim + i * head_dim / 2 + j;
        const int64_t gguf_row = h * head_dim + 2 * j + i;
        std::memcpy(out.data() + hf_row * row_bytes, t.data + gguf_row * row_bytes, size_t(row_bytes));
      }
  return out;
}

}  // namespace

std::vector<const TensorInfo*> GgufTensors::all() const {
  std::vector<const TensorInfo*> out;
  out.reserve(by_name.size());
  for (const auto& [name, tensor] : by_name) out.push_back(tensor);
  return out;
}

std::shared_ptr<const GgufTensors> map_gguf_tensors(std::unique_ptr<GgufFile> file, const ModelConfig& c) {
  auto out = std::make_shared<GgufTensors>();
  const std::string path = file->path().string();
  const GgufNames& names = arch_spec(c.arch).gguf_names;
  const std::string router = names.router, experts = names.experts;
  const char* const expert_proj[3] = {names.gate, names.up, names.down};

  const auto add = [&](const GgufTensor& t, std::string hf_name, std::vector<int64_t> shape, const std::byte* data,
                       int64_t n_bytes, DType dtype) {
    TensorInfo info;
    info.name = std::move(hf_name);
    info.dtype = dtype;
    info.shape = std::move(shape);
    info.data = data;
    info.n_bytes = n_bytes;
    info.file_offset = t.file_offset + (data - t.data);
    info.file = path;
    if (out->by_name.count(info.name))
      throw_error("{}: tensor {}: maps to {}, which another tensor already gives", path, t.name, info.name);
    out->tensors.push_back(std::move(info));
    out->by_name.emplace(out->tensors.back().name, &out->tensors.back());
  };
  const auto add_whole = [&](const GgufTensor& t, std::string hf_name) {
    add(t, std::move(hf_name), t.shape, t.data, t.n_bytes, t.dtype);
  };
  // A copy owned by the model (rows restored or widened); file_offset still names the source.
  const auto add_owned = [&](const GgufTensor& t, std::string hf_name, std::vector<int64_t> shape,
                             std::vector<std::byte> bytes, DType dtype) {
    out->owned.push_back(std::move(bytes));
    const auto& owned = out->owned.back();
    add(t, std::move(hf_name), std::move(shape), owned.data(), int64_t(owned.size()), dtype);
    out->tensors.back().file_offset = t.file_offset;
  };
  const auto as_f32 = [&](const GgufTensor& t, std::vector<int64_t> shape) {
    const int64_t cols = shape.back();
    int64_t rows = 1;  // every dimension but the last (a 3-D tensor's matrices stacked)
    for (size_t d = 0; d + 1 < t.shape.size(); ++d) rows *= t.shape[d];
    std::vector<std::byte> bytes(size_t(rows * cols) * sizeof(float));
    const WeightView w{t.data, t.dtype, rows, cols};
    for (int64_t r = 0; r < rows; ++r) ops::weight_row_to_f32(reinterpret_cast<float*>(bytes.data()) + r * cols, w, r);
    return bytes;
  };

  // NextN (multi-token prediction) blocks after the model's layers (glm4moe): not decoded, skipped.
  const std::string nextn_key = fmt::format("{}.nextn_predict_layers", arch_spec(c.arch).gguf_arch);
  const int64_t n_blocks = c.n_layer + file->get_int(nextn_key).value_or(0);
  int64_t n_nextn = 0;

  // deepseek2's kv_b_proj split per head into attn_k_b [n_head, kv_lora_rank, qk_nope] (the key rows
  // transposed) and attn_v_b [n_head, v_head_dim, kv_lora_rank]: joined back into kv_b_proj below.
  std::map<int64_t, std::pair<const GgufTensor*, const GgufTensor*>> split_kv_b;

  int n_unknown = 0;
  for (const GgufTensor& t : file->tensors()) {
    if (t.name == "token_embd.weight") {
      add_whole(t, "model.embed_tokens.weight");
      continue;
    }
    if (t.name == "output_norm.weight") {
      add_whole(t, "model.norm.weight");
      continue;
    }
    if (t.name == "output.weight") {
      add_whole(t, "lm_head.weight");
      continue;
    }
    int64_t il = 0;
    std::string_view rest;
    const bool in_block = split_layer_name(t.name, il, rest);
    if (in_block && il >= c.n_layer && il < n_blocks) {
      ++n_nextn;
      continue;
    }
    if (!in_block || il >= c.n_layer) {
      if (n_unknown++ < 5) spdlog::warn("{}: tensor {} is not used by {}; ignored", path, t.name, c.arch_name());
      continue;
    }
    const std::string prefix = fmt::format("model.layers.{}.", il);

    if (rest == "ffn_gate_exps.weight" || rest == "ffn_up_exps.weight" || rest == "ffn_down_exps.weight") {
      const int proj = rest == "ffn_gate_exps.weight" ? 0 : rest == "ffn_up_exps.weight" ? 1 : 2;
      if (t.shape.size() != 3 || t.shape[0] != c.n_expert)
        throw_error("{}: tensor {}: shape [{}], expected [{}, rows, cols] (one matrix per expert)", path, t.name,
                    fmt::join(t.shape, ", "), c.n_expert);
      const int64_t expert_bytes = t.n_bytes / c.n_expert;  // each expert's slice is contiguous
      for (int64_t e = 0; e < c.n_expert; ++e)
        add(t, fmt::format("{}{}.{}.{}.weight", prefix, experts, e, expert_proj[proj]), {t.shape[1], t.shape[2]},
            t.data + e * expert_bytes, expert_bytes, t.dtype);
      continue;
    }
    if (rest == "ffn_gate_exps.bias" || rest == "ffn_up_exps.bias" || rest == "ffn_down_exps.bias") {
      // gpt-oss: every expert's projection bias, [n_expert, rows]; kept resident in f32.
      const int proj = rest == "ffn_gate_exps.bias" ? 0 : rest == "ffn_up_exps.bias" ? 1 : 2;
      if (t.shape.size() != 2 || t.shape[0] != c.n_expert)
        throw_error("{}: tensor {}: shape [{}], expected [{}, rows] (one bias per expert)", path, t.name,
                    fmt::join(t.shape, ", "), c.n_expert);
      add_owned(t, fmt::format("{}{}.{}_bias", prefix, experts, expert_proj[proj]), t.shape, as_f32(t, t.shape),
                DType::kF32);
      continue;
    }
    if (rest == "ffn_gate_inp.bias" && names.router_logit_bias != nullptr) {  // gpt-oss's router bias, f32
      if (t.shape.size() != 1 || t.shape[0] != c.n_expert)
        throw_error("{}: tensor {}: shape [{}], expected [{}]", path, t.name, fmt::join(t.shape, ", "), c.n_expert);
      add_owned(t, prefix + names.router_logit_bias, t.shape, as_f32(t, t.shape), DType::kF32);
      continue;
    }
    if (rest == "ffn_gate_inp.weight") {  // the router, f32 as the reference keeps it
      if (t.shape.size() != 2)
        throw_error("{}: tensor {}: shape [{}], expected [{}, {}]", path, t.name, fmt::join(t.shape, ", "), c.n_expert,
                    c.n_embd);
      if (t.dtype == DType::kF32)
        add_whole(t, prefix + router);
      else
        add_owned(t, prefix + router, t.shape, as_f32(t, t.shape), DType::kF32);
      continue;
    }
    if (rest == "ffn_gate_shexp.weight" || rest == "ffn_up_shexp.weight" || rest == "ffn_down_shexp.weight") {
      const std::string_view proj = rest.substr(0, rest.find('_', 4));  // ffn_gate, ffn_up, ffn_down
      add_whole(t, fmt::format("{}{}.{}_proj.weight", prefix, names.shared, proj.substr(4)));
      continue;
    }
    if (rest == "exp_probs_b.bias" && names.router_bias != nullptr) {  // the sigmoid router's bias, f32
      if (t.shape.size() != 1 || t.shape[0] != c.n_expert)
        throw_error("{}: tensor {}: shape [{}], expected [{}]", path, t.name, fmt::join(t.shape, ", "), c.n_expert);
      add_owned(t, prefix + names.router_bias, t.shape, as_f32(t, t.shape), DType::kF32);
      continue;
    }
    if (rest == "ssm_a") {  // -exp(A_log), as llama.cpp's converter stores it: the log taken back, f32
      if (t.shape.size() != 1)
        throw_error("{}: tensor {}: shape [{}], expected one value per value head", path, t.name,
                    fmt::join(t.shape, ", "));
      std::vector<std::byte> bytes = as_f32(t, {t.shape[0]});
      auto* values = reinterpret_cast<float*>(bytes.data());
      for (int64_t h = 0; h < t.shape[0]; ++h) {
        if (!(values[h] < 0.0f) || !std::isfinite(values[h]))
          throw_error("{}: tensor {}: element {} is {}, expected -exp(A_log) < 0", path, t.name, h, values[h]);
        values[h] = std::log(-values[h]);
      }
      add_owned(t, prefix + "linear_attn.A_log", t.shape, std::move(bytes), DType::kF32);
      continue;
    }
    if (rest == "ssm_conv1d.weight") {  // [channels, kernel]; the checkpoint's [channels, 1, kernel]
      if (t.shape.size() != 2)
        throw_error("{}: tensor {}: shape [{}], expected [channels, kernel]", path, t.name, fmt::join(t.shape, ", "));
      add(t, prefix + "linear_attn.conv1d.weight", {t.shape[0], 1, t.shape[1]}, t.data, t.n_bytes, t.dtype);
      continue;
    }
    if (rest == "attn_k_b.weight" || rest == "attn_v_b.weight") {
      (rest == "attn_k_b.weight" ? split_kv_b[il].first : split_kv_b[il].second) = &t;
      continue;
    }
    if (rest == "ffn_gate_inp_shexp.weight") {  // [n_embd] or [1, n_embd] in GGUF; [1, n_embd] in HF
      if (t.shape.size() > 2 || (t.shape.size() == 2 && t.shape[0] != 1))
        throw_error("{}: tensor {}: shape [{}], expected [{}]", path, t.name, fmt::join(t.shape, ", "), c.n_embd);
      const std::vector<int64_t> shape = {1, t.shape.back()};
      add_owned(t, prefix + "mlp.shared_expert_gate.weight", shape, as_f32(t, shape), DType::kF32);
      continue;
    }
    const auto it = std::find_if(std::begin(kLayerNames), std::end(kLayerNames),
                                 [&](const LayerName& n) { return rest == n.gguf; });
    if (it == std::end(kLayerNames)) {
      if (n_unknown++ < 5) spdlog::warn("{}: tensor {} is not used by {}; ignored", path, t.name, c.arch_name());
      continue;
    }
    const bool q = rest == "attn_q.weight" || rest == "attn_q.bias";
    const bool k = rest == "attn_k.weight" || rest == "attn_k.bias";
    if (names.permuted_qk && (q || k)) {
      const int64_t n_head = q ? c.n_head : c.n_head_kv;
      const int64_t rows = t.shape[0];
      if (t.shape.size() > 2 || rows != n_head * c.head_dim || c.head_dim % 2 != 0)
        throw_error("{}: tensor {}: shape [{}], expected {} rows ({} heads of {})", path, t.name,
                    fmt::join(t.shape, ", "), n_head * c.head_dim, n_head, c.head_dim);
      GgufTensor rows_view = t;
      if (t.shape.size() == 1) rows_view.shape = {t.shape[0], 1};  // a bias: one element per row
      add_owned(t, prefix + it->hf, t.shape, unpermute_rows(rows_view, n_head), t.dtype);
      continue;
    }
    add_whole(t, prefix + it->hf);
  }
  for (const auto& [il, pair] : split_kv_b) {
    const auto [k_b, v_b] = pair;
    const std::string name = fmt::format("blk.{}.{}", il, k_b == nullptr ? "attn_k_b.weight" : "attn_v_b.weight");
    if (k_b == nullptr || v_b == nullptr)
      throw_error("{}: tensor {} is missing (attn_k_b and attn_v_b come together)", path, name);
    const int64_t rank = c.kv_lora_rank, nope = c.qk_nope_dim, vd = c.v_head_dim;
    const std::vector<int64_t> k_shape = {c.n_head, rank, nope}, v_shape = {c.n_head, vd, rank};
    if (k_b->shape != k_shape || v_b->shape != v_shape)
      throw_error("{}: tensors blk.{}.attn_k_b.weight [{}] and attn_v_b.weight [{}], expected [{}] and [{}]", path, il,
                  fmt::join(k_b->shape, ", "), fmt::join(v_b->shape, ", "), fmt::join(k_shape, ", "),
                  fmt::join(v_shape, ", "));
    const std::vector<std::byte> k = as_f32(*k_b, {c.n_head * rank, nope}), v = as_f32(*v_b, {c.n_head * vd, rank});
    const auto* kf = reinterpret_cast<const float*>(k.data());
    const auto* vf = reinterpret_cast<const float*>(v.data());
    std::vector<std::byte> bytes(size_t(c.n_head * (nope + vd) * rank) * sizeof(float));
    auto* out_rows = reinterpret_cast<float*>(bytes.data());
    for (int64_t h = 0; h < c.n_head; ++h) {
      float* head = out_rows + h * (nope + vd) * rank;
      for (int64_t r = 0; r < rank; ++r)
        for (int64_t i = 0; i < nope; ++i) head[i * rank + r] = kf[(h * rank + r) * nope + i];
      std::copy(vf + h * vd * rank, vf + (h + 1) * vd * rank, head + nope * rank);
    }
    add_owned(*k_b, fmt::format("model.layers.{}.self_attn.kv_b_proj.weight", il), {c.n_head * (nope + vd), rank},
              std::move(bytes), DType::kF32);
  }
  if (n_nextn > 0)
    spdlog::debug("{}: {} tensors of the NextN blocks {}..{} skipped", path, n_nextn, c.n_layer, n_blocks - 1);
  out->file = std::move(file);
  return out;
}

}  // namespace chronos
