// The config.json equivalent of a GGUF file: llama.cpp's key-values mapped back to the Hugging Face
// keys that ModelConfig's one parser reads.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "chronos/error.h"
#include "chronos/gguf.h"
#include "chronos/model_config.h"

namespace chronos {
namespace {

using nlohmann::json;

// GGUF's general.architecture -> config.json's model_type (llama with experts is Mixtral).
std::string model_type_of(const GgufFile& f, const std::string& arch, int64_t n_expert) {
  if (arch == "llama") {
    if (n_expert <= 0)
      throw_error("{}: key general.architecture: a dense llama model (no llama.expert_count); only MoE models run",
                  f.path().string());
    return "mixtral";
  }
  if (arch == "qwen2moe") return "qwen2_moe";
  if (arch == "qwen3moe") return "qwen3_moe";
  if (arch == "olmoe") return "olmoe";
  throw_error(
      "{}: key general.architecture: '{}' is not supported (supported: llama with experts (Mixtral), "
      "qwen2moe, qwen3moe, olmoe)",
      f.path().string(), arch);
}

}  // namespace

bool is_gguf_path(const std::filesystem::path& path) {
  std::string extension = path.extension().string();
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char ch) { return char(std::tolower(ch)); });
  std::error_code ec;
  return extension == ".gguf" && std::filesystem::is_regular_file(path, ec);
}

std::string config_json_from_gguf(const GgufFile& f) {
  const std::string file = f.path().string();
  const auto arch_value = f.get_string("general.architecture");
  if (!arch_value) throw_error("{}: key general.architecture is missing", file);
  const std::string& arch = *arch_value;
  const auto key = [&](std::string_view suffix) { return fmt::format("{}.{}", arch, suffix); };
  const auto required = [&](std::string_view suffix) {
    const auto value = f.get_int(key(suffix));
    if (!value) throw_error("{}: key {} is missing", file, key(suffix));
    return *value;
  };
  const auto optional_int = [&](std::string_view suffix) { return f.get_int(key(suffix)); };
  const auto tensor_rows = [&](const std::string& name) -> std::optional<int64_t> {
    const GgufTensor* t = f.find(name);
    if (t == nullptr || t->shape.size() < 2) return std::nullopt;
    return t->shape[t->shape.size() - 2];
  };

  const int64_t n_expert = optional_int("expert_count").value_or(0);
  json j;
  j["model_type"] = model_type_of(f, arch, n_expert);
  j["hidden_act"] = "silu";
  j["hidden_size"] = required("embedding_length");
  const int64_t n_layer = required("block_count");
  j["num_hidden_layers"] = n_layer;
  const int64_t n_head = required("attention.head_count");
  j["num_attention_heads"] = n_head;
  j["num_key_value_heads"] = optional_int("attention.head_count_kv").value_or(n_head);
  const auto key_length = optional_int("attention.key_length");
  const auto value_length = optional_int("attention.value_length");
  if (key_length && value_length && *key_length != *value_length)
    throw_error("{}: keys {} ({}) and {} ({}) differ; Chronos needs one head size", file, key("attention.key_length"),
                *key_length, key("attention.value_length"), *value_length);
  if (key_length) j["head_dim"] = *key_length;
  const GgufTensor* embeddings = f.find("token_embd.weight");
  if (embeddings == nullptr || embeddings->shape.size() != 2)
    throw_error("{}: tensor token_embd.weight is missing or not a matrix", file);
  j["vocab_size"] = embeddings->shape[0];
  j["max_position_embeddings"] = optional_int("context_length").value_or(4096);
  j["num_experts_per_tok"] = optional_int("expert_used_count").value_or(0);
  if (const auto eps = f.get_float(key("attention.layer_norm_rms_epsilon"))) j["rms_norm_eps"] = *eps;
  j["rope_theta"] = f.get_float(key("rope.freq_base")).value_or(10000.0);  // llama.cpp's default
  if (const auto n_rot = optional_int("rope.dimension_count")) {
    const int64_t head_dim = key_length.value_or(n_head > 0 ? j["hidden_size"].get<int64_t>() / n_head : 0);
    if (*n_rot != head_dim && head_dim > 0) j["partial_rotary_factor"] = double(*n_rot) / double(head_dim);
  }
  if (const auto scaling = f.get_string(key("rope.scaling.type")); scaling && *scaling != "none") {
    if (*scaling != "linear")
      throw_error("{}: key {}: rope scaling '{}' is not supported (none, linear)", file, key("rope.scaling.type"),
                  *scaling);
    j["rope_scaling"] = {{"type", "linear"}, {"factor", f.get_float(key("rope.scaling.factor")).value_or(1.0)}};
  }
  j["tie_word_embeddings"] = f.find("output.weight") == nullptr;
  if (const auto bos = f.get_int("tokenizer.ggml.bos_token_id")) j["bos_token_id"] = *bos;
  if (const auto eos = f.get_int("tokenizer.ggml.eos_token_id")) j["eos_token_id"] = *eos;

  // The routed expert FFN size: the key, else the rows of the stacked gate tensor of a MoE layer.
  std::optional<int64_t> n_ff_expert = optional_int("expert_feed_forward_length");
  std::vector<int64_t> dense_layers;  // layers without a router: Qwen's mlp_only_layers
  for (int64_t il = 0; il < n_layer; ++il) {
    if (f.find(fmt::format("blk.{}.ffn_gate_inp.weight", il)) == nullptr) {
      dense_layers.push_back(il);
    } else if (!n_ff_expert) {
      n_ff_expert = tensor_rows(fmt::format("blk.{}.ffn_gate_exps.weight", il));
    }
  }
  const auto n_ff = optional_int("feed_forward_length");
  // Whether the top-k routing weights are renormalized: the key when the file has it, else what
  // llama.cpp does for the architecture (Mixtral and Qwen3-MoE renormalize, Qwen2-MoE and OLMoE not).
  const auto norm_key = f.get_bool(key("expert_weights_norm"));

  const std::string model_type = j["model_type"];
  if (model_type == "mixtral") {
    j["num_local_experts"] = n_expert;
    j["intermediate_size"] = n_ff_expert ? *n_ff_expert : n_ff.value_or(0);
    if (!dense_layers.empty())
      throw_error("{}: tensor blk.{}.ffn_gate_inp.weight is missing (every Mixtral layer has a router)", file,
                  dense_layers.front());
  } else {
    j["num_experts"] = n_expert;
    j["moe_intermediate_size"] = n_ff_expert.value_or(0);
    if (n_ff) j["intermediate_size"] = *n_ff;
    if (model_type == "olmoe") {
      j["intermediate_size"] = n_ff_expert ? *n_ff_expert : n_ff.value_or(0);
      if (const auto clip = f.get_float(key("attention.clamp_kqv"))) j["clip_qkv"] = *clip;
      if (!dense_layers.empty())
        throw_error("{}: tensor blk.{}.ffn_gate_inp.weight is missing (every OLMoE layer has a router)", file,
                    dense_layers.front());
    } else {
      j["mlp_only_layers"] = dense_layers;
      j["decoder_sparse_step"] = 1;
    }
    if (model_type == "qwen2_moe") {
      std::optional<int64_t> n_ff_shared = optional_int("expert_shared_feed_forward_length");
      for (int64_t il = 0; il < n_layer && !n_ff_shared; ++il)
        n_ff_shared = tensor_rows(fmt::format("blk.{}.ffn_gate_shexp.weight", il));
      j["shared_expert_intermediate_size"] = n_ff_shared.value_or(0);
      j["qkv_bias"] = f.find("blk.0.attn_q.bias") != nullptr;
    }
  }
  j["norm_topk_prob"] = norm_key.value_or(model_type == "mixtral" || model_type == "qwen3_moe");
  return j.dump(2) + "\n";
}

ModelConfig ModelConfig::from_gguf(const GgufFile& file) {
  return from_json_text(config_json_from_gguf(file),
                        fmt::format("{} (config built from its key-values)", file.path().string()));
}

}  // namespace chronos
