// ModelConfig::load: the only code that reads config.json; common keys here, quirks per arch.
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "chronos/error.h"
#include "chronos/gguf.h"
#include "chronos/model_config.h"
#include "model/arch/arch.h"

namespace chronos {
namespace {

using nlohmann::json;

json read_json_file(const std::filesystem::path& path) {
  if (std::error_code ec; std::filesystem::is_directory(path, ec))
    throw_error("{}: is a folder, not a JSON file", path.string());
  std::ifstream in(path);
  if (!in) throw_error("{}: cannot open: no such file or not readable", path.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw_error("{}: not valid JSON: {}", path.string(), e.what());
  }
}

// Upper bounds on the sizes config.json states, far above any released model, checked before
// anything is allocated from them: a crafted file must fail with its key named, not allocate
// gigabytes or overflow. The real shapes are then checked against the checkpoint's tensors.
constexpr int64_t kMaxWidth = int64_t(1) << 20;      // hidden_size, FFN sizes, head_dim
constexpr int64_t kMaxLayers = 4096;                 // num_hidden_layers
constexpr int64_t kMaxHeads = 4096;                  // attention heads
constexpr int64_t kMaxExperts = 65536;               // routed experts per layer
constexpr int64_t kMaxVocab = int64_t(1) << 24;      // vocab_size
constexpr int64_t kMaxPositions = int64_t(1) << 26;  // max_position_embeddings

int32_t read_token_id(const json& value, const char* key) {
  if (!value.is_number_integer()) throw_error("key '{}': expected integer token ids", key);
  if (value.is_number_unsigned() ? value.get<uint64_t>() > uint64_t(kMaxVocab)
                                 : value.get<int64_t>() < 0 || value.get<int64_t>() > kMaxVocab)
    throw_error("key '{}': token id {} is out of range [0, {}]", key, value.dump(), kMaxVocab);
  return int32_t(value.get<int64_t>());
}

std::vector<int32_t> read_token_ids(const json& value, const char* key) {
  std::vector<int32_t> ids;
  if (value.is_null()) return ids;
  if (value.is_number()) {
    ids.push_back(read_token_id(value, key));
  } else if (value.is_array()) {
    if (value.size() > 1024) throw_error("key '{}': {} token ids (at most 1024)", key, value.size());
    for (const auto& id : value) ids.push_back(read_token_id(id, key));
  } else {
    throw_error("key '{}': expected an integer or a list of integers", key);
  }
  return ids;
}

// rope_scaling (transformers v4) or rope_parameters (v5).
// quantization_config: FP8 with per-block weight scales is read (the weights are dequantized at load
// or converted by pack); any other method is refused by name.
void read_quantization(const json& j, ModelConfig& cfg) {
  if (!j.contains("quantization_config")) return;
  const json& q = j["quantization_config"];
  if (!q.is_object()) throw_error("key 'quantization_config' is not an object");
  const std::string method = q.contains("quant_method") && q["quant_method"].is_string() ? q["quant_method"] : "";
  // MXFP4 (gpt-oss): the tensor store presents each *_blocks / *_scales pair as one MXFP4 tensor.
  if (method == "mxfp4") return;
  if (method != "fp8")
    throw_error(
        "quantization_config.quant_method '{}' is not supported (fp8 with weight_block_size and mxfp4 are; for "
        "other types convert the checkpoint to GGUF or pack it from bf16)",
        method);
  if (q.contains("fmt") && q["fmt"] != "e4m3")
    throw_error("quantization_config.fmt {} is not supported (e4m3)", q["fmt"].dump());
  const json block = q.contains("weight_block_size") ? q["weight_block_size"] : json();
  if (!block.is_array() || block.size() != 2 || !block[0].is_number_integer() || !block[1].is_number_integer() ||
      block[0].get<int64_t>() <= 0 || block[1].get<int64_t>() <= 0)
    throw_error(
        "quantization_config.weight_block_size {} is not two positive sizes (per-tensor FP8 scales are not "
        "supported)",
        block.dump());
  cfg.fp8_block_rows = block[0].get<int64_t>();
  cfg.fp8_block_cols = block[1].get<int64_t>();
}

void read_rope(const json& j, ModelConfig& cfg) {
  const json* params = nullptr;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) params = &j["rope_parameters"];
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) params = &j["rope_scaling"];
  cfg.rope_theta = float(json_number_or(j, "rope_theta", cfg.rope_theta));
  if (params == nullptr) return;
  if (params->contains("rope_theta")) cfg.rope_theta = float(json_number_or(*params, "rope_theta", cfg.rope_theta));
  std::string type = "default";
  if (params->contains("rope_type"))
    type = (*params)["rope_type"].get<std::string>();
  else if (params->contains("type"))
    type = (*params)["type"].get<std::string>();
  if (type == "default") {
    cfg.rope_type = RopeType::kDefault;
  } else if (type == "linear") {
    cfg.rope_type = RopeType::kLinear;
    cfg.rope_factor = float(json_number_or(*params, "factor", 1.0));
    if (!(cfg.rope_factor > 0.0f)) throw_error("rope_scaling: factor must be positive");
  } else if (type == "yarn") {
    // transformers' _compute_yarn_parameters: the factor, the trained context, the ramp's rotation
    // counts, and cos/sin's factor from attention_factor or mscale / mscale_all_dim.
    cfg.rope_type = RopeType::kYarn;
    cfg.rope_factor = float(json_number_or(*params, "factor", 1.0));
    if (!(cfg.rope_factor >= 1.0f)) throw_error("rope_scaling: yarn factor must be at least 1");
    cfg.yarn_original_ctx = json_int_or(*params, "original_max_position_embeddings", cfg.n_ctx_train);
    if (cfg.yarn_original_ctx <= 0 || cfg.yarn_original_ctx > cfg.n_ctx_train)
      throw_error(
          "rope_scaling: original_max_position_embeddings must be in [1, max_position_embeddings = {}] (got {})",
          cfg.n_ctx_train, cfg.yarn_original_ctx);
    cfg.yarn_beta_fast = float(json_number_or(*params, "beta_fast", 32.0));
    cfg.yarn_beta_slow = float(json_number_or(*params, "beta_slow", 1.0));
    cfg.yarn_truncate = json_bool_or(*params, "truncate", true);
    if (!(cfg.yarn_beta_fast > 0.0f) || !(cfg.yarn_beta_slow > 0.0f))
      throw_error("rope_scaling: beta_fast and beta_slow must be positive");
    const double mscale = json_number_or(*params, "mscale", 0.0);
    const double mscale_all_dim = json_number_or(*params, "mscale_all_dim", 0.0);
    if (params->contains("attention_factor") && !(*params)["attention_factor"].is_null())
      cfg.rope_attn_factor = float(json_number_or(*params, "attention_factor", 1.0));
    else if (mscale != 0.0 && mscale_all_dim != 0.0)
      cfg.rope_attn_factor =
          yarn_mscale(cfg.rope_factor, float(mscale)) / yarn_mscale(cfg.rope_factor, float(mscale_all_dim));
    else
      cfg.rope_attn_factor = yarn_mscale(cfg.rope_factor, 1.0f);
    if (!(cfg.rope_attn_factor > 0.0f) || !std::isfinite(cfg.rope_attn_factor))
      throw_error("rope_scaling: the attention factor must be positive (got {})", cfg.rope_attn_factor);
  } else {
    throw_error("rope_scaling type '{}' is not supported (supported: default, linear, yarn)", type);
  }
}

// The counts read before the architecture's own keys, bounded before read_config sizes
// anything from them.
void validate_sizes(const ModelConfig& c) {
  auto in_range = [](int64_t v, int64_t hi, const char* key) {
    if (v <= 0 || v > hi) throw_error("key '{}' must be in [1, {}] (got {})", key, hi, v);
  };
  in_range(c.n_embd, kMaxWidth, "hidden_size");
  in_range(c.n_layer, kMaxLayers, "num_hidden_layers");
  in_range(c.n_head, kMaxHeads, "num_attention_heads");
  in_range(c.n_head_kv, kMaxHeads, "num_key_value_heads");
  in_range(c.head_dim, kMaxWidth, "head_dim");
  in_range(c.n_vocab, kMaxVocab, "vocab_size");
  in_range(c.n_ctx_train, kMaxPositions, "max_position_embeddings");
  if (c.n_expert_used < 0 || c.n_expert_used > kMaxExperts)
    throw_error("key 'num_experts_per_tok' must be in [0, {}] (got {})", kMaxExperts, c.n_expert_used);
}

void validate(const ModelConfig& c) {
  auto positive = [](int64_t v, const char* key) {
    if (v <= 0) throw_error("key '{}' must be positive (got {})", key, v);
  };
  positive(c.n_embd, "hidden_size");
  positive(c.n_layer, "num_hidden_layers");
  positive(c.n_head, "num_attention_heads");
  positive(c.n_head_kv, "num_key_value_heads");
  positive(c.head_dim, "head_dim");
  positive(c.n_vocab, "vocab_size");
  positive(c.n_ctx_train, "max_position_embeddings");
  if (c.n_head % c.n_head_kv != 0)
    throw_error("num_attention_heads ({}) is not a multiple of num_key_value_heads ({})", c.n_head, c.n_head_kv);
  if (c.head_dim % 2 != 0) throw_error("head_dim ({}) must be even for rotary embeddings", c.head_dim);
  if (c.n_expert > kMaxExperts) throw_error("key 'num_experts' must be at most {} (got {})", kMaxExperts, c.n_expert);
  for (const auto& [value, key] : {std::pair{c.n_ff_expert, "moe_intermediate_size"},
                                   {c.n_ff_shared, "shared_expert_intermediate_size"},
                                   {c.n_ff_dense, "intermediate_size"}})
    if (value < 0 || value > kMaxWidth) throw_error("key '{}' must be in [0, {}] (got {})", key, kMaxWidth, value);
  if (c.n_moe_layers() > 0) {
    positive(c.n_expert, "num_experts");
    positive(c.n_ff_expert, "expert intermediate size");
    if (c.n_expert_used <= 0 || c.n_expert_used > c.n_expert)
      throw_error("num_experts_per_tok ({}) must be in [1, {}]", c.n_expert_used, c.n_expert);
  }
  if (std::ssize(c.layers) != c.n_layer) throw_error("internal: the layer kinds are not filled");
  for (int64_t i = 0; i < c.n_layer; ++i)
    if (!c.is_moe_layer(i) && c.n_ff_dense <= 0) throw_error("layer {} is dense but intermediate_size is missing", i);
  if (c.n_rot <= 0 || c.n_rot > c.head_dim || c.n_rot % 2 != 0)
    throw_error("rotary dimensions {} invalid for head_dim {}", c.n_rot, c.head_dim);
  if (!(c.rms_norm_eps > 0.0f)) throw_error("rms_norm_eps must be positive");
  if (!(c.rope_theta > 0.0f) || !std::isfinite(c.rope_theta))
    throw_error("rope_theta must be a positive finite number (got {})", c.rope_theta);
  if (!std::isfinite(c.rms_norm_eps)) throw_error("rms_norm_eps must be finite");
}

}  // namespace

int64_t json_int(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) throw_error("missing key '{}'", key);
  if (!j[key].is_number_integer()) throw_error("key '{}': expected an integer", key);
  if (j[key].is_number_unsigned() && j[key].get<uint64_t>() > uint64_t(INT64_MAX))
    throw_error("key '{}': {} is out of range", key, j[key].dump());
  return j[key].get<int64_t>();
}

int64_t json_int_or(const json& j, const char* key, int64_t fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  return json_int(j, key);
}

double json_number_or(const json& j, const char* key, double fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number()) throw_error("key '{}': expected a number", key);
  // Every such number ends up in a float (or scales one): beyond float's range it is an error,
  // not an infinity or an undefined conversion.
  const double value = j[key].get<double>();
  if (!(std::fabs(value) <= double(std::numeric_limits<float>::max())))
    throw_error("key '{}': {} is out of range", key, j[key].dump());
  return value;
}

bool json_bool_or(const json& j, const char* key, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) throw_error("key '{}': expected true or false", key);
  return j[key].get<bool>();
}

bool ModelConfig::has_recurrent_layers() const {
  return std::any_of(layers.begin(), layers.end(),
                     [](const LayerKind& layer) { return layer.attention == AttentionKind::kGatedDeltaNet; });
}

int64_t ModelConfig::n_moe_layers() const {
  int64_t n = 0;
  for (const LayerKind& layer : layers) n += layer.ffn == FfnKind::kMoe ? 1 : 0;
  return n;
}

float ModelConfig::softmax_scale() const { return attn_scale > 0.0f ? attn_scale : 1.0f / std::sqrt(float(head_dim)); }

float yarn_mscale(float factor, float mscale) {
  return factor <= 1.0f ? 1.0f : 0.1f * mscale * std::log(factor) + 1.0f;
}

const char* ModelConfig::arch_name() const { return arch_spec(arch).name; }

const char* name_of(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kGqa: return "grouped-query attention";
    case AttentionKind::kMla: return "multi-head latent attention";
    case AttentionKind::kGatedDeltaNet: return "Gated DeltaNet";
  }
  return "?";
}

const char* name_of(FfnKind kind) {
  switch (kind) {
    case FfnKind::kDense: return "dense MLP";
    case FfnKind::kMoe: return "mixture of experts";
  }
  return "?";
}

const char* name_of(RouterKind kind) {
  switch (kind) {
    case RouterKind::kSoftmaxTopK: return "softmax top-k";
    case RouterKind::kSigmoidBias: return "sigmoid + bias top-k";
    case RouterKind::kSoftmaxGroupMax: return "softmax group-limited top-k";
  }
  return "?";
}

namespace {

// Everything config.json states; throws Error (without the file name) for anything wrong.
ModelConfig parse_config(const json& j) {
  ModelConfig cfg;
  // A vision-language checkpoint nests its text model's config (Qwen3.5/3.6 MoE): that is the
  // model, under the checkpoint's model_type, with the top level's token ids where it has none.
  if (j.is_object() && j.contains("text_config") && j["text_config"].is_object()) {
    json text = j["text_config"];
    if (j.contains("model_type")) text["model_type"] = j["model_type"];
    for (const char* key : {"tie_word_embeddings", "bos_token_id", "eos_token_id"})
      if ((!text.contains(key) || text[key].is_null()) && j.contains(key)) text[key] = j[key];
    try {
      cfg = parse_config(text);
    } catch (const Error& e) {
      throw Error(fmt::format("text_config: {}", e.what()));
    }
    cfg.vision_encoder_ignored = j.contains("vision_config");
    return cfg;
  }
  {
    if (!j.is_object()) throw_error("expected a JSON object");
    if (!j.contains("model_type") || !j["model_type"].is_string()) throw_error("missing key 'model_type'");
    cfg.model_type = j["model_type"].get<std::string>();
    if (cfg.model_type == "qwen3_5_moe_text") cfg.model_type = "qwen3_5_moe";  // a text-only checkpoint
    const ArchSpec* arch = find_arch(cfg.model_type);
    if (arch == nullptr) {
      std::vector<std::string> known;
      for (const ArchSpec* a : all_archs()) known.emplace_back(a->model_type);
      throw_error("architecture '{}' is not supported (supported: {})", cfg.model_type, fmt::join(known, ", "));
    }
    cfg.arch = arch->arch;
    cfg.n_embd = json_int(j, "hidden_size");
    cfg.n_layer = json_int(j, "num_hidden_layers");
    cfg.n_head = json_int(j, "num_attention_heads");
    cfg.n_head_kv = json_int_or(j, "num_key_value_heads", cfg.n_head);
    cfg.n_vocab = json_int(j, "vocab_size");
    cfg.n_ctx_train = json_int_or(j, "max_position_embeddings", 4096);
    cfg.head_dim = json_int_or(j, "head_dim", cfg.n_head > 0 ? cfg.n_embd / cfg.n_head : 0);
    cfg.n_expert_used = json_int_or(j, "num_experts_per_tok", 0);
    if (j.contains("hidden_act") && j["hidden_act"] != "silu")
      throw_error("hidden_act '{}' is not supported (only silu)", j["hidden_act"].dump());
    validate_sizes(cfg);
    // transformers 5 writes partial_rotary_factor inside rope_parameters, 4 at the top level.
    double partial = json_number_or(j, "partial_rotary_factor", arch->partial_rotary_default);
    if (j.contains("rope_parameters") && j["rope_parameters"].is_object())
      partial = json_number_or(j["rope_parameters"], "partial_rotary_factor", partial);
    if (!(partial > 0.0 && partial <= 1.0))
      throw_error("key 'partial_rotary_factor' must be in (0, 1] (got {})", partial);
    cfg.n_rot = int64_t(double(cfg.head_dim) * partial);
    if (json_number_or(j, "router_jitter_noise", 0.0) != 0.0)
      spdlog::debug("config.json: router_jitter_noise is a training option; ignored");
    read_quantization(j, cfg);
    read_rope(j, cfg);
    arch->read_config(j, cfg);  // expert counts, FFN sizes, norms, biases, windows, eps
    if (j.contains("bos_token_id")) {
      auto ids = read_token_ids(j["bos_token_id"], "bos_token_id");
      if (!ids.empty()) cfg.bos_token_id = ids.front();
    }
    if (j.contains("eos_token_id")) cfg.eos_token_ids = read_token_ids(j["eos_token_id"], "eos_token_id");
    validate(cfg);
  }
  return cfg;
}

}  // namespace

ModelConfig ModelConfig::from_json_text(std::string_view text, const std::string& source) {
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    throw_error("{}: not valid JSON: {}", source, e.what());
  }
  try {
    return parse_config(j);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", source, e.what()));
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: {}", source, e.what()));
  }
}

ModelConfig ModelConfig::load(const std::filesystem::path& dir) {
  if (is_gguf_path(dir)) return from_gguf(*GgufFile::open(dir));
  if (!std::filesystem::is_directory(dir))
    throw_error("{}: model folder does not exist or is not a folder", dir.string());
  const auto path = dir / "config.json";
  const json j = read_json_file(path);
  ModelConfig cfg;
  try {
    cfg = parse_config(j);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", path.string(), e.what()));
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: {}", path.string(), e.what()));
  }
  // generation_config.json's eos list wins when present (HF does the same).
  const auto gen_path = dir / "generation_config.json";
  if (std::filesystem::exists(gen_path)) {
    const json g = read_json_file(gen_path);
    try {
      if (g.contains("eos_token_id")) {
        auto ids = read_token_ids(g["eos_token_id"], "eos_token_id");
        if (!ids.empty()) cfg.eos_token_ids = ids;
      }
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", gen_path.string(), e.what()));
    }
  }
  return cfg;
}

}  // namespace chronos
