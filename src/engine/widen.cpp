// widen_model: zero-pads the routed experts of a checkpoint to a larger FFN size, writing a new
// Hugging Face folder (single file or transformers-style shards) atomically.
#include "chronos/widen.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "chronos/error.h"
#include "chronos/file_util.h"
#include "chronos/model.h"
#include "chronos/safetensors.h"
#include "model/arch/arch.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

// Files that describe the tokenizer, generation defaults or the license: copied verbatim.
// Weights in other formats (pytorch_model.bin, ...) are not: they would keep the old shapes.
bool is_companion_file(const std::string& name) {
  static const char* const kExact[] = {
      "generation_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt",
      "chat_template.jinja",    "chat_template.json"};
  for (const char* exact : kExact)
    if (name == exact) return true;
  return name.starts_with("tokenizer") || name.starts_with("LICENSE") || name.starts_with("NOTICE");
}

// One output tensor: copied from the source, or widened (`role` is an expert projection).
struct PlannedTensor {
  const TensorInfo* source;
  TensorRole role;  // kTokenEmbd stands for "not widened"
  std::vector<int64_t> shape;
  int64_t bytes = 0;
};

bool is_widened(TensorRole role) {
  return role == TensorRole::kExpertGate || role == TensorRole::kExpertUp || role == TensorRole::kExpertDown;
}

// [I, H] -> [N, H]: the source rows, then zero rows. [H, I] -> [H, N]: each row, then zeros.
std::vector<std::byte> widen_tensor(const PlannedTensor& t) {
  std::vector<std::byte> out(size_t(t.bytes));  // zero-filled
  const TensorInfo& s = *t.source;
  if (t.role == TensorRole::kExpertDown) {
    const int64_t src_row = s.shape[1] * dtype_size(s.dtype);
    const int64_t dst_row = t.shape[1] * dtype_size(s.dtype);
    for (int64_t r = 0; r < s.shape[0]; ++r)
      std::memcpy(out.data() + r * dst_row, s.data + r * src_row, size_t(src_row));
  } else {
    std::memcpy(out.data(), s.data, size_t(s.n_bytes));
  }
  return out;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error("{}: cannot open", path.string());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) throw_error("{}: write failed", path.string());
}

// Removes the temporary folder unless release() was called: a failed run leaves nothing.
class TempDir {
 public:
  explicit TempDir(fs::path path) : path_(std::move(path)) {}
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  void release() { path_.clear(); }

 private:
  fs::path path_;
};

}  // namespace

WidenResult widen_model(const fs::path& model_dir, const fs::path& out_dir, const WidenOptions& options) {
  // Model::load validates every tensor against the architecture's table (names, dtypes, shapes).
  const auto model = Model::load(model_dir);
  const ModelConfig& cfg = model->config();
  WidenResult result;
  result.old_expert_ffn = cfg.n_ff_expert;
  if (arch_spec(cfg.arch).expert_ffn_key == nullptr)
    throw UsageError(fmt::format(
        "{}: {} experts cannot be widened ({})", model_dir.string(), cfg.arch_name(),
        cfg.expert_bias ? "they are fused per layer, with biases" : "its shared experts' width follows theirs"));
  if (options.expert_ffn <= cfg.n_ff_expert)
    throw UsageError(fmt::format("--expert-ffn {} must be larger than the expert FFN size {} of {}", options.expert_ffn,
                                 cfg.n_ff_expert, model_dir.string()));
  if (options.max_shard_bytes <= 0) throw UsageError("the maximum shard size must be positive");
  std::error_code ec;
  if (fs::exists(out_dir, ec)) throw_error("{}: already exists; give a new folder", out_dir.string());
  const fs::path parent = out_dir.has_parent_path() ? out_dir.parent_path() : fs::path(".");
  if (!fs::is_directory(parent, ec)) throw_error("{}: no such folder", parent.string());

  std::map<std::string, TensorRole, std::less<>> roles;
  for (const TensorSpec& spec : arch_spec(cfg.arch).tensor_table(cfg))
    if (is_widened(spec.role)) roles.emplace(spec.name, spec.role);

  const TensorStore store = TensorStore::open(model_dir);
  std::vector<PlannedTensor> planned;
  for (const TensorInfo* tensor : store.all()) {
    // A block type (MXFP4 from a *_blocks / *_scales pair) has no per-element size to pad rows with.
    if (dtype_is_block(tensor->dtype))
      throw_error("{}: tensor {}: {} weights cannot be widened (F32, F16 or BF16 only)", tensor->file, tensor->name,
                  dtype_name(tensor->dtype));
    PlannedTensor t{tensor, TensorRole::kTokenEmbd, tensor->shape, tensor->n_bytes};
    if (const auto it = roles.find(tensor->name); it != roles.end()) {
      t.role = it->second;
      t.shape[t.role == TensorRole::kExpertDown ? 1 : 0] = options.expert_ffn;
      t.bytes = t.shape[0] * t.shape[1] * dtype_size(tensor->dtype);
      ++result.n_widened;
    }
    result.total_bytes += t.bytes;
    planned.push_back(std::move(t));
  }
  result.n_tensors = int64_t(planned.size());

  // Shards in name order, as transformers fills them: a new one when the next tensor would not fit.
  std::vector<std::vector<const PlannedTensor*>> shards(1);
  int64_t shard_bytes = 0;
  for (const PlannedTensor& t : planned) {
    if (result.total_bytes > options.max_shard_bytes && !shards.back().empty() &&
        shard_bytes + t.bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(&t);
    shard_bytes += t.bytes;
  }
  result.n_shards = int64_t(shards.size());

  TempDir temp(make_temp_dir_beside(out_dir));

  int64_t done = 0;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = shards.size() == 1 ? std::string("model.safetensors")
                                                : fmt::format("model-{:05}-of-{:05}.safetensors", i + 1, shards.size());
    std::vector<std::vector<std::byte>> buffers;  // widened tensors of this shard only
    std::vector<TensorToWrite> tensors;
    for (const PlannedTensor* t : shards[i]) {
      std::span<const std::byte> bytes(t->source->data, size_t(t->source->n_bytes));
      if (is_widened(t->role)) {
        buffers.push_back(widen_tensor(*t));
        bytes = buffers.back();
      }
      tensors.push_back({t->source->name, t->source->dtype, t->shape, bytes});
      weight_map[t->source->name] = file;
      done += t->bytes;
      if (options.progress) options.progress(done, 2 * result.total_bytes);
    }
    write_safetensors(temp.path() / file, tensors, {{"format", "pt"}});
    for (const PlannedTensor* t : shards[i]) done += t->bytes;
    if (options.progress) options.progress(done, 2 * result.total_bytes);
  }
  if (shards.size() > 1) {
    const nlohmann::ordered_json index = {{"metadata", {{"total_size", result.total_bytes}}},
                                          {"weight_map", weight_map}};
    write_text(temp.path() / "model.safetensors.index.json", index.dump(2) + "\n");
  }

  nlohmann::ordered_json config = nlohmann::ordered_json::parse(read_text(model_dir / "config.json"));
  config[arch_spec(cfg.arch).expert_ffn_key] = options.expert_ffn;
  write_text(temp.path() / "config.json", config.dump(2) + "\n");
  for (const auto& entry : fs::directory_iterator(model_dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && is_companion_file(name)) {
      fs::copy_file(entry.path(), temp.path() / name, ec);
      if (ec) throw_error("{}: cannot copy to {}: {}", entry.path().string(), temp.path().string(), ec.message());
    }
  }

  fs::rename(temp.path(), out_dir, ec);
  if (ec) throw_error("{}: cannot rename {} into place: {}", out_dir.string(), temp.path().string(), ec.message());
  temp.release();
  return result;
}

}  // namespace chronos
