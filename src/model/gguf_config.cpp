// The config.json equivalent of a GGUF file: llama.cpp's key-values mapped back to the Hugging Face
// keys that ModelConfig's one parser reads.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "chronos/error.h"
#include "chronos/gguf.h"
#include "chronos/model_config.h"
#include "model/arch/arch.h"

namespace chronos {
namespace {

using nlohmann::json;

// general.architecture -> the architecture whose GGUF files carry that name.
const ArchSpec& arch_of(const GgufFile& f, const std::string& name) {
  if (const ArchSpec* spec = find_gguf_arch(name)) return *spec;
  std::string supported;
  for (const ArchSpec* spec : all_archs())
    supported += fmt::format("{}{} ({})", supported.empty() ? "" : ", ", spec->gguf_arch, spec->name);
  throw_error("{}: key general.architecture: '{}' is not supported (supported: {})", f.path().string(), name,
              supported);
}

}  // namespace

std::string GgufFacts::key(std::string_view suffix) const { return fmt::format("{}.{}", arch, suffix); }
std::optional<int64_t> GgufFacts::int_key(std::string_view suffix) const { return file.get_int(key(suffix)); }
std::optional<double> GgufFacts::file_float(std::string_view suffix) const { return file.get_float(key(suffix)); }
std::optional<int64_t> GgufFacts::tensor_rows(const std::string& name) const {
  const GgufTensor* t = file.find(name);
  if (t == nullptr || t->shape.size() < 2) return std::nullopt;
  return t->shape[t->shape.size() - 2];
}
bool GgufFacts::has_tensor(const std::string& name) const { return file.find(name) != nullptr; }
int64_t GgufFacts::leading_dense_layers(int64_t n_layer) const {
  const auto is_dense = [&](int64_t il) {
    return std::find(dense_layers.begin(), dense_layers.end(), il) != dense_layers.end();
  };
  int64_t first_dense = 0;
  while (first_dense < n_layer && is_dense(first_dense)) ++first_dense;
  for (const int64_t il : dense_layers)
    if (il >= first_dense && il < n_layer)
      throw_error("{}: tensor blk.{}.ffn_gate_inp.weight is missing: only leading layers may be dense", path, il);
  if (const auto count = int_key("leading_dense_block_count"); count && *count != first_dense)
    throw_error("{}: key {} = {}, but the first {} layers have no router", path, key("leading_dense_block_count"),
                *count, first_dense);
  return first_dense;
}

int64_t GgufFacts::main_layers() const {
  const int64_t nextn = int_key("nextn_predict_layers").value_or(0);
  if (nextn < 0 || nextn >= n_layer)
    throw_error("{}: key {} = {} leaves no layers of {} blocks", path, key("nextn_predict_layers"), nextn, n_layer);
  return n_layer - nextn;
}

bool is_gguf_path(const std::filesystem::path& path) {
  std::string extension = path.extension().string();
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char ch) { return char(std::tolower(ch)); });
  std::error_code ec;
  return extension == ".gguf" && std::filesystem::is_regular_file(path, ec);
}

// The keys every architecture's file has the same way; then the architecture's own (arch/<name>.cpp).
std::string config_json_from_gguf(const GgufFile& f) {
  const auto arch_value = f.get_string("general.architecture");
  if (!arch_value) throw_error("{}: key general.architecture is missing", f.path().string());
  const ArchSpec& spec = arch_of(f, *arch_value);
  GgufFacts facts{f, f.path().string(), *arch_value};
  const std::string& file = facts.path;
  const auto key = [&](std::string_view suffix) { return facts.key(suffix); };
  const auto required = [&](std::string_view suffix) {
    const auto value = facts.int_key(suffix);
    if (!value) throw_error("{}: key {} is missing", file, key(suffix));
    return *value;
  };
  const auto optional_int = [&](std::string_view suffix) { return facts.int_key(suffix); };

  facts.n_expert = optional_int("expert_count").value_or(0);
  json j;
  j["model_type"] = spec.model_type;
  j["hidden_act"] = "silu";
  j["hidden_size"] = required("embedding_length");
  const int64_t n_layer = required("block_count");
  facts.n_layer = n_layer;
  j["num_hidden_layers"] = n_layer;
  const int64_t n_head = required("attention.head_count");
  j["num_attention_heads"] = n_head;
  j["num_key_value_heads"] = optional_int("attention.head_count_kv").value_or(n_head);
  const auto key_length = optional_int("attention.key_length");
  const auto value_length = optional_int("attention.value_length");
  // MLA files (deepseek2) give the latent cache's row sizes here; their arch reads the heads' sizes.
  const bool latent = optional_int("attention.kv_lora_rank").has_value();
  if (key_length && value_length && *key_length != *value_length && !latent)
    throw_error("{}: keys {} ({}) and {} ({}) differ; Chronos needs one head size", file, key("attention.key_length"),
                *key_length, key("attention.value_length"), *value_length);
  if (key_length && !latent) j["head_dim"] = *key_length;
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
    if (*scaling != "linear" && *scaling != "yarn")
      throw_error("{}: key {}: rope scaling '{}' is not supported (none, linear, yarn)", file, key("rope.scaling.type"),
                  *scaling);
    j["rope_scaling"] = {{"type", *scaling}, {"factor", f.get_float(key("rope.scaling.factor")).value_or(1.0)}};
    if (*scaling == "yarn") {
      if (const auto original = optional_int("rope.scaling.original_context_length"))
        j["rope_scaling"]["original_max_position_embeddings"] = *original;
      if (const auto fast = f.get_float(key("rope.scaling.yarn_beta_fast"))) j["rope_scaling"]["beta_fast"] = *fast;
      if (const auto slow = f.get_float(key("rope.scaling.yarn_beta_slow"))) j["rope_scaling"]["beta_slow"] = *slow;
    }
  }
  j["tie_word_embeddings"] = f.find("output.weight") == nullptr;
  if (const auto bos = f.get_int("tokenizer.ggml.bos_token_id")) j["bos_token_id"] = *bos;
  if (const auto eos = f.get_int("tokenizer.ggml.eos_token_id")) j["eos_token_id"] = *eos;

  // The routed expert FFN size: the key, else the rows of the stacked gate tensor of a MoE layer.
  facts.n_ff_expert = optional_int("expert_feed_forward_length");
  for (int64_t il = 0; il < n_layer; ++il) {
    if (f.find(fmt::format("blk.{}.ffn_gate_inp.weight", il)) == nullptr) {
      facts.dense_layers.push_back(il);
    } else if (!facts.n_ff_expert) {
      facts.n_ff_expert = facts.tensor_rows(fmt::format("blk.{}.ffn_gate_exps.weight", il));
    }
  }
  facts.n_ff = optional_int("feed_forward_length");
  // Whether the top-k routing weights are renormalized: the key when the file has it, else what
  // llama.cpp does for the architecture (its gguf_config's default).
  facts.norm_topk = f.get_bool(key("expert_weights_norm"));
  spec.gguf_config(facts, j);
  return j.dump(2) + "\n";
}

ModelConfig ModelConfig::from_gguf(const GgufFile& file) {
  return from_json_text(config_json_from_gguf(file),
                        fmt::format("{} (config built from its key-values)", file.path().string()));
}

}  // namespace chronos
