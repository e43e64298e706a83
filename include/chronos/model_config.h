// ModelConfig: everything the engine needs from a checkpoint's config.json, read in one place.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chronos {

class GgufFile;

enum class Arch {
  kMixtral,
  kQwen2Moe,
  kQwen3Moe,
  kOlmoe,
  kGlm4Moe,
  kMinimaxM2,
  kDeepseekV2,
  kDeepseekV3,
  kGlm4MoeLite,
  kGptOss,
  kQwen3Next,
  kQwen35Moe,
};

enum class QkNorm {
  kNone,
  kPerHead,    // Qwen3-MoE: RMSNorm over head_dim of each head, weight [head_dim]
  kFullWidth,  // OLMoE: RMSNorm over the whole projection, weight [n_heads * head_dim]
};

enum class RopeType { kDefault, kLinear, kYarn };

// What each layer is, chosen by the architecture's read_config. Adding a variant is one more
// enumerator, the function that computes it in src/model/, its op on each device, and the arch file
// that selects it.
// How a layer mixes positions.
enum class AttentionKind {
  kGqa,  // grouped-query attention with RoPE and its options (bias, q/k norm, clip_qkv, window)
  // DeepSeek-V2/V3's multi-head latent attention: the cache holds one compressed latent
  // (kv_lora_rank) and one shared rotary key (qk_rope_dim) per position, and every head reads them
  // through kv_b_proj folded into its query and output ("absorbed").
  kMla,
  // Qwen3-Next's Gated DeltaNet: linear attention whose per-sequence state is a short convolution's
  // last inputs and one [k_dim, v_dim] matrix per value head, updated by the gated delta rule.
  kGatedDeltaNet,
};
// A layer's feed-forward block.
enum class FfnKind {
  kDense,  // one SwiGLU MLP (intermediate_size)
  kMoe,    // routed SwiGLU experts, plus the shared expert when the checkpoint has one
};
// How a MoE layer's router turns its logits into each token's experts and their weights.
enum class RouterKind {
  kSoftmaxTopK,  // softmax over every expert, the k most probable, renormalized when norm_topk_prob
  // DeepSeek-V3, GLM-4.5, MiniMax-M2: sigmoid scores; the k chosen on score + the layer's correction
  // bias within the topk_group best of n_group groups (a group's score: the sum of its best two),
  // weighted by the unbiased scores, renormalized when norm_topk_prob, times routed_scaling.
  kSigmoidBias,
  // DeepSeek-V2's group_limited_greedy: softmax scores; the k most probable within the topk_group
  // groups of n_group with the highest best score, times routed_scaling (renormalized first when
  // norm_topk_prob). Its plain `greedy` is kSoftmaxTopK with routed_scaling.
  kSoftmaxGroupMax,
};
// The widest MLA latent (kv_lora_rank) and rotary key (qk_rope_head_dim) (DeepSeek-V3: 512, 64).
inline constexpr int64_t kMaxLatentRank = 2048;

struct LayerKind {
  AttentionKind attention = AttentionKind::kGqa;
  FfnKind ffn = FfnKind::kDense;
  RouterKind router = RouterKind::kSoftmaxTopK;  // MoE layers only
  // A sliding-window layer's window (a query at q sees keys q - kv < window); 0: the model's
  // sliding_window, if any (ModelConfig::attention_window).
  int64_t window = 0;
  bool operator==(const LayerKind&) const = default;
};
const char* name_of(AttentionKind kind);
const char* name_of(FfnKind kind);
const char* name_of(RouterKind kind);

struct ModelConfig {
  Arch arch = Arch::kMixtral;
  std::string model_type;  // as in config.json: "mixtral", "qwen2_moe", ...

  int64_t n_embd = 0;       // hidden_size
  int64_t n_layer = 0;      // num_hidden_layers
  int64_t n_head = 0;       // num_attention_heads
  int64_t n_head_kv = 0;    // num_key_value_heads (defaults to n_head)
  int64_t head_dim = 0;     // head_dim, or n_embd / n_head
  int64_t n_vocab = 0;      // vocab_size: embedding rows, may exceed the tokenizer's
  int64_t n_ctx_train = 0;  // max_position_embeddings

  int64_t n_expert = 0;              // routed experts per MoE layer
  int64_t n_expert_used = 0;         // num_experts_per_tok
  int64_t n_ff_expert = 0;           // routed expert FFN size
  int64_t n_ff_shared = 0;           // shared expert FFN size, 0 when there is none
  int64_t n_ff_dense = 0;            // FFN size of dense (non-MoE) layers
  bool norm_topk_prob = false;       // renormalize the top-k routing weights
  bool shared_expert_gated = false;  // Qwen2-MoE: sigmoid(shared_expert_gate(x)) scales it
  float routed_scaling = 1.0f;       // routed_scaling_factor: the routing weights' final factor
  int64_t n_group = 1;               // n_group: expert groups of a group-limited router
  int64_t topk_group = 1;            // topk_group: groups a token's experts may come from
  std::vector<LayerKind> layers;     // [n_layer]

  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  RopeType rope_type = RopeType::kDefault;
  float rope_factor = 1.0f;       // linear or YaRN scaling factor
  bool rope_interleaved = false;  // rotate channel pairs (2i, 2i+1), not the two halves
  // YaRN (rope_type "yarn"): the context trained before the extension, the rotation counts where
  // interpolation starts and ends, and the factor cos and sin are multiplied by.
  int64_t yarn_original_ctx = 0;
  float yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f;
  bool yarn_truncate = true;  // the ramp's ends rounded to whole dimensions (rope "truncate", gpt-oss: false)
  float rope_attn_factor = 1.0f;
  float attn_scale = 0.0f;  // the softmax's scale of q·k; 0: 1/sqrt(head_dim)
  // Multi-head latent attention (AttentionKind::kMla). head_dim is then the q/k head width
  // qk_nope_dim + qk_rope_dim and n_rot is qk_rope_dim.
  int64_t q_lora_rank = 0;  // 0: q_proj, else q_a_proj -> q_a_layernorm -> q_b_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_dim = 0;
  int64_t qk_rope_dim = 0;
  int64_t v_head_dim = 0;
  int64_t n_rot = 0;                      // rotary dimensions (head_dim * partial_rotary_factor)
  std::optional<int64_t> sliding_window;  // active window (keys q - kv < window), if any
  bool attn_qkv_bias = false;
  QkNorm qk_norm = QkNorm::kNone;
  std::optional<float> clip_qkv;  // OLMoE
  // gpt-oss: attention sinks (a learned logit per head in every softmax's denominator), an o_proj
  // bias, a bias on the router's logits and on each expert's projections, and the clamped SwiGLU
  // (gate clamped above and up on both sides at swiglu_limit, gate * sigmoid(alpha * gate) * (up + 1)).
  bool attn_sinks = false;
  bool attn_o_bias = false;
  bool router_logit_bias = false;
  bool expert_bias = false;
  float swiglu_limit = 0.0f;  // 0: the plain SwiGLU
  float swiglu_alpha = 1.702f;
  // Qwen3-Next's full-attention layers: q_proj gives each head's query and, beside it, a gate
  // whose sigmoid scales the head's output before o_proj.
  bool attn_output_gate = false;
  // Gated DeltaNet layers (AttentionKind::kGatedDeltaNet): key heads (query heads too) and value
  // heads and their widths, and the depthwise convolution's kernel. How the in-projections are
  // stored: lin_qkvz_grouped, Qwen3-Next's in_proj_qkvz (rows grouped per key head: q, k, its
  // value heads, their z), else in_proj_qkv (q, k, v by head) and in_proj_z; lin_ba_grouped, its
  // in_proj_ba (per key head: its value heads' b, then their a), else in_proj_b and in_proj_a.
  // lin_v_tiled: value head p belongs to key head p % k_heads (Qwen3.5's GGUF files reorder them so)
  // instead of p / (v_heads / k_heads).
  int64_t lin_k_heads = 0, lin_v_heads = 0, lin_k_dim = 0, lin_v_dim = 0, lin_conv_kernel = 0;
  bool lin_qkvz_grouped = false, lin_ba_grouped = false, lin_v_tiled = false;
  // Qwen3-Next's checkpoints store each RMSNorm weight (but the gated one's) as w for a scale of
  // 1 + w: the loader adds the 1.
  bool norm_plus_one = false;
  // A vision-language checkpoint (Qwen3.5/3.6: config.json nests text_config beside vision_config):
  // the text model runs, the vision encoder is not loaded.
  bool vision_encoder_ignored = false;
  bool tie_word_embeddings = false;
  // FP8 block-scaled weights (quantization_config quant_method "fp8", as DeepSeek-V3/R1, Kimi-K2,
  // GLM-4.5 and MiniMax-M2 ship them): an F8_E4M3 matrix X.weight scaled by X.weight_scale_inv, one
  // scale per fp8_block_rows x fp8_block_cols block. 0: the checkpoint has none.
  int64_t fp8_block_rows = 0, fp8_block_cols = 0;

  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // config.json, then generation_config.json

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
  bool mla() const { return kv_lora_rank > 0; }
  // Floats one position stores per layer: keys and values of grouped-query attention, or the latent
  // and rotary key of MLA (no separate values).
  int64_t kv_key_width() const { return mla() ? kv_lora_rank + qk_rope_dim : kv_dim(); }
  int64_t kv_value_width() const { return mla() ? 0 : kv_dim(); }
  // Width of the heads' attention output, o_proj's input.
  int64_t attn_out_dim() const { return mla() ? n_head * v_head_dim : q_dim(); }
  // Gated DeltaNet: the convolution's channels (queries, keys, values), the values' width, and the
  // floats of one sequence's state per layer (the convolution's last kernel - 1 inputs, then one
  // [lin_k_dim, lin_v_dim] matrix per value head).
  int64_t lin_key_width() const { return lin_k_heads * lin_k_dim; }
  int64_t lin_value_width() const { return lin_v_heads * lin_v_dim; }
  int64_t lin_conv_dim() const { return 2 * lin_key_width() + lin_value_width(); }
  int64_t lin_state_floats() const {
    return (lin_conv_kernel - 1) * lin_conv_dim() + lin_v_heads * lin_k_dim * lin_v_dim;
  }
  bool has_recurrent_layers() const;
  float softmax_scale() const;
  // The window of a layer's attention (its own, else sliding_window), 0 for full attention.
  int64_t attention_window(int64_t layer) const {
    const int64_t own = layers[size_t(layer)].window;
    return own > 0 ? own : sliding_window.value_or(0);
  }
  int64_t n_moe_layers() const;
  bool is_moe_layer(int64_t layer) const { return layers[size_t(layer)].ffn == FfnKind::kMoe; }
  const char* arch_name() const;

  // Reads <dir>/config.json (and generation_config.json for the EOS list). Throws
  // chronos::Error naming the file and the key for anything missing, malformed or unsupported.
  // A .gguf file instead of a folder: from_gguf of that file.
  static ModelConfig load(const std::filesystem::path& dir);
  // The text of a config.json; errors are prefixed with `source`.
  static ModelConfig from_json_text(std::string_view text, const std::string& source);
  // The config.json equivalent of a GGUF file's key-values (config_json_from_gguf), parsed.
  static ModelConfig from_gguf(const GgufFile& file);
};

// YaRN's attention scale for a context extended `factor` times: 0.1 * mscale * ln(factor) + 1
// (1 when factor <= 1).
float yarn_mscale(float factor, float mscale);

// The text of the config.json a Hugging Face checkpoint of this GGUF file would have (architecture,
// sizes, rope, norms, experts, token ids), built from its key-values and tensor directory; what
// `chronos pack -m FILE.gguf` writes into the pack. Throws Error naming the file and the key.
std::string config_json_from_gguf(const GgufFile& file);

// True for a path to a regular file named *.gguf (a model given as one GGUF file).
bool is_gguf_path(const std::filesystem::path& path);

}  // namespace chronos
