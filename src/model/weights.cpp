// Model::load: binds every tensor of the architecture's table, checking name, dtype and shape.
#include <fcntl.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "chronos/error.h"
#include "chronos/gguf.h"
#include "chronos/model.h"
#include "chronos/pack_format.h"
#include "model/arch/arch.h"
#include "model/gguf_tensors.h"

namespace chronos {
namespace {

bool is_float_dtype(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

WeightView as_matrix(const TensorInfo& t) {
  return WeightView{t.data, t.dtype, t.shape[0], t.shape.size() > 1 ? t.shape[1] : 1};
}

std::vector<float> to_f32_vector(const TensorInfo& t) {
  std::vector<float> out(size_t(t.n_elements()));
  WeightView row{t.data, t.dtype, 1, t.n_elements()};
  ops::weight_row_to_f32(out.data(), row, 0);
  return out;
}

std::vector<float>& vector_slot(LayerWeights& l, TensorRole role) {
  switch (role) {
    case TensorRole::kAttnNorm: return l.attn_norm;
    case TensorRole::kFfnNorm: return l.ffn_norm;
    case TensorRole::kAttnQBias: return l.bq;
    case TensorRole::kAttnKBias: return l.bk;
    case TensorRole::kAttnVBias: return l.bv;
    case TensorRole::kAttnOBias: return l.bo;
    case TensorRole::kAttnSinks: return l.sinks;
    case TensorRole::kRouterLogitBias: return l.router_logit_bias;
    case TensorRole::kExpertGateBias: return l.expert_gate_bias;
    case TensorRole::kExpertUpBias: return l.expert_up_bias;
    case TensorRole::kExpertDownBias: return l.expert_down_bias;
    case TensorRole::kAttnQNorm: return l.q_norm;
    case TensorRole::kAttnKNorm: return l.k_norm;
    case TensorRole::kRouterBias: return l.router_bias;
    case TensorRole::kAttnQANorm: return l.q_a_norm;
    case TensorRole::kAttnKvANorm: return l.kv_a_norm;
    case TensorRole::kLinConv: return l.lin_conv;
    case TensorRole::kLinALog: return l.lin_a_log;
    case TensorRole::kLinDtBias: return l.lin_dt_bias;
    case TensorRole::kLinNorm: return l.lin_norm;
    default: break;
  }
  CHRONOS_CHECK_MSG(false, "role {} is not a vector", int(role));
  return l.attn_norm;
}

WeightView& matrix_slot(LayerWeights& l, const TensorSpec& spec) {
  switch (spec.role) {
    case TensorRole::kAttnQ: return l.wq;
    case TensorRole::kAttnK: return l.wk;
    case TensorRole::kAttnV: return l.wv;
    case TensorRole::kAttnO: return l.wo;
    case TensorRole::kAttnQA: return l.wq_a;
    case TensorRole::kAttnQB: return l.wq_b;
    case TensorRole::kAttnKvA: return l.wkv_a;
    case TensorRole::kAttnKvB: return l.wkv_b;
    case TensorRole::kRouter: return l.router;
    case TensorRole::kLinQkv: return l.lin_qkv;
    case TensorRole::kLinB: return l.lin_b;
    case TensorRole::kLinZ: return l.lin_z;
    case TensorRole::kLinA: return l.lin_a;
    case TensorRole::kExpertGate: return l.experts[size_t(spec.expert)].gate;
    case TensorRole::kExpertUp: return l.experts[size_t(spec.expert)].up;
    case TensorRole::kExpertDown: return l.experts[size_t(spec.expert)].down;
    case TensorRole::kSharedGate: return l.shared.gate;
    case TensorRole::kSharedUp: return l.shared.up;
    case TensorRole::kSharedDown: return l.shared.down;
    case TensorRole::kSharedExpertGate: return l.shared_gate;
    case TensorRole::kDenseGate: return l.dense.gate;
    case TensorRole::kDenseUp: return l.dense.up;
    case TensorRole::kDenseDown: return l.dense.down;
    default: break;
  }
  CHRONOS_CHECK_MSG(false, "role {} is not a matrix", int(spec.role));
  return l.wq;
}

bool is_vector_role(TensorRole role) {
  switch (role) {
    case TensorRole::kAttnNorm:
    case TensorRole::kFfnNorm:
    case TensorRole::kAttnQBias:
    case TensorRole::kAttnKBias:
    case TensorRole::kAttnVBias:
    case TensorRole::kAttnOBias:
    case TensorRole::kAttnSinks:
    case TensorRole::kRouterLogitBias:
    case TensorRole::kExpertGateBias:
    case TensorRole::kExpertUpBias:
    case TensorRole::kExpertDownBias:
    case TensorRole::kAttnQNorm:
    case TensorRole::kAttnKNorm:
    case TensorRole::kRouterBias:
    case TensorRole::kAttnQANorm:
    case TensorRole::kAttnKvANorm:
    case TensorRole::kLinConv:
    case TensorRole::kLinALog:
    case TensorRole::kLinDtBias:
    case TensorRole::kLinNorm:
    case TensorRole::kOutputNorm: return true;
    default: return false;
  }
}

// The block-quantized matrices of a pack's dense.safetensors: stored as U8 [bytes], their type
// and shape in the metadata (pack.h, kQuantizedTensorsKey). Every entry is checked here.
struct QuantizedTensor {
  DType dtype;
  std::vector<int64_t> shape;
};
std::map<std::string, QuantizedTensor, std::less<>> read_quantized_tensors(const TensorStore& store,
                                                                           const std::string& file) {
  std::map<std::string, QuantizedTensor, std::less<>> out;
  const auto text = store.metadata(kQuantizedTensorsKey);
  if (!text) return out;
  const auto json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) throw_error("{}: __metadata__ {} is not a JSON object", file, kQuantizedTensorsKey);
  for (const auto& item : json.items()) {
    const std::string& name = item.key();
    const nlohmann::json& entry = item.value();
    const auto bad = [&](const char* what) {
      throw_error("{}: __metadata__ {}: tensor {}: {}", file, kQuantizedTensorsKey, name, what);
    };
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() || !entry.contains("shape") ||
        !entry["shape"].is_array() || entry["shape"].size() != 2)
      bad("expected {\"dtype\": name, \"shape\": [rows, cols]}");
    const auto dtype = block_dtype_from_name(entry["dtype"].get<std::string>());
    if (!dtype) bad("not a block-quantized type");
    QuantizedTensor q{*dtype, {}};
    for (const auto& dim : entry["shape"]) {
      if (!dim.is_number_integer() || dim.get<int64_t>() <= 0 || dim.get<int64_t>() > (int64_t(1) << 32))
        bad("shape is not two positive sizes");
      q.shape.push_back(dim.get<int64_t>());
    }
    if (q.shape[1] % dtype_block_elements(q.dtype) != 0) bad("rows are not whole blocks");
    const TensorInfo* t = store.find(name);
    if (t == nullptr) bad("not in the file");
    if (t->dtype != DType::kU8 || t->n_bytes != q.shape[0] * dtype_row_bytes(q.dtype, q.shape[1]))
      bad("the stored bytes do not match its type and shape");
    out.emplace(name, std::move(q));
  }
  return out;
}

// MLA's kv_b_proj holds per head qk_nope_dim key rows, then v_head_dim value rows, each
// kv_lora_rank wide: the absorbed attention multiplies a query by the key rows transposed and a
// latent by the value rows, per head; both in f32 (LayerWeights::mla_uk, mla_uv).
void split_kv_b(const ModelConfig& c, LayerWeights& l) {
  const int64_t rank = c.kv_lora_rank, nope = c.qk_nope_dim, vd = c.v_head_dim;
  l.mla_uk.resize(size_t(c.n_head * rank * nope));
  l.mla_uv.resize(size_t(c.n_head * vd * rank));
  std::vector<float> row(static_cast<size_t>(rank));
  for (int64_t h = 0; h < c.n_head; ++h) {
    for (int64_t i = 0; i < nope + vd; ++i) {
      ops::weight_row_to_f32(row.data(), l.wkv_b, h * (nope + vd) + i);
      if (i < nope) {
        float* uk = l.mla_uk.data() + h * rank * nope;
        for (int64_t r = 0; r < rank; ++r) uk[r * nope + i] = row[size_t(r)];
      } else {
        std::copy(row.begin(), row.end(), l.mla_uv.begin() + (h * vd + (i - nope)) * rank);
      }
    }
  }
}

// An F8_E4M3 matrix and its block scales (ModelConfig::fp8_block_rows): the scales, checked and in
// f32, go to `scales`; every FP8 value is checked not to be NaN.
WeightView fp8_view(const TensorInfo& t, const TensorInfo* scale, const ModelConfig& c, std::vector<float>& scales) {
  if (c.fp8_block_rows == 0)
    throw_error(
        "{}: tensor {}: F8_E4M3 weights need config.json's quantization_config (quant_method fp8, "
        "weight_block_size)",
        t.file, t.name);
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const int64_t br = c.fp8_block_rows, bc = c.fp8_block_cols;
  const std::vector<int64_t> grid = {(rows + br - 1) / br, (cols + bc - 1) / bc};
  const std::string scale_name = t.name + "_scale_inv";
  if (scale == nullptr)
    throw_error("{}: tensor {}: no {} beside it (FP8 weights are scaled per {}x{} block)", t.file, t.name, scale_name,
                br, bc);
  if (scale->shape != grid)
    throw_error("{}: tensor {}: shape [{}], expected [{}] (one scale per {}x{} block of {} [{}, {}])", scale->file,
                scale_name, fmt::join(scale->shape, ","), fmt::join(grid, ","), br, bc, t.name, rows, cols);
  if (scale->dtype != DType::kF32 && scale->dtype != DType::kBF16 && scale->dtype != DType::kF8E8M0)
    throw_error("{}: tensor {}: dtype {} is not supported (F32, BF16 or F8_E8M0)", scale->file, scale_name,
                dtype_name(scale->dtype));
  scales.resize(size_t(grid[0] * grid[1]));
  const auto* raw = reinterpret_cast<const uint8_t*>(scale->data);
  for (size_t i = 0; i < scales.size(); ++i) {
    float value;
    if (scale->dtype == DType::kF32) {
      std::memcpy(&value, raw + i * 4, 4);
    } else if (scale->dtype == DType::kBF16) {
      uint16_t bits;
      std::memcpy(&bits, raw + i * 2, 2);
      value = bf16_to_f32(bits);
    } else {
      value = f8e8m0_to_f32(raw[i]);
    }
    if (!std::isfinite(value))
      throw_error("{}: tensor {}: the scale of block ({}, {}) is {}", scale->file, scale_name, int64_t(i) / grid[1],
                  int64_t(i) % grid[1], value);
    scales[i] = value;
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(t.data);
  for (int64_t i = 0; i < rows * cols; ++i)
    if (f8e4m3_is_nan(bytes[i]))
      throw_error("{}: tensor {}: element ({}, {}) is an FP8 NaN (0x{:02X})", t.file, t.name, i / cols, i % cols,
                  bytes[i]);
  return WeightView{t.data, DType::kF8E4M3, rows, cols, scales.data(), br, bc};
}

// The manifest of a GGUF model's experts streamed in place, with the file's size and identity as
// they are now (the model's mapping was made from this file a moment ago).
PackManifest streamed_gguf_manifest(const Model& model, const std::map<ExpertKey, GgufExpertSlices>& slices) {
  const std::filesystem::path& path = model.gguf_file()->path();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_error("{}: cannot open: {}", path.string(), std::strerror(errno));
  FileIdentity identity;
  int64_t bytes = 0;
  try {
    identity = FileIdentity::of(fd);
    bytes = int64_t(::lseek(fd, 0, SEEK_END));
    if (bytes < 0) throw_error("{}: cannot find its size: {}", path.string(), std::strerror(errno));
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  std::vector<GgufExpertSlices> experts;
  experts.reserve(slices.size());
  for (const auto& [key, expert] : slices) experts.push_back(expert);
  const ModelConfig& c = model.config();
  return gguf_expert_manifest(path.filename().string(), bytes, identity, c.arch_name(), c.n_moe_layers(), c.n_expert,
                              model_fingerprint(model.gguf_config_json(), model.all_tensors()), experts);
}

}  // namespace

const WeightView* Model::fp8_weight(std::string_view name) const {
  const auto it = fp8_weights_.find(name);
  return it == fp8_weights_.end() ? nullptr : &it->second;
}

int64_t FfnWeights::n_bytes() const {
  auto bytes = [](const WeightView& w) { return w.rows * dtype_row_bytes(w.dtype, w.cols); };
  return present() ? bytes(gate) + bytes(up) + bytes(down) : 0;
}

Model::~Model() = default;

std::vector<const TensorInfo*> Model::all_tensors() const { return gguf_ ? gguf_->all() : store_.all(); }

const GgufFile* Model::gguf_file() const { return gguf_ ? gguf_->file.get() : nullptr; }

std::unique_ptr<Model> Model::load(const std::filesystem::path& dir, const ModelLoadOptions& options) {
  std::unique_ptr<Model> model(new Model());
  // A .gguf file: the config from its key-values, its tensors under the HF names (gguf_tensors.h).
  const bool gguf = is_gguf_path(dir);
  if (gguf) {
    auto file = GgufFile::open(dir);
    if (options.stream_gguf_experts) file->advise_experts_read_elsewhere();  // before anything is read
    model->gguf_config_json_ = config_json_from_gguf(*file);
    model->config_ = ModelConfig::from_json_text(
        model->gguf_config_json_, fmt::format("{} (config built from its key-values)", file->path().string()));
    model->gguf_ = map_gguf_tensors(std::move(file), model->config_);
  } else {
    model->config_ = ModelConfig::load(dir);
  }
  const ModelConfig& c = model->config_;
  // A pack folder (chronos pack) holds the dense tensors in dense.safetensors and the routed
  // experts in .ctsr cluster files that an ExpertProvider streams; a checkpoint holds everything.
  const bool pack = !gguf && std::filesystem::exists(dir / "cluster_manifest.json");
  // A .gguf file may stream its experts in place: their slices are recorded, not bound.
  const bool stream_gguf = gguf && options.stream_gguf_experts;
  model->experts_streamed_ = pack || stream_gguf;
  std::map<ExpertKey, GgufExpertSlices> slices;
  if (!gguf) {
    model->store_ = TensorStore::open(pack ? dir / "dense.safetensors" : dir);
    // Tensors the architecture makes from the checkpoint's own, in their place (arch.h).
    if (const auto present = arch_spec(c.arch).present) present(model->store_, c, dir.string());
  }
  const TensorStore& store = model->store_;
  const GgufTensors* gguf_tensors = model->gguf_.get();
  const auto find = [&](std::string_view name) {
    return gguf_tensors != nullptr ? gguf_tensors->find(name) : store.find(name);
  };
  const auto quantized = gguf ? std::map<std::string, QuantizedTensor, std::less<>>{}
                              : read_quantized_tensors(store, (dir / "dense.safetensors").string());
  ModelSizes& sizes = model->sizes_;
  if (pack) {  // the routed experts' type and bytes from the manifest (the one manifest reader)
    const PackManifest manifest = PackManifest::parse(dir);
    auto dtype = dtype_from_name(manifest.dtype);
    if (!dtype) dtype = block_dtype_from_name(manifest.dtype);
    if (!dtype || !(is_float_dtype(*dtype) || dtype_is_block(*dtype)))
      throw_error("{}: model.dtype '{}' is not F32, F16, BF16 or a block type", (dir / kManifestFileName).string(),
                  manifest.dtype);
    sizes.expert_dtype = *dtype;
    for (const auto& [key, expert] : manifest.experts) sizes.expert_bytes += expert.payload_bytes();
  }

  ModelWeights& w = model->weights_;
  w.layers.resize(size_t(c.n_layer));
  for (int64_t il = 0; il < c.n_layer; ++il) {
    if (c.is_moe_layer(il)) w.layers[size_t(il)].experts.resize(size_t(c.n_expert));
  }

  const std::vector<TensorSpec> table = arch_spec(c.arch).tensor_table(c);
  std::set<std::string, std::less<>> used;
  std::map<DType, int64_t> expert_type_bytes;  // resident experts: bytes of each tensor type
  for (const TensorSpec& spec : table) {
    if (pack && spec.expert >= 0) {  // bytes live in the cluster files; counted from the manifest
      int64_t n_elements = 1;
      for (int64_t dim : spec.shape) n_elements *= dim;
      sizes.expert_params += n_elements;
      continue;
    }
    const TensorInfo* t = find(spec.name);
    if (t == nullptr) throw_error("{}: tensor {} is missing ({} expects it)", dir.string(), spec.name, c.arch_name());
    if (stream_gguf && spec.expert >= 0) {  // read by the provider from the file: its place, type and shape
      if (t->shape != spec.shape || !(is_float_dtype(t->dtype) || dtype_is_block(t->dtype)))
        throw_error("{}: tensor {}: {} [{}], expected a matrix [{}]", t->file, spec.name, dtype_name(t->dtype),
                    fmt::join(t->shape, ","), fmt::join(spec.shape, ","));
      used.insert(spec.name);
      sizes.expert_params += t->n_elements();
      sizes.expert_bytes += t->n_bytes;
      expert_type_bytes[t->dtype] += t->n_bytes;
      GgufExpertSlices& expert = slices[ExpertKey{int32_t(spec.layer), int32_t(spec.expert)}];
      expert.key = ExpertKey{int32_t(spec.layer), int32_t(spec.expert)};
      PackedTensor& slice = spec.role == TensorRole::kExpertGate ? expert.gate
                            : spec.role == TensorRole::kExpertUp ? expert.up
                                                                 : expert.down;
      slice = PackedTensor{t->file_offset, t->shape, t->dtype, t->n_bytes};
      continue;
    }
    // A block-quantized matrix: its logical type and shape from the pack's metadata, or a GGUF
    // tensor's own block type.
    const auto q = quantized.find(spec.name);
    std::optional<QuantizedTensor> block;
    if (q != quantized.end())
      block = q->second;
    else if (dtype_is_block(t->dtype))
      block = QuantizedTensor{t->dtype, t->shape};
    if (block) {
      if (is_vector_role(spec.role) || spec.shape.size() != 2 || block->shape != spec.shape)
        throw_error("{}: tensor {}: quantized as {} [{}], expected a matrix [{}]", t->file, spec.name,
                    dtype_name(block->dtype), fmt::join(block->shape, ","), fmt::join(spec.shape, ","));
      used.insert(spec.name);
      const bool routed = spec.expert >= 0;
      (routed ? sizes.expert_params : sizes.dense_params) += spec.shape[0] * spec.shape[1];
      (routed ? sizes.expert_bytes : sizes.dense_bytes) += t->n_bytes;
      if (routed) expert_type_bytes[block->dtype] += t->n_bytes;
      const WeightView view{t->data, block->dtype, spec.shape[0], spec.shape[1]};
      if (spec.layer < 0)
        (spec.role == TensorRole::kTokenEmbd ? w.tok_embd : w.output) = view;
      else
        matrix_slot(w.layers[size_t(spec.layer)], spec) = view;
      continue;
    }
    if (t->dtype == DType::kF8E4M3) {  // FP8 with block scales: a view that converts, or its BF16 copy
      if (is_vector_role(spec.role) || spec.shape.size() != 2 || t->shape != spec.shape)
        throw_error("{}: tensor {}: F8_E4M3 [{}], expected a matrix [{}]", t->file, spec.name, fmt::join(t->shape, ","),
                    fmt::join(spec.shape, ","));
      const std::string scale_name = spec.name + "_scale_inv";
      WeightView view = fp8_view(*t, find(scale_name), c, model->fp8_scales_.emplace_back());
      model->fp8_weights_.emplace(spec.name, view);
      if (!options.keep_fp8) view = ops::convert_weight(view, DType::kBF16, model->dequantized_.emplace_back());
      used.insert(spec.name);
      used.insert(scale_name);
      const bool routed = spec.expert >= 0;
      const int64_t n_bytes = view.rows * dtype_row_bytes(view.dtype, view.cols);
      (routed ? sizes.expert_params : sizes.dense_params) += t->n_elements();
      (routed ? sizes.expert_bytes : sizes.dense_bytes) += n_bytes;
      if (routed) expert_type_bytes[view.dtype] += n_bytes;
      if (spec.layer < 0)
        (spec.role == TensorRole::kTokenEmbd ? w.tok_embd : w.output) = view;
      else
        matrix_slot(w.layers[size_t(spec.layer)], spec) = view;
      continue;
    }
    if (!is_float_dtype(t->dtype))
      throw_error("{}: tensor {}: dtype {} is not supported (F32, F16 or BF16{})", t->file, spec.name,
                  dtype_name(t->dtype), c.fp8_block_rows > 0 ? ", or F8_E4M3 with block scales" : "");
    if (t->shape != spec.shape)
      throw_error("{}: tensor {}: shape [{}], expected [{}]", t->file, spec.name, fmt::join(t->shape, ","),
                  fmt::join(spec.shape, ","));
    used.insert(spec.name);
    const bool routed = spec.expert >= 0;
    (routed ? sizes.expert_params : sizes.dense_params) += t->n_elements();
    (routed ? sizes.expert_bytes : sizes.dense_bytes) += t->n_bytes;
    if (routed) expert_type_bytes[t->dtype] += t->n_bytes;

    if (spec.layer < 0) {
      switch (spec.role) {
        case TensorRole::kTokenEmbd: w.tok_embd = as_matrix(*t); break;
        case TensorRole::kOutputNorm: w.output_norm = to_f32_vector(*t); break;
        case TensorRole::kOutput: w.output = as_matrix(*t); break;
        default: CHRONOS_CHECK_MSG(false, "global role {}", int(spec.role));
      }
      continue;
    }
    LayerWeights& layer = w.layers[size_t(spec.layer)];
    if (is_vector_role(spec.role))
      vector_slot(layer, spec.role) = to_f32_vector(*t);
    else
      matrix_slot(layer, spec) = as_matrix(*t);
  }
  if (c.mla())
    for (LayerWeights& layer : w.layers) split_kv_b(c, layer);
  if (c.norm_plus_one) {  // (1 + w) RMSNorms: the forward's norms scale by the stored weight
    const auto plus_one = [](std::vector<float>& weight) {
      for (float& value : weight) value += 1.0f;
    };
    plus_one(w.output_norm);
    for (LayerWeights& layer : w.layers)
      for (std::vector<float>* weight : {&layer.attn_norm, &layer.ffn_norm, &layer.q_norm, &layer.k_norm})
        plus_one(*weight);
  }
  if (c.tie_word_embeddings) {
    w.output = w.tok_embd;
    if (find("lm_head.weight") != nullptr) used.insert("lm_head.weight");
  }
  int64_t n_unused = 0, n_vision = 0;
  for (const TensorInfo* t : model->all_tensors()) {
    if (c.vision_encoder_ignored && t->name.starts_with("model.visual.")) {
      ++n_vision;
      continue;
    }
    if (used.count(t->name) == 0) {
      if (n_unused++ < 5) spdlog::warn("{}: tensor {} is not used by {}; ignored", t->file, t->name, c.arch_name());
    }
  }
  if (c.vision_encoder_ignored)
    spdlog::warn(
        "{}: a vision-language checkpoint: Chronos runs its text model; the vision encoder ({} tensors under "
        "model.visual.) is not loaded, and image or video inputs are not supported",
        dir.string(), n_vision);
  if (stream_gguf) model->gguf_experts_ = std::make_shared<const PackManifest>(streamed_gguf_manifest(*model, slices));
  if (c.n_moe_layers() > 0) sizes.bytes_per_expert = sizes.expert_bytes / (c.n_moe_layers() * c.n_expert);
  // Resident experts may mix types (a GGUF Q4_K_M file): the model's expert type is the one that
  // holds the most bytes.
  int64_t most = 0;
  for (const auto& [type, bytes] : expert_type_bytes)
    if (bytes > most) std::tie(sizes.expert_dtype, most) = std::pair(type, bytes);
  return model;
}

}  // namespace chronos
