// chronos inspect: architecture, layer and expert counts, parameters and bytes (dense vs routed).
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "chronos/budget.h"
#include "chronos/error.h"
#include "chronos/expert_streamer.h"
#include "chronos/gguf.h"
#include "chronos/model.h"
#include "chronos/pack_format.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include "cli/commands.h"

namespace chronos::cli {
namespace {

// ", window W on N of M layers" (or on every layer), or nothing for full attention everywhere.
std::string windows_text(const ModelConfig& c) {
  int64_t windowed = 0, window = 0;
  for (int64_t il = 0; il < c.n_layer; ++il)
    if (const int64_t w = c.attention_window(il); w > 0) {
      ++windowed;
      window = std::max(window, w);
    }
  if (windowed == 0) return "";
  if (windowed == c.n_layer) return fmt::format(", window {}", window);
  return fmt::format(", window {} on {} of {} layers", window, windowed, c.n_layer);
}

struct InspectArgs {
  std::string model;
  std::string positional;
  bool json = false;
};

std::string human_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = double(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.2f} {}", value, units[unit]);
}

std::string human_count(int64_t n) {
  if (n >= 1'000'000'000) return fmt::format("{:.2f} B", double(n) / 1e9);
  if (n >= 1'000'000) return fmt::format("{:.2f} M", double(n) / 1e6);
  return fmt::format("{:.1f} K", double(n) / 1e3);
}

struct PackSummaryView {
  int64_t clusters = 0, experts = 0, min_bytes = 0, max_bytes = 0, median_bytes = 0, traced_tokens = 0;
  std::string method;
  bool have_stats = false;
  double modularity = 0, intra_share = 0;
};

PackSummaryView summarize_pack(const std::filesystem::path& dir, const ModelConfig& config) {
  const PackManifest m = PackManifest::load(dir);
  check_pack_against_config(m, config, dir);
  PackSummaryView v;
  v.clusters = std::ssize(m.clusters);
  v.experts = std::ssize(m.experts);
  v.method = m.clustering_method;
  std::vector<int64_t> sizes;
  for (const auto& c : m.clusters) sizes.push_back(c.bytes);
  std::sort(sizes.begin(), sizes.end());
  if (!sizes.empty()) {
    v.min_bytes = sizes.front();
    v.max_bytes = sizes.back();
    v.median_bytes = sizes[sizes.size() / 2];
  }
  std::ifstream in(dir / "pack_stats.json");
  if (in) {
    try {
      const auto j = nlohmann::json::parse(in);
      v.modularity = j.value("modularity", 0.0);
      v.intra_share = j.value("intra_cluster_weight_share", 0.0);
      v.traced_tokens = j.value("traced_tokens", int64_t{0});
      v.have_stats = true;
    } catch (const nlohmann::json::exception&) {
      v.have_stats = false;  // informational only
    }
  }
  return v;
}

// The weight types and bytes of each class of tensors (the matrices the forward reads; norms and
// biases are f32 vectors and left out): what --expert-type and --dense-type chose.
struct TensorClass {
  std::string name;
  std::vector<std::string> types;  // distinct, in first-seen order
  int64_t bytes = 0;
};

std::vector<TensorClass> tensor_classes(const Model& model, const std::optional<PackManifest>& manifest) {
  std::vector<TensorClass> classes;
  auto add = [&](const char* name, DType dtype, int64_t bytes) {
    auto it = std::find_if(classes.begin(), classes.end(), [&](const TensorClass& c) { return c.name == name; });
    if (it == classes.end()) it = classes.insert(classes.end(), TensorClass{name, {}, 0});
    const std::string type(dtype_name(dtype));
    if (std::find(it->types.begin(), it->types.end(), type) == it->types.end()) it->types.push_back(type);
    it->bytes += bytes;
  };
  auto add_view = [&](const char* name, const WeightView& w) {
    if (w.data != nullptr) add(name, w.dtype, w.rows * dtype_row_bytes(w.dtype, w.cols));
  };
  const ModelWeights& w = model.weights();
  add_view("embeddings", w.tok_embd);
  for (const LayerWeights& l : w.layers) {
    for (const WeightView* v :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.wq_a, &l.wq_b, &l.wkv_a, &l.wkv_b, &l.lin_qkv, &l.lin_z, &l.lin_b, &l.lin_a})
      add_view("attention", *v);
    add_view("router", l.router);
    for (const WeightView* v : {&l.shared.gate, &l.shared.up, &l.shared.down}) add_view("shared expert", *v);
    add_view("shared expert gate", l.shared_gate);
    for (const WeightView* v : {&l.dense.gate, &l.dense.up, &l.dense.down}) add_view("dense MLP", *v);
    if (!manifest) {
      for (const FfnWeights& e : l.experts) {
        add_view("experts gate/up", e.gate);
        add_view("experts gate/up", e.up);
        add_view("experts down", e.down);
      }
    }
  }
  if (manifest) {
    for (const auto& [key, e] : manifest->experts) {
      add("experts gate/up", e.gate.dtype, e.gate.bytes);
      add("experts gate/up", e.up.dtype, e.up.bytes);
      add("experts down", e.down.dtype, e.down.bytes);
    }
  }
  if (w.output.data != w.tok_embd.data) add_view("LM head", w.output);
  return classes;
}

// A GGUF file's tensors counted by stored type, in ggml id order: what the file holds as written
// (a stacked expert tensor counts once), names as GGUF gives them.
std::vector<std::pair<std::string, int64_t>> gguf_type_counts(const std::filesystem::path& file) {
  std::map<uint32_t, int64_t> counts;
  const auto gguf = GgufFile::open(file);  // named: a range-for over a temporary's member dangles
  for (const GgufTensor& t : gguf->tensors()) ++counts[t.ggml_type];
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& [id, n] : counts) out.emplace_back(ggml_type_name(id), n);
  return out;
}

int run_inspect(const InspectArgs& args) {
  if (!args.model.empty() && !args.positional.empty())
    throw UsageError("give the model folder once (-m or positional)");
  const auto dir = resolve_model_dir(args.model.empty() ? args.positional : args.model);
  const auto model = Model::load(dir, ModelLoadOptions{.keep_fp8 = true});  // FP8 counted as stored
  const ModelConfig& c = model->config();
  const ModelSizes& s = model->sizes();
  // Checked before anything is printed: a pack that disagrees with its config is an error.
  std::optional<PackSummaryView> pack;
  if (model->experts_streamed()) pack = summarize_pack(dir, c);
  // What this machine could give the model (--expert-cache auto), when it can be read.
  struct MemoryHere {
    AvailableMemory available;
    AutoBudget auto_budget;
    int64_t kv_ctx = 0, kv_bytes = 0;
  };
  std::optional<MemoryHere> memory;
  try {
    MemoryHere m;
    m.available = available_memory();
    m.kv_ctx = std::min<int64_t>(c.n_ctx_train, 4096);
    m.kv_bytes = KvStore::bytes_per_slot(c, m.kv_ctx, kDefaultPrefillBatch);
    m.auto_budget = auto_expert_budget(m.available, s.expert_bytes, s.dense_bytes + m.kv_bytes);
    memory = m;
  } catch (const Error& e) {
    spdlog::debug("inspect: no memory figures: {}", e.what());
  }
  std::optional<PackManifest> manifest;
  if (model->experts_streamed()) manifest = PackManifest::parse(dir);
  const std::vector<TensorClass> classes = tensor_classes(*model, manifest);
  std::vector<std::pair<std::string, int64_t>> file_types;  // GGUF input only
  if (is_gguf_path(dir)) file_types = gguf_type_counts(dir);
  const int64_t total_params = s.dense_params + s.expert_params;
  // The distinct attention and router kinds of the layers, in layer order.
  struct {
    std::vector<std::string> attention, router;
  } kinds;
  const auto add_once = [](std::vector<std::string>& names, const char* name) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.emplace_back(name);
  };
  for (const LayerKind& kind : c.layers) {
    add_once(kinds.attention, name_of(kind.attention));
    if (kind.ffn == FfnKind::kMoe) add_once(kinds.router, name_of(kind.router));
  }
  // Bytes one more position adds (every attention layer's), and a sequence's recurrent state
  // (Gated DeltaNet layers), which does not grow with it.
  const int64_t state_bytes = KvStore::state_bytes_per_slot(c);
  const int64_t kv_bytes_per_token = KvStore::bytes_per_slot(c, 1) - state_bytes;
  int64_t attention_layers = 0, recurrent_layers = 0;
  for (const LayerKind& kind : c.layers)
    ++(kind.attention == AttentionKind::kGatedDeltaNet ? recurrent_layers : attention_layers);
  // Layers with their own window (gpt-oss) keep a ring of window + batch - 1 positions.
  int64_t ring_layers = 0, ring = 0;
  for (int64_t il = 0; il < c.n_layer; ++il)
    if (const int64_t kept = KvStore::layer_positions(c, il, c.n_ctx_train, kDefaultPrefillBatch);
        c.layers[size_t(il)].attention != AttentionKind::kGatedDeltaNet && kept < c.n_ctx_train) {
      ++ring_layers;
      ring = kept;
    }
  const std::string ring_text =
      ring_layers == 0 ? ""
                       : fmt::format("; {} sliding layers keep their last {} positions at -b {}, {} per sequence",
                                     ring_layers, ring, kDefaultPrefillBatch,
                                     human_bytes(ring_layers * ring * 2 * c.kv_dim() * int64_t(sizeof(float))));
  const std::string state_text =
      recurrent_layers == 0 ? ""
                            : fmt::format("; {} Gated DeltaNet layers keep a recurrent state instead, {} per sequence",
                                          recurrent_layers, human_bytes(state_bytes));
  // MLA's cache against the keys and values its heads would have expanded (f32 both).
  const int64_t kv_expanded_bytes_per_token =
      c.mla() ? c.n_layer * c.n_head * (c.head_dim + c.v_head_dim) * int64_t(sizeof(float)) : kv_bytes_per_token;
  const int64_t active_params = s.dense_params + (c.n_expert > 0 ? s.expert_params / c.n_expert * c.n_expert_used : 0);
  if (args.json) {
    nlohmann::json j = {
        {"model", dir.string()},
        {"architecture", c.arch_name()},
        {"model_type", c.model_type},
        {"layers", c.n_layer},
        {"moe_layers", c.n_moe_layers()},
        {"experts", c.n_expert},
        {"experts_per_token", c.n_expert_used},
        {"hidden_size", c.n_embd},
        {"heads", c.n_head},
        {"kv_heads", c.n_head_kv},
        {"head_dim", c.head_dim},
        {"vocab_size", c.n_vocab},
        {"expert_ffn", c.n_ff_expert},
        {"shared_expert_ffn", c.n_ff_shared},
        {"dense_ffn", c.n_ff_dense},
        {"max_position_embeddings", c.n_ctx_train},
        {"attention_kinds", kinds.attention},
        {"router_kinds", kinds.router},
        {"routed_scaling_factor", c.routed_scaling},
        {"expert_groups", c.n_group},
        {"expert_groups_per_token", c.topk_group},
        {"rotary_dims", c.n_rot},
        {"kv_bytes_per_token", kv_bytes_per_token},
        {"kv_bytes_per_token_expanded", kv_expanded_bytes_per_token},
        {"kv_sliding_layers", ring_layers},
        {"kv_sliding_positions", ring},
        {"recurrent_layers", recurrent_layers},
        {"recurrent_state_bytes_per_sequence", state_bytes},
        {"vision_encoder_ignored", c.vision_encoder_ignored},
        {"params_total", total_params},
        {"params_active_per_token", active_params},
        {"dense_params", s.dense_params},
        {"dense_bytes", s.dense_bytes},
        {"expert_params", s.expert_params},
        {"expert_bytes", s.expert_bytes},
        {"bytes_per_expert", s.bytes_per_expert},
        {"expert_dtype", std::string(dtype_name(s.expert_dtype))},
    };
    if (memory) {
      j["memory"] = {{"available_bytes", memory->available.bytes},
                     {"available_source", memory->available.source},
                     {"resident_bytes", s.dense_bytes + s.expert_bytes + memory->kv_bytes},
                     {"expert_cache_auto_bytes", memory->auto_budget.bytes}};
    }
    j["tensor_classes"] = nlohmann::json::array();
    for (const TensorClass& tc : classes)
      j["tensor_classes"].push_back({{"class", tc.name}, {"types", tc.types}, {"bytes", tc.bytes}});
    if (!file_types.empty()) {
      j["gguf_tensor_types"] = nlohmann::json::array();
      for (const auto& [type, n] : file_types) j["gguf_tensor_types"].push_back({{"type", type}, {"tensors", n}});
    }
    if (pack) {
      const PackSummaryView& v = *pack;
      j["pack"] = {{"clusters", v.clusters},
                   {"experts", v.experts},
                   {"method", v.method},
                   {"cluster_bytes_min", v.min_bytes},
                   {"cluster_bytes_median", v.median_bytes},
                   {"cluster_bytes_max", v.max_bytes},
                   {"modularity", v.modularity},
                   {"intra_cluster_weight_share", v.intra_share},
                   {"traced_tokens", v.traced_tokens}};
    }
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("model            {}\n", dir.string());
  fmt::print(
      "architecture     {} ({}{})\n", c.arch_name(), c.model_type,
      c.vision_encoder_ignored ? "; its text model: the vision encoder is not loaded, image inputs unsupported" : "");
  fmt::print("layers           {} ({} MoE, {} dense)\n", c.n_layer, c.n_moe_layers(), c.n_layer - c.n_moe_layers());
  fmt::print(
      "experts          {} routed per MoE layer, top-{}{}, expert FFN {}{}{}{}\n", c.n_expert, c.n_expert_used,
      c.norm_topk_prob ? " (renormalized)" : "", c.n_ff_expert,
      c.n_ff_shared > 0 ? fmt::format(", shared expert FFN {}", c.n_ff_shared) : "", c.expert_bias ? ", biases" : "",
      c.swiglu_limit > 0.0f ? fmt::format(", SwiGLU clamped at {} (alpha {})", c.swiglu_limit, c.swiglu_alpha) : "");
  if (c.mla())
    fmt::print("attention        {}: hidden {}, {} heads, q/k head {} ({} rotary), v head {}, latent {}{}\n",
               fmt::join(kinds.attention, ", "), c.n_embd, c.n_head, c.head_dim, c.n_rot, c.v_head_dim, c.kv_lora_rank,
               c.q_lora_rank > 0 ? fmt::format(", query rank {}", c.q_lora_rank) : "");
  else
    fmt::print("attention        {}: hidden {}, {} heads, {} kv heads, head_dim {}{}{}{}{}\n",
               fmt::join(kinds.attention, ", "), c.n_embd, c.n_head, c.n_head_kv, c.head_dim,
               c.n_rot < c.head_dim ? fmt::format(" ({} rotary)", c.n_rot) : "",
               c.attn_qkv_bias ? (c.attn_o_bias ? ", q/k/v/o bias" : ", q/k/v bias") : "",
               c.attn_sinks ? ", sinks" : "", windows_text(c));
  if (recurrent_layers > 0)
    fmt::print("linear attention {} of {} layers: {} key heads of {}, {} value heads of {}, convolution {}{}{}\n",
               recurrent_layers, c.n_layer, c.lin_k_heads, c.lin_k_dim, c.lin_v_heads, c.lin_v_dim, c.lin_conv_kernel,
               c.attn_output_gate ? "; full attention with an output gate" : "",
               c.norm_plus_one ? ", (1 + w) norms" : "");
  if (!kinds.router.empty())
    fmt::print("router           {}{}{}{}\n", fmt::join(kinds.router, ", "), c.router_logit_bias ? " (logit bias)" : "",
               c.n_group > 1 ? fmt::format(", top-{} of {} groups", c.topk_group, c.n_group) : "",
               c.routed_scaling != 1.0f ? fmt::format(", weights x{}", c.routed_scaling) : "");
  if (c.mla())
    fmt::print(
        "KV cache         {} per token (f32 latent {} + rotary key {} of {} layers; expanded keys and values "
        "would take {}, {:.1f}x)\n",
        human_bytes(kv_bytes_per_token), c.kv_lora_rank, c.qk_rope_dim, c.n_layer,
        human_bytes(kv_expanded_bytes_per_token), double(kv_expanded_bytes_per_token) / double(kv_bytes_per_token));
  else
    fmt::print("KV cache         {} per token (f32 keys and values of {} layer{}{}{})\n",
               human_bytes(
                   attention_layers > 0 ? kv_bytes_per_token * (attention_layers - ring_layers) / attention_layers : 0),
               attention_layers - ring_layers, attention_layers - ring_layers == 1 ? "" : "s", ring_text, state_text);
  fmt::print("vocabulary       {}\n", c.n_vocab);
  fmt::print(
      "context          {} (rope theta {}{})\n", c.n_ctx_train, c.rope_theta,
      c.rope_type == RopeType::kYarn ? fmt::format(", YaRN x{} from {}", c.rope_factor, c.yarn_original_ctx) : "");
  fmt::print("parameters       {} total, {} active per token\n", human_count(total_params), human_count(active_params));
  fmt::print("dense            {} params, {}\n", s.dense_params, human_bytes(s.dense_bytes));
  fmt::print("routed experts   {} params, {} ({} per expert, {})\n", s.expert_params, human_bytes(s.expert_bytes),
             human_bytes(s.bytes_per_expert), dtype_name(s.expert_dtype));
  for (size_t i = 0; i < classes.size(); ++i)
    fmt::print("{:<17}{:<19} {:<12} {}\n", i == 0 ? "weights" : "", classes[i].name,
               fmt::format("{}", fmt::join(classes[i].types, ",")), human_bytes(classes[i].bytes));
  if (c.fp8_block_rows > 0 && !pack)
    fmt::print(
        "FP8              F8_E4M3 weights, one scale per {}x{} block: dequantized to BF16 to run; chronos pack "
        "converts them (BF16 unless --expert-type / --dense-type)\n",
        c.fp8_block_rows, c.fp8_block_cols);
  if (memory) {
    const int64_t resident = s.dense_bytes + s.expert_bytes + memory->kv_bytes;
    fmt::print(
        "memory here      {} to run resident (with a {}-token KV store), {} available ({}); "
        "--expert-cache auto{}: {} of the experts ({:.0f}%)\n",
        human_bytes(resident), memory->kv_ctx, human_bytes(memory->available.bytes), memory->available.source,
        pack || !file_types.empty() ? "" : " on a pack of it", human_bytes(memory->auto_budget.bytes),
        s.expert_bytes > 0 ? 100.0 * double(memory->auto_budget.bytes) / double(s.expert_bytes) : 0.0);
  }
  if (!file_types.empty()) {
    int64_t n_tensors = 0;
    std::vector<std::string> counts;
    for (const auto& [type, n] : file_types) {
      n_tensors += n;
      counts.push_back(fmt::format("{} {}", type, n));
    }
    fmt::print("GGUF tensors     {}: {}\n", n_tensors, fmt::join(counts, ", "));
  }
  if (pack) {
    const PackSummaryView& v = *pack;
    fmt::print("pack             {} clusters ({}), {} experts; cluster files {} .. {} (median {})\n", v.clusters,
               v.method, v.experts, human_bytes(v.min_bytes), human_bytes(v.max_bytes), human_bytes(v.median_bytes));
    if (v.have_stats)
      fmt::print(
          "co-activation    modularity {:.3f}, {:.1f}% of co-activation weight inside clusters ({} traced tokens)\n",
          v.modularity, 100.0 * v.intra_share, v.traced_tokens);
  }
  return 0;
}

}  // namespace

Command register_inspect(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* sub = app.add_subcommand("inspect", "Describe a model: architecture, experts, parameter and byte counts");
  sub->add_option("-m,--model", args->model, "Model folder");
  sub->add_option("model_dir", args->positional, "Model folder (alternative to -m)");
  sub->add_flag("--json", args->json, "Print JSON");
  return Command{sub, [args] { return run_inspect(*args); }};
}

}  // namespace chronos::cli
