// write_pack: clusters from traces, one .ctsr per cluster, dense.safetensors, manifest, config files.
#include "chronos/pack.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "chronos/error.h"
#include "chronos/file_util.h"
#include "chronos/gguf.h"
#include "chronos/io_ring.h"
#include "chronos/model_config.h"
#include "chronos/pack_format.h"
#include "chronos/quant.h"
#include "chronos/tokenizer.h"
#include "chronos/trace.h"
#include "model/arch/arch.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

std::vector<int32_t> moe_layers_of(const ModelConfig& c) {
  std::vector<int32_t> layers;
  for (int64_t il = 0; il < c.n_layer; ++il)
    if (c.is_moe_layer(il)) layers.push_back(int32_t(il));
  return layers;
}

const char* method_name(ClusterMethod m) {
  switch (m) {
    case ClusterMethod::kLeiden: return "leiden";
    case ClusterMethod::kLouvain: return "louvain";
    case ClusterMethod::kNone: return "none";
  }
  return "none";
}

// Matrices of dense.safetensors that --dense-type converts: everything two-dimensional but the
// router and the shared expert's one-row gate (routing decisions stay in the source precision).
bool dense_matrix_converts(TensorRole role) {
  switch (role) {
    case TensorRole::kTokenEmbd:
    case TensorRole::kOutput:
    case TensorRole::kAttnQ:
    case TensorRole::kAttnK:
    case TensorRole::kAttnV:
    case TensorRole::kAttnO:
    case TensorRole::kAttnQA:
    case TensorRole::kAttnQB:
    case TensorRole::kAttnKvA:
    case TensorRole::kAttnKvB:
    case TensorRole::kSharedGate:
    case TensorRole::kSharedUp:
    case TensorRole::kSharedDown:
    case TensorRole::kDenseGate:
    case TensorRole::kDenseUp:
    case TensorRole::kDenseDown: return true;
    default: return false;
  }
}

// One file of low-bit copies of every routed expert, in (layer, expert) order: <dir>/lowbit.ctsr.
LowbitCopies write_lowbit_copies(const Model& model, const std::vector<int32_t>& layers, DType type,
                                 const std::string& fingerprint, const fs::path& dir, ThreadPool& pool) {
  LowbitCopies lowbit;
  lowbit.file = "lowbit.ctsr";
  lowbit.dtype = std::string(dtype_name(type));
  std::vector<ExpertSource> sources;
  std::vector<std::vector<std::byte>> converted;
  converted.reserve(layers.size() * size_t(model.config().n_expert) * 3);
  for (const int32_t il : layers)
    for (int32_t e = 0; e < model.config().n_expert; ++e) {
      const FfnWeights& w = model.weights().layers[size_t(il)].experts[size_t(e)];
      ExpertSource source{ExpertKey{il, e}, w.gate, w.up, w.down};
      for (WeightView* view : {&source.gate, &source.up, &source.down})
        *view = ops::convert_weight(*view, type, converted.emplace_back(), &pool);
      sources.push_back(source);
    }
  for (PackedExpert& packed : write_ctsr(dir / lowbit.file, kLowbitClusterId, fingerprint, sources))
    lowbit.experts[packed.key] = packed;
  lowbit.bytes = int64_t(fs::file_size(dir / lowbit.file));
  return lowbit;
}

}  // namespace

std::string model_fingerprint_of(const Model& model, const fs::path& model_dir) {
  if (model.gguf_file() == nullptr) return model_fingerprint(model_dir);
  return model_fingerprint(model.gguf_config_json(), model.all_tensors());
}

CoactivationGraph coactivation_from_traces(const ModelConfig& c, const fs::path& trace_dir, int64_t* n_tokens) {
  const std::vector<int32_t> layers = moe_layers_of(c);
  CoactivationGraph graph(int32_t(layers.size()), int32_t(c.n_expert));
  int64_t tokens = 0;
  for (const TraceReader& reader : open_traces(trace_dir)) {
    const TraceHeader& h = reader.header();
    if (h.moe_layers != layers || h.n_expert != c.n_expert || h.n_expert_used != c.n_expert_used)
      throw_error("{}: the trace's MoE layout ({} layers x {} experts, top-{}) is not this model's",
                  reader.path().string(), h.moe_layers.size(), h.n_expert, h.n_expert_used);
    for (const TraceSequence& seq : reader.read_all()) {
      graph.begin_sequence();
      for (const TraceToken& token : seq.tokens) graph.add_token(token.top_ids, int32_t(c.n_expert_used));
      tokens += std::ssize(seq.tokens);
    }
  }
  if (n_tokens != nullptr) *n_tokens = tokens;
  return graph;
}

PackSummary write_pack(const Model& model, const fs::path& model_dir, const fs::path& out_dir,
                       const PackOptions& requested, const std::function<void(int64_t, int64_t)>& on_cluster) {
  const ModelConfig& c = model.config();
  // FP8 weights are always converted: to --expert-type / --dense-type, by default to BF16 (what
  // transformers dequantizes them to).
  PackOptions options = requested;
  if (!options.expert_type && model.sizes().expert_dtype == DType::kF8E4M3) options.expert_type = DType::kBF16;
  if (model.experts_streamed()) throw_error("{}: already a pack", model_dir.string());
  if (c.n_moe_layers() == 0) throw_error("{}: the model has no MoE layer", model_dir.string());
  if (fs::exists(out_dir)) throw_error("{}: already exists (remove it or choose another -o)", out_dir.string());
  if (options.lowbit_only) {  // no clusters: --cluster and --traces do not apply
    PackSummary summary;
    if (!options.lowbit_type) throw UsageError("--lowbit-only needs --lowbit-type");
    const fs::path tmp = make_temp_dir_beside(out_dir);
    try {
      ThreadPool pool(options.threads > 0 ? options.threads : int(std::max(1u, std::thread::hardware_concurrency())));
      const std::string fingerprint = model_fingerprint_of(model, model_dir);
      const LowbitCopies lowbit =
          write_lowbit_copies(model, moe_layers_of(c), *options.lowbit_type, fingerprint, tmp, pool);
      save_lowbit_sidecar(lowbit, fingerprint, tmp);
      summary.lowbit_bytes = lowbit.bytes;
      fs::rename(tmp, out_dir);
    } catch (...) {
      std::error_code ignored;
      fs::remove_all(tmp, ignored);
      throw;
    }
    return summary;
  }
  if (options.method != ClusterMethod::kNone && !options.traces)
    throw UsageError(fmt::format("--cluster {} needs --traces (or use --cluster none)", method_name(options.method)));
  const std::vector<int32_t> layers = moe_layers_of(c);
  PackSummary summary;

  CoactivationGraph graph(int32_t(layers.size()), int32_t(c.n_expert));
  if (options.traces) graph = coactivation_from_traces(c, *options.traces, &summary.traced_tokens);
  ClusterOptions cluster_options;
  cluster_options.method = options.method;
  cluster_options.seed = options.seed;
  // The largest expert as packed (converted to --expert-type, or as stored: a GGUF file may mix
  // types between layers).
  int64_t bytes_per_expert = 0;
  for (const int32_t il : layers) {
    const FfnWeights& first = model.weights().layers[size_t(il)].experts.front();
    int64_t bytes = 0;
    for (const WeightView* w : {&first.gate, &first.up, &first.down}) {
      DType t = w->dtype;
      if (options.expert_type)
        t = dtype_is_block(*options.expert_type) ? block_dtype_for_row(*options.expert_type, w->cols)
                                                 : *options.expert_type;
      bytes += w->rows * dtype_row_bytes(t, w->cols);
    }
    bytes_per_expert = std::max(bytes_per_expert, bytes);
  }
  cluster_options.bytes_per_expert = DirectFile::align_up(bytes_per_expert);
  cluster_options.max_cluster_bytes = std::max(options.max_cluster_bytes, cluster_options.bytes_per_expert);
  const ClusterPlan plan = plan_clusters(graph, cluster_options);
  summary.modularity = plan.modularity;
  summary.intra_cluster_weight_share = plan.intra_cluster_weight_share;

  const fs::path tmp = make_temp_dir_beside(out_dir);
  struct RemoveOnFailure {
    const fs::path& dir;
    bool done = false;
    ~RemoveOnFailure() {
      std::error_code ignored;
      if (!done) fs::remove_all(dir, ignored);
    }
  } guard{tmp};

  ThreadPool pool(options.threads > 0 ? options.threads : int(std::max(1u, std::thread::hardware_concurrency())));
  // A GGUF file has no folder of side files: its config and tokenizer are written from its
  // key-values, and the fingerprint hashes that config and the tensors as loaded.
  const bool from_gguf = model.gguf_file() != nullptr;
  if (from_gguf) {  // the file the model was loaded from, parsed and checked once
    const TokenizerFiles gguf_tokenizer = tokenizer_files_from_gguf(*model.gguf_file());
    write_file_atomically(tmp / "config.json", model.gguf_config_json());
    write_file_atomically(tmp / "tokenizer.json", gguf_tokenizer.tokenizer_json);
    write_file_atomically(tmp / "tokenizer_config.json", gguf_tokenizer.tokenizer_config_json);
  }
  const std::vector<const TensorInfo*> all_tensors = model.all_tensors();
  const std::string fingerprint = model_fingerprint_of(model, model_dir);
  PackManifest manifest;
  manifest.architecture = c.arch_name();
  manifest.num_moe_layers = std::ssize(layers);
  manifest.num_experts = c.n_expert;
  manifest.dtype = std::string(dtype_name(options.expert_type.value_or(model.sizes().expert_dtype)));
  manifest.fingerprint = fingerprint;
  manifest.config_fingerprint = config_fingerprint((from_gguf ? tmp : model_dir) / "config.json");
  manifest.clustering_method = method_name(options.method);
  manifest.clustering_trace = options.traces ? options.traces->string() : "";
  manifest.clustering_seed = options.seed;
  const auto& weights = model.weights();
  for (size_t i = 0; i < plan.clusters.size(); ++i) {
    std::vector<ExpertSource> sources;
    std::vector<std::vector<std::byte>> converted;  // this cluster's converted experts
    converted.reserve(plan.clusters[i].size() * 3);
    PackCluster cluster;
    cluster.id = int32_t(i);
    cluster.file = fmt::format("cluster_{:03d}.ctsr", i);
    for (const int32_t node : plan.clusters[i]) {
      const ExpertKey key{layers[size_t(node / c.n_expert)], int32_t(node % c.n_expert)};
      const FfnWeights& w = weights.layers[size_t(key.layer)].experts[size_t(key.expert)];
      ExpertSource source{key, w.gate, w.up, w.down};
      if (options.expert_type) {
        for (WeightView* view : {&source.gate, &source.up, &source.down})
          *view = ops::convert_weight(*view, *options.expert_type, converted.emplace_back(), &pool);
      }
      sources.push_back(source);
      cluster.experts.push_back(key);
    }
    for (PackedExpert& packed : write_ctsr(tmp / cluster.file, cluster.id, fingerprint, sources))
      manifest.experts[packed.key] = packed;
    cluster.bytes = int64_t(fs::file_size(tmp / cluster.file));
    summary.expert_bytes += cluster.bytes;
    manifest.clusters.push_back(std::move(cluster));
    on_cluster(int64_t(i + 1), std::ssize(plan.clusters));
  }
  // Experts kept in the types they were stored in may mix them (a GGUF Q4_K_M file's Q6_K down
  // projections): the manifest then lists every type.
  std::set<std::string> types;
  bool mixed = false;
  for (const auto& [key, packed] : manifest.experts)
    for (const PackedTensor* t : {&packed.gate, &packed.up, &packed.down}) {
      types.insert(std::string(dtype_name(t->dtype)));
      mixed = mixed || !manifest.accepts_expert_dtype(t->dtype, t->shape);
    }
  if (mixed) manifest.dtypes.assign(types.begin(), types.end());
  if (options.lowbit_type) {
    manifest.lowbit = write_lowbit_copies(model, layers, *options.lowbit_type, fingerprint, tmp, pool);
    summary.lowbit_bytes = manifest.lowbit->bytes;
  }
  manifest.save(tmp / kManifestFileName);

  // dense.safetensors: every tensor of the checkpoint that is not a routed expert, its matrices
  // converted to --dense-type; a block-quantized one is U8 [bytes], its type in the metadata.
  std::set<std::string, std::less<>> expert_names, convertible;
  for (const TensorSpec& spec : arch_spec(c.arch).tensor_table(c)) {
    if (spec.expert >= 0)
      expert_names.insert(spec.name);
    else if (dense_matrix_converts(spec.role) && spec.shape.size() == 2)
      convertible.insert(spec.name);
  }
  std::vector<TensorToWrite> dense;
  std::vector<std::vector<std::byte>> dense_storage;
  dense_storage.reserve(convertible.size());
  nlohmann::json quantized = nlohmann::json::object();
  // A converted matrix (its bytes the last of dense_storage); a block-typed one is U8 [bytes].
  const auto add_converted = [&](const TensorInfo& t, const WeightView& w) {
    const std::span<const std::byte> bytes(static_cast<const std::byte*>(w.data), dense_storage.back().size());
    if (dtype_is_block(w.dtype)) {
      dense.push_back({t.name, DType::kU8, {int64_t(bytes.size())}, bytes});
      quantized[t.name] = {{"dtype", std::string(dtype_name(w.dtype))}, {"shape", t.shape}};
    } else {
      dense.push_back({t.name, w.dtype, t.shape, bytes});
    }
    summary.dense_bytes += int64_t(bytes.size());
  };
  for (const TensorInfo* t : all_tensors) {
    if (expert_names.count(t->name)) continue;
    if (t->name.ends_with("_scale_inv") &&
        model.fp8_weight(std::string_view(t->name).substr(0, t->name.size() - 10)) != nullptr)
      continue;  // an FP8 weight's block scales: used by its conversion below
    if (const WeightView* fp8 = model.fp8_weight(t->name)) {
      DType target = options.dense_type.value_or(DType::kBF16);
      if (dtype_is_block(target) && fp8->cols % 32 != 0) target = DType::kBF16;  // no block fits the row
      add_converted(*t, ops::convert_weight(*fp8, target, dense_storage.emplace_back(), &pool));
      continue;
    }
    if (options.dense_type && convertible.count(t->name) && !(options.dense_type == t->dtype)) {
      const WeightView source{t->data, t->dtype, t->shape[0], t->shape[1]};
      // A matrix whose rows fit no block (not a multiple of 32) keeps its type.
      if (!dtype_is_block(*options.dense_type) || t->shape[1] % 32 == 0) {
        add_converted(*t, ops::convert_weight(source, *options.dense_type, dense_storage.emplace_back(), &pool));
        continue;
      }
    }
    const std::span<const std::byte> bytes(t->data, size_t(t->n_bytes));
    if (dtype_is_block(t->dtype)) {  // kept as stored (a GGUF file's block-typed matrix)
      dense.push_back({t->name, DType::kU8, {t->n_bytes}, bytes});
      quantized[t->name] = {{"dtype", std::string(dtype_name(t->dtype))}, {"shape", t->shape}};
    } else {
      dense.push_back({t->name, t->dtype, t->shape, bytes});
    }
    summary.dense_bytes += t->n_bytes;
  }
  std::map<std::string, std::string> dense_metadata = {{"format", "pt"}, {"chronos_pack_of", fingerprint}};
  if (!quantized.empty()) dense_metadata[kQuantizedTensorsKey] = quantized.dump();
  write_safetensors(tmp / "dense.safetensors", dense, dense_metadata);

  if (!from_gguf) {
    for (const char* name : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                             "chat_template.jinja", "special_tokens_map.json", "README.md"})
      if (fs::exists(model_dir / name)) fs::copy_file(model_dir / name, tmp / name);
    if (fs::is_directory(model_dir / "prompts"))
      fs::copy(model_dir / "prompts", tmp / "prompts", fs::copy_options::recursive);
  }

  // What inspect reports about the clustering.
  nlohmann::json stats = {{"clusters", plan.clusters.size()},
                          {"modularity", plan.modularity},
                          {"intra_cluster_weight_share", plan.intra_cluster_weight_share},
                          {"traced_tokens", summary.traced_tokens},
                          {"method", method_name(options.method)},
                          {"seed", options.seed}};
  write_file_atomically(tmp / "pack_stats.json", stats.dump(2) + "\n");

  fs::rename(tmp, out_dir);
  guard.done = true;
  summary.n_clusters = std::ssize(plan.clusters);
  return summary;
}

}  // namespace chronos
