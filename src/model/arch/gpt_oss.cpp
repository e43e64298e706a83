// gpt-oss (gpt_oss): every layer MoE; attention with q/k/v/o biases, a learned sink logit per head
// and, on the layers layer_types names sliding_attention, a window of sliding_window keys; YaRN
// rope (truncate false in the released config); a router with a bias whose top-k logits are
// softmaxed (softmax over all, top-k, renormalized: the same weights); experts with biases and the
// clamped SwiGLU (swiglu_limit, alpha 1.702, (up + 1)).
//
// The checkpoints fuse each layer's experts: gate_up_proj [E, H, 2I] (y = x @ W, gate and up in
// alternating columns) and down_proj [E, I, H] in bf16, or as released gate_up_proj [E, 2I, H] and
// down_proj [E, H, I] in MXFP4 (the *_blocks / *_scales pairs the tensor store presents as one
// tensor, rows the outputs). present() splits them into the per-expert gate/up/down matrices the
// engine binds, under the names a pack stores them by, and the gate_up bias into two, listed in
// the tensor store in the fused tensors' place (TensorStore::present).
#include <fmt/format.h>

#include <cstring>

#include "chronos/error.h"
#include "chronos/gguf.h"
#include "chronos/safetensors.h"
#include "model/arch/arch.h"

namespace chronos {
namespace {

void read_config(const nlohmann::json& j, ModelConfig& c) {
  c.n_expert = json_int(j, "num_local_experts");
  c.n_ff_expert = json_int(j, "intermediate_size");
  c.norm_topk_prob = true;  // softmax over the k chosen logits
  c.rms_norm_eps = float(json_number_or(j, "rms_norm_eps", 1e-5));
  c.tie_word_embeddings = json_bool_or(j, "tie_word_embeddings", false);
  c.attn_qkv_bias = c.attn_o_bias = json_bool_or(j, "attention_bias", true);
  c.attn_sinks = c.router_logit_bias = c.expert_bias = true;
  c.swiglu_limit = float(json_number_or(j, "swiglu_limit", 7.0));
  c.swiglu_alpha = float(json_number_or(j, "swiglu_alpha", 1.702));
  if (!(c.swiglu_limit > 0.0f)) throw_error("key 'swiglu_limit' must be positive (got {})", c.swiglu_limit);
  if (!(c.swiglu_alpha > 0.0f)) throw_error("key 'swiglu_alpha' must be positive (got {})", c.swiglu_alpha);
  c.layers.assign(size_t(c.n_layer), LayerKind{AttentionKind::kGqa, FfnKind::kMoe, RouterKind::kSoftmaxTopK});
  const int64_t window = json_int_or(j, "sliding_window", 0);
  if (window < 0) throw_error("key 'sliding_window' must not be negative (got {})", window);
  // Without layer_types transformers alternates, the first layer sliding.
  std::vector<bool> sliding(size_t(c.n_layer));
  for (int64_t i = 0; i < c.n_layer; ++i) sliding[size_t(i)] = i % 2 == 0;
  if (auto types = read_layer_types(j, c.n_layer, "sliding_attention", "full_attention")) sliding = std::move(*types);
  for (int64_t i = 0; i < c.n_layer; ++i)
    if (sliding[size_t(i)]) {
      if (window == 0) throw_error("layer {} is sliding_attention but key 'sliding_window' is not set", i);
      c.layers[size_t(i)].window = window;
    }
}

std::vector<TensorSpec> tensor_table(const ModelConfig& c) {
  std::vector<TensorSpec> out;
  add_global_tensors(c, out);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    add_attention_tensors(c, il, out);
    const std::string p = fmt::format("model.layers.{}.", il);
    if (c.attn_o_bias) out.push_back({TensorRole::kAttnOBias, il, -1, p + "self_attn.o_proj.bias", {c.n_embd}});
    out.push_back({TensorRole::kAttnSinks, il, -1, p + "self_attn.sinks", {c.n_head}});
    out.push_back({TensorRole::kRouter, il, -1, p + "mlp.router.weight", {c.n_expert, c.n_embd}});
    out.push_back({TensorRole::kRouterLogitBias, il, -1, p + "mlp.router.bias", {c.n_expert}});
    add_expert_tensors(c, il, "mlp.experts", "gate_proj", "up_proj", "down_proj", out);
    out.push_back({TensorRole::kExpertGateBias, il, -1, p + "mlp.experts.gate_proj_bias", {c.n_expert, c.n_ff_expert}});
    out.push_back({TensorRole::kExpertUpBias, il, -1, p + "mlp.experts.up_proj_bias", {c.n_expert, c.n_ff_expert}});
    out.push_back({TensorRole::kExpertDownBias, il, -1, p + "mlp.experts.down_proj_bias", {c.n_expert, c.n_embd}});
  }
  return out;
}

// A made tensor: a copy made here (bytes) or a slice of a stored one (data points into it).
MadeTensor& add(std::vector<std::shared_ptr<const MadeTensor>>& out, std::string name, DType dtype,
                std::vector<int64_t> shape, const TensorInfo& from) {
  auto made = std::make_shared<MadeTensor>();
  MadeTensor& t = *made;
  out.push_back(std::move(made));
  t.info.name = std::move(name);
  t.info.dtype = dtype;
  t.info.shape = std::move(shape);
  t.info.n_bytes = t.info.shape[0] * dtype_row_bytes(dtype, t.info.shape[1]);
  t.info.file = from.file;
  t.info.file_offset = from.file_offset;
  return t;
}

// One layer's fused experts and bias, split and listed in their place.
void split_layer(TensorStore& store, const ModelConfig& c, const std::string& source, int64_t il) {
  const std::string p = fmt::format("model.layers.{}.mlp.experts.", il);
  const TensorInfo* gate_up = store.find(p + "gate_up_proj");
  const TensorInfo* down = store.find(p + "down_proj");
  const TensorInfo* gate_up_bias = store.find(p + "gate_up_proj_bias");
  if (gate_up == nullptr && down == nullptr && gate_up_bias == nullptr) return;  // stored per expert (a pack)
  const int64_t E = c.n_expert, H = c.n_embd, I = c.n_ff_expert;
  const auto need = [&](const TensorInfo* t, const char* name, std::vector<int64_t> bf16_shape,
                        std::vector<int64_t> mxfp4_shape) -> const TensorInfo& {
    if (t == nullptr) throw_error("{}: tensor {}{} is missing (gpt-oss expects it)", source, p, name);
    const bool mx = t->dtype == DType::kMXFP4;
    if (!mx && !(t->dtype == DType::kF32 || t->dtype == DType::kBF16 || t->dtype == DType::kF16))
      throw_error("{}: tensor {}: dtype {} is not supported (F32, F16, BF16 or MXFP4 blocks and scales)", t->file,
                  t->name, dtype_name(t->dtype));
    const std::vector<int64_t>& want = mx ? mxfp4_shape : bf16_shape;
    if (t->shape != want)
      throw_error("{}: tensor {}: shape [{}], expected [{}]", t->file, t->name, fmt::join(t->shape, ","),
                  fmt::join(want, ","));
    return *t;
  };
  const TensorInfo& gu = need(gate_up, "gate_up_proj", {E, H, 2 * I}, {E, 2 * I, H});
  const TensorInfo& dn = need(down, "down_proj", {E, I, H}, {E, H, I});
  const TensorInfo& gub = need(gate_up_bias, "gate_up_proj_bias", {E, 2 * I}, {E, 2 * I});
  if (gub.dtype == DType::kMXFP4) throw_error("{}: tensor {}: a bias cannot be MXFP4", gub.file, gub.name);
  const std::vector<std::string> fused = {gu.name, dn.name, gub.name};
  std::vector<std::shared_ptr<const MadeTensor>> out;
  const auto* gu_bytes = reinterpret_cast<const uint8_t*>(gu.data);
  const auto* dn_bytes = reinterpret_cast<const uint8_t*>(dn.data);
  for (int64_t e = 0; e < E; ++e) {
    const std::string q = fmt::format("{}{}.", p, e);
    MadeTensor& g = add(out, q + "gate_proj.weight", gu.dtype, {I, H}, gu);
    MadeTensor& u = add(out, q + "up_proj.weight", gu.dtype, {I, H}, gu);
    g.bytes.resize(size_t(g.info.n_bytes));
    u.bytes.resize(size_t(u.info.n_bytes));
    if (gu.dtype == DType::kMXFP4) {  // rows are outputs: gate the even ones, up the odd ones
      const int64_t row = dtype_row_bytes(DType::kMXFP4, H);
      const uint8_t* base = gu_bytes + e * 2 * I * row;
      for (int64_t i = 0; i < I; ++i) {
        std::memcpy(g.bytes.data() + i * row, base + (2 * i) * row, size_t(row));
        std::memcpy(u.bytes.data() + i * row, base + (2 * i + 1) * row, size_t(row));
      }
    } else {  // [H, 2I] per expert: transposed, gate and up alternating along the columns
      const int64_t size = dtype_size(gu.dtype);
      const uint8_t* base = gu_bytes + e * H * 2 * I * size;
      for (int64_t i = 0; i < I; ++i)
        for (int64_t h = 0; h < H; ++h) {
          std::memcpy(g.bytes.data() + (i * H + h) * size, base + (h * 2 * I + 2 * i) * size, size_t(size));
          std::memcpy(u.bytes.data() + (i * H + h) * size, base + (h * 2 * I + 2 * i + 1) * size, size_t(size));
        }
    }
    g.info.data = g.bytes.data();
    u.info.data = u.bytes.data();
    MadeTensor& d = add(out, q + "down_proj.weight", dn.dtype, {H, I}, dn);
    if (dn.dtype == DType::kMXFP4) {  // [H, I] per expert as stored: a slice, no copy
      d.info.data = reinterpret_cast<const std::byte*>(dn_bytes + e * d.info.n_bytes);
      d.info.file_offset = dn.file_offset + e * d.info.n_bytes;
    } else {
      const int64_t size = dtype_size(dn.dtype);
      d.bytes.resize(size_t(d.info.n_bytes));
      const uint8_t* base = dn_bytes + e * I * H * size;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < I; ++i)
          std::memcpy(d.bytes.data() + (h * I + i) * size, base + (i * H + h) * size, size_t(size));
      d.info.data = d.bytes.data();
    }
  }
  // The fused bias: gate and up alternating, as the matrix's outputs.
  const int64_t size = dtype_size(gub.dtype);
  MadeTensor& gb = add(out, p + "gate_proj_bias", gub.dtype, {E, I}, gub);
  MadeTensor& ub = add(out, p + "up_proj_bias", gub.dtype, {E, I}, gub);
  gb.bytes.resize(size_t(gb.info.n_bytes));
  ub.bytes.resize(size_t(ub.info.n_bytes));
  const auto* bias = reinterpret_cast<const uint8_t*>(gub.data);
  for (int64_t k = 0; k < E * I; ++k) {
    std::memcpy(gb.bytes.data() + k * size, bias + (2 * k) * size, size_t(size));
    std::memcpy(ub.bytes.data() + k * size, bias + (2 * k + 1) * size, size_t(size));
  }
  gb.info.data = gb.bytes.data();
  ub.info.data = ub.bytes.data();
  store.present(fused, std::move(out));
}

void present(TensorStore& store, const ModelConfig& c, const std::string& source) {
  for (int64_t il = 0; il < c.n_layer; ++il) split_layer(store, c, source, il);
}

// llama.cpp's gpt-oss files: every layer MoE, the sliding window on every other layer from the
// first (as llama.cpp's swa pattern 2), the released model's SwiGLU limit (llama.cpp's converter
// writes no key for it and its graph uses 7; a file with <arch>.swiglu_clamp_exp, llama.cpp's
// per-layer key of other families, is held to it) and the released YaRN ramp, not truncated.
void gguf_config(const GgufFacts& f, nlohmann::json& j) {
  if (!f.dense_layers.empty())
    throw_error("{}: tensor blk.{}.ffn_gate_inp.weight is missing (every gpt-oss layer has a router)", f.path,
                f.dense_layers.front());
  j["num_local_experts"] = f.n_expert;
  j["intermediate_size"] = f.n_ff_expert ? *f.n_ff_expert : f.n_ff.value_or(0);
  j["attention_bias"] = true;
  const auto window = f.int_key("attention.sliding_window");
  if (!window || *window <= 0)
    throw_error("{}: key {} is missing (gpt-oss's sliding layers need it)", f.path, f.key("attention.sliding_window"));
  j["sliding_window"] = *window;
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) j["rope_scaling"]["truncate"] = false;
  const std::vector<float> limits = f.file.get_f32_array(f.key("swiglu_clamp_exp"));
  if (!limits.empty()) {
    for (const float limit : limits)
      if (limit != limits.front())
        throw_error("{}: key {}: the layers' limits differ (gpt-oss has one)", f.path, f.key("swiglu_clamp_exp"));
    j["swiglu_limit"] = limits.front();
  }
}

constexpr GgufNames kGgufNames{"mlp.router.weight", "mlp.experts", "gate_proj", "up_proj",
                               "down_proj",         false,         nullptr,     nullptr,
                               "mlp.router.bias"};

}  // namespace

const ArchSpec& arch_gpt_oss() {
  static const ArchSpec spec{Arch::kGptOss, "gpt_oss",  "gpt-oss", read_config, tensor_table, "gpt-oss",
                             gguf_config,   kGgufNames, nullptr,   1.0,         present};
  return spec;
}

}  // namespace chronos
