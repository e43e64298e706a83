// Qwen3-Next (qwen3_next): three Gated DeltaNet layers to one full-attention layer
// (layer_types, or full_attention_interval), a Qwen2-MoE block (many small experts, a shared expert
// scaled by sigmoid(shared_expert_gate(x)), dense layers by mlp_only_layers), and:
// - full attention with an output gate (q_proj gives each head's query and gate, head by head),
//   per-head q/k RMSNorm, head_dim 256 and a quarter of it rotary (partial_rotary_factor 0.25);
// - Gated DeltaNet (linear_attn): in_proj_qkvz and in_proj_ba, their rows grouped per key head
//   ([q, k, v..., z...] and [b..., a...] for each), a depthwise causal convolution over q, k, v
//   (linear_conv_kernel_dim, SiLU), L2-normalized q and k, the decay g = -exp(A_log) *
//   softplus(a + dt_bias) and beta = sigmoid(b), the delta rule per value head, an RMSNorm of each
//   head's output gated by silu(z), out_proj;
// - every RMSNorm but the gated one scales by (1 + w): the loader adds the 1 (ModelConfig::
//   norm_plus_one), so the forward's norms stay plain.
//
// Qwen3.5 / Qwen3.6 MoE (qwen3_5_moe) is the same model with: in_proj_qkv, in_proj_z, in_proj_b and
// in_proj_a in the order their heads are used (not grouped); every layer MoE, renormalized; the text
// model's config nested in text_config and its tensors under model.language_model. (present()
// lists them under model.), beside a vision encoder that is not loaded (model.visual.); the
// interleaved multimodal rotary, which for text (the same position on its three axes) is the plain
// one.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string_view>

#include "chronos/error.h"
#include "chronos/gguf.h"
#include "model/arch/qwen_moe_common.h"

namespace chronos {
namespace {

void read_linear_attention(const nlohmann::json& j, ModelConfig& c) {
  c.lin_k_heads = json_int(j, "linear_num_key_heads");
  c.lin_v_heads = json_int(j, "linear_num_value_heads");
  c.lin_k_dim = json_int(j, "linear_key_head_dim");
  c.lin_v_dim = json_int(j, "linear_value_head_dim");
  c.lin_conv_kernel = json_int_or(j, "linear_conv_kernel_dim", 4);
  const auto bounded = [](int64_t value, int64_t high, const char* key) {
    if (value <= 0 || value > high) throw_error("key '{}' must be in [1, {}] (got {})", key, high, value);
  };
  bounded(c.lin_k_heads, 1024, "linear_num_key_heads");
  bounded(c.lin_v_heads, 1024, "linear_num_value_heads");
  bounded(c.lin_k_dim, 1024, "linear_key_head_dim");
  bounded(c.lin_v_dim, 1024, "linear_value_head_dim");
  bounded(c.lin_conv_kernel, 64, "linear_conv_kernel_dim");
  if (c.lin_conv_kernel < 2) throw_error("key 'linear_conv_kernel_dim' must be at least 2 (got {})", c.lin_conv_kernel);
  if (c.lin_v_heads % c.lin_k_heads != 0)
    throw_error("linear_num_value_heads ({}) is not a multiple of linear_num_key_heads ({})", c.lin_v_heads,
                c.lin_k_heads);
}

// Which layers are full attention: layer_types, else every full_attention_interval-th (1-based).
void read_layer_schedule(const nlohmann::json& j, ModelConfig& c) {
  std::vector<bool> full(size_t(c.n_layer));
  if (auto types = read_layer_types(j, c.n_layer, "full_attention", "linear_attention")) {
    full = std::move(*types);
  } else {
    const int64_t interval = json_int_or(j, "full_attention_interval", 4);
    if (interval <= 0) throw_error("key 'full_attention_interval' must be positive (got {})", interval);
    for (int64_t i = 0; i < c.n_layer; ++i) full[size_t(i)] = (i + 1) % interval == 0;
  }
  for (int64_t i = 0; i < c.n_layer; ++i)
    c.layers[size_t(i)].attention = full[size_t(i)] ? AttentionKind::kGqa : AttentionKind::kGatedDeltaNet;
}

void read_config(const nlohmann::json& j, ModelConfig& c) {
  const bool next = c.model_type == "qwen3_next";
  c.n_expert = qwen_moe::read_expert_count(j);
  c.n_ff_expert = json_int_or(j, "moe_intermediate_size", 0);
  c.n_ff_shared = json_int_or(j, "shared_expert_intermediate_size", 0);
  c.shared_expert_gated = c.n_ff_shared > 0;
  c.n_ff_dense = json_int_or(j, "intermediate_size", 0);
  c.norm_topk_prob = !next || json_bool_or(j, "norm_topk_prob", true);  // Qwen3.5 always renormalizes
  c.rms_norm_eps = float(json_number_or(j, "rms_norm_eps", 1e-6));
  c.qk_norm = QkNorm::kPerHead;
  c.attn_output_gate = true;
  // The layouts of llama.cpp's converter, which the config of a GGUF file states (gguf_config):
  // Qwen3-Next's in_proj_qkvz split into q, k, v and z, norms that already hold 1 + w, Qwen3.5's
  // value heads in tiled order.
  c.lin_qkvz_grouped = next && !json_bool_or(j, "chronos_qkvz_split", false);
  c.lin_ba_grouped = next;
  c.lin_v_tiled = json_bool_or(j, "chronos_v_heads_tiled", false);
  c.norm_plus_one = json_bool_or(j, "chronos_norm_plus_one", true);
  if (json_bool_or(j, "attention_bias", false)) throw_error("attention_bias: true is not supported");
  c.tie_word_embeddings = json_bool_or(j, "tie_word_embeddings", false);
  qwen_moe::read_layer_kinds(j, c);
  read_linear_attention(j, c);
  read_layer_schedule(j, c);
}

void add_linear_attention_tensors(const ModelConfig& c, int64_t il, std::vector<TensorSpec>& out) {
  const std::string p = fmt::format("model.layers.{}.", il);
  out.push_back({TensorRole::kAttnNorm, il, -1, p + "input_layernorm.weight", {c.n_embd}});
  out.push_back({TensorRole::kFfnNorm, il, -1, p + "post_attention_layernorm.weight", {c.n_embd}});
  const std::string a = p + "linear_attn.";
  if (c.lin_qkvz_grouped) {
    const int64_t qkvz = 2 * c.lin_key_width() + 2 * c.lin_value_width();
    out.push_back({TensorRole::kLinQkv, il, -1, a + "in_proj_qkvz.weight", {qkvz, c.n_embd}});
  } else {
    out.push_back({TensorRole::kLinQkv, il, -1, a + "in_proj_qkv.weight", {c.lin_conv_dim(), c.n_embd}});
    out.push_back({TensorRole::kLinZ, il, -1, a + "in_proj_z.weight", {c.lin_value_width(), c.n_embd}});
  }
  if (c.lin_ba_grouped) {
    out.push_back({TensorRole::kLinB, il, -1, a + "in_proj_ba.weight", {2 * c.lin_v_heads, c.n_embd}});
  } else {
    out.push_back({TensorRole::kLinB, il, -1, a + "in_proj_b.weight", {c.lin_v_heads, c.n_embd}});
    out.push_back({TensorRole::kLinA, il, -1, a + "in_proj_a.weight", {c.lin_v_heads, c.n_embd}});
  }
  out.push_back({TensorRole::kLinConv, il, -1, a + "conv1d.weight", {c.lin_conv_dim(), 1, c.lin_conv_kernel}});
  out.push_back({TensorRole::kLinALog, il, -1, a + "A_log", {c.lin_v_heads}});
  out.push_back({TensorRole::kLinDtBias, il, -1, a + "dt_bias", {c.lin_v_heads}});
  out.push_back({TensorRole::kLinNorm, il, -1, a + "norm.weight", {c.lin_v_dim}});
  out.push_back({TensorRole::kAttnO, il, -1, a + "out_proj.weight", {c.n_embd, c.lin_value_width()}});
}

std::vector<TensorSpec> tensor_table(const ModelConfig& c) {
  std::vector<TensorSpec> out;
  add_global_tensors(c, out);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    if (c.layers[size_t(il)].attention == AttentionKind::kGatedDeltaNet)
      add_linear_attention_tensors(c, il, out);
    else
      add_attention_tensors(c, il, out);
    qwen_moe::add_ffn_tensors(c, il, out);
  }
  return out;
}

// llama.cpp's qwen3next and qwen35moe files: the linear attention's sizes under ssm.* (state_size
// the key heads' width, group_count the key heads, time_step_rank the value heads, inner_size all
// value heads' width), which layers are recurrent (attention.recurrent_layers, else every
// full_attention_interval-th is full attention), and the converter's layouts: norms that hold
// 1 + w, A stored as -exp(A_log) (map_gguf_tensors takes the log back), Qwen3-Next's in_proj_qkvz
// split into attn_qkv and attn_gate, Qwen3.5's value heads tiled when they outnumber the key heads.
void gguf_config(const GgufFacts& f, nlohmann::json& j) {
  qwen_moe::gguf_config(f, j);
  j["norm_topk_prob"] = f.norm_topk.value_or(true);
  std::optional<int64_t> n_ff_shared = f.int_key("expert_shared_feed_forward_length");
  for (int64_t il = 0; il < f.n_layer && !n_ff_shared; ++il)
    n_ff_shared = f.tensor_rows(fmt::format("blk.{}.ffn_gate_shexp.weight", il));
  j["shared_expert_intermediate_size"] = n_ff_shared.value_or(0);
  const auto need = [&](const char* suffix) {
    const auto value = f.int_key(suffix);
    if (!value || *value <= 0)
      throw_error("{}: key {} is missing (the linear attention's sizes)", f.path, f.key(suffix));
    return *value;
  };
  const int64_t v_heads = need("ssm.time_step_rank"), k_heads = need("ssm.group_count");
  const int64_t inner = need("ssm.inner_size");
  if (inner % v_heads != 0)
    throw_error("{}: key {} ({}) is not a multiple of {} ({})", f.path, f.key("ssm.inner_size"), inner,
                f.key("ssm.time_step_rank"), v_heads);
  j["linear_conv_kernel_dim"] = need("ssm.conv_kernel");
  j["linear_key_head_dim"] = need("ssm.state_size");
  j["linear_num_key_heads"] = k_heads;
  j["linear_num_value_heads"] = v_heads;
  j["linear_value_head_dim"] = inner / v_heads;
  const std::vector<bool> recurrent = f.file.get_bool_array(f.key("attention.recurrent_layers"));
  if (!recurrent.empty()) {
    if (std::ssize(recurrent) < f.n_layer)
      throw_error("{}: key {} lists {} layers, the model has {}", f.path, f.key("attention.recurrent_layers"),
                  recurrent.size(), f.n_layer);
    nlohmann::json types = nlohmann::json::array();
    for (int64_t il = 0; il < f.n_layer; ++il)
      types.push_back(recurrent[size_t(il)] ? "linear_attention" : "full_attention");
    j["layer_types"] = types;
  } else if (const auto interval = f.int_key("full_attention_interval")) {
    j["full_attention_interval"] = *interval;
  }
  j["chronos_norm_plus_one"] = false;
  if (f.arch == "qwen3next") j["chronos_qkvz_split"] = true;
  if (f.arch == "qwen35moe") j["chronos_v_heads_tiled"] = true;
}

MadeTensor& made_from(std::vector<std::shared_ptr<const MadeTensor>>& out, const TensorInfo& from, std::string name) {
  auto made = std::make_shared<MadeTensor>();
  made->info = from;
  made->info.name = std::move(name);
  out.push_back(made);
  return *made;
}

// A layer's experts stored fused (mlp.experts.gate_up_proj [E, 2I, H], gate rows then up rows, and
// down_proj [E, H, I]), as transformers' own modules hold them: each expert's gate, up and down as
// slices of the stored bytes, no copy.
void split_fused_experts(TensorStore& store, const ModelConfig& c, const std::string& source, int64_t il,
                         std::vector<std::string>& replaced, std::vector<std::shared_ptr<const MadeTensor>>& made) {
  const std::string p = fmt::format("model.layers.{}.mlp.experts.", il);
  const TensorInfo* gate_up = store.find(p + "gate_up_proj");
  const TensorInfo* down = store.find(p + "down_proj");
  if (gate_up == nullptr && down == nullptr) return;
  const int64_t E = c.n_expert, H = c.n_embd, I = c.n_ff_expert;
  const auto check = [&](const TensorInfo* t, const char* name, std::vector<int64_t> shape) -> const TensorInfo& {
    if (t == nullptr) throw_error("{}: tensor {}{} is missing (fused experts come in pairs)", source, p, name);
    if (t->dtype != DType::kF32 && t->dtype != DType::kBF16 && t->dtype != DType::kF16)
      throw_error("{}: tensor {}: dtype {} is not supported (F32, F16 or BF16)", t->file, t->name,
                  dtype_name(t->dtype));
    if (t->shape != shape)
      throw_error("{}: tensor {}: shape [{}], expected [{}]", t->file, t->name, fmt::join(t->shape, ","),
                  fmt::join(shape, ","));
    return *t;
  };
  const TensorInfo& gu = check(gate_up, "gate_up_proj", {E, 2 * I, H});
  const TensorInfo& dn = check(down, "down_proj", {E, H, I});
  const auto slice = [&](const TensorInfo& from, std::string name, int64_t row, int64_t rows, int64_t cols) {
    MadeTensor& t = made_from(made, from, std::move(name));
    const int64_t offset = row * dtype_row_bytes(from.dtype, cols);
    t.info.shape = {rows, cols};
    t.info.n_bytes = rows * dtype_row_bytes(from.dtype, cols);
    t.info.data = reinterpret_cast<const std::byte*>(from.data) + offset;
    t.info.file_offset = from.file_offset + offset;
  };
  for (int64_t e = 0; e < E; ++e) {
    const std::string q = fmt::format("{}{}.", p, e);
    slice(gu, q + "gate_proj.weight", e * 2 * I, I, H);
    slice(gu, q + "up_proj.weight", e * 2 * I + I, I, H);
    slice(dn, q + "down_proj.weight", e * H, H, I);
  }
  replaced.push_back(gu.name);
  replaced.push_back(dn.name);
}

// Qwen3.5's text model under model.language_model. is listed under model. (a text-only
// checkpoint's own names), and fused experts per expert.
void present_qwen3_5(TensorStore& store, const ModelConfig& c, const std::string& source) {
  constexpr std::string_view kNested = "model.language_model.";
  std::vector<std::string> replaced;
  std::vector<std::shared_ptr<const MadeTensor>> made;
  for (const TensorInfo* t : store.all()) {
    if (!t->name.starts_with(kNested)) continue;
    replaced.push_back(t->name);
    made_from(made, *t, "model." + t->name.substr(kNested.size()));
  }
  store.present(replaced, std::move(made));
  replaced.clear();
  made.clear();
  for (int64_t il = 0; il < c.n_layer; ++il) split_fused_experts(store, c, source, il, replaced, made);
  store.present(replaced, std::move(made));
}

}  // namespace

const ArchSpec& arch_qwen3_next() {
  static const ArchSpec spec{Arch::kQwen3Next,
                             "qwen3_next",
                             "Qwen3-Next",
                             read_config,
                             tensor_table,
                             "qwen3next",
                             gguf_config,
                             qwen_moe::kGgufNames,
                             "moe_intermediate_size",
                             0.25};
  return spec;
}

const ArchSpec& arch_qwen3_5_moe() {
  static const ArchSpec spec{
      Arch::kQwen35Moe, "qwen3_5_moe",        "Qwen3.5-MoE",           read_config, tensor_table,   "qwen35moe",
      gguf_config,      qwen_moe::kGgufNames, "moe_intermediate_size", 0.25,        present_qwen3_5};
  return spec;
}

}  // namespace chronos
