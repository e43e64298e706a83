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

enum class Arch { kMixtral, kQwen2Moe, kQwen3Moe, kOlmoe, kGlm4Moe, kMinimaxM2 };

enum class QkNorm {
  kNone,
  kPerHead,    // Qwen3-MoE: RMSNorm over head_dim of each head, weight [head_dim]
  kFullWidth,  // OLMoE: RMSNorm over the whole projection, weight [n_heads * head_dim]
};

enum class RopeType { kDefault, kLinear };

// What each layer is, chosen by the architecture's read_config. Adding a variant is one more
// enumerator, the function that computes it in src/model/, its op on each device, and the arch file
// that selects it.
// How a layer mixes positions.
enum class AttentionKind {
  kGqa,  // grouped-query attention with RoPE and its options (bias, q/k norm, clip_qkv, window)
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
};
struct LayerKind {
  AttentionKind attention = AttentionKind::kGqa;
  FfnKind ffn = FfnKind::kDense;
  RouterKind router = RouterKind::kSoftmaxTopK;  // MoE layers only
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
  float rope_factor = 1.0f;               // linear scaling factor
  int64_t n_rot = 0;                      // rotary dimensions (head_dim * partial_rotary_factor)
  std::optional<int64_t> sliding_window;  // active window (keys q - kv < window), if any
  bool attn_qkv_bias = false;
  QkNorm qk_norm = QkNorm::kNone;
  std::optional<float> clip_qkv;  // OLMoE
  bool tie_word_embeddings = false;

  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // config.json, then generation_config.json

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
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

// The text of the config.json a Hugging Face checkpoint of this GGUF file would have (architecture,
// sizes, rope, norms, experts, token ids), built from its key-values and tensor directory; what
// `chronos pack -m FILE.gguf` writes into the pack. Throws Error naming the file and the key.
std::string config_json_from_gguf(const GgufFile& file);

// True for a path to a regular file named *.gguf (a model given as one GGUF file).
bool is_gguf_path(const std::filesystem::path& path);

}  // namespace chronos
