// cluster_manifest.json: reading (checked field by field against the .ctsr files), writing, and
// the model fingerprint that ties packs and traces to the checkpoint they came from.
#include <fmt/ranges.h>
#include <xxhash.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "chronos/error.h"
#include "chronos/file_util.h"
#include "chronos/pack_format.h"
#include "chronos/safetensors.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr const char* kFormat = "chronos-cluster-manifest";
constexpr int64_t kVersion = 1;

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// Whether a tensor of `dtype` belongs to a pack whose expert type is `expert_type`: the same type,
// or for a block type on rows it does not fit, the type block_dtype_for_row falls back to.
bool expert_dtype_matches(DType dtype, const std::string& expert_type, const std::vector<int64_t>& shape) {
  if (dtype_name(dtype) == expert_type) return true;
  const auto wanted = block_dtype_from_name(expert_type);
  if (!wanted || !dtype_is_block(dtype) || shape.size() != 2 || shape[1] % 32 != 0) return false;
  return block_dtype_for_row(*wanted, shape[1]) == dtype;
}

// Typed accessors whose errors name the manifest and the JSON path of the bad value.
class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw_error("{}: {}: {}", file_, where, what);
  }
  const Json& member(const Json& object, const std::string& where, const char* key) const {
    if (!object.is_object()) fail(where, "not a JSON object");
    const auto it = object.find(key);
    if (it == object.end()) fail(where, fmt::format("missing key \"{}\"", key));
    return *it;
  }
  std::string string(const Json& object, const std::string& where, const char* key) const {
    const Json& value = member(object, where, key);
    if (!value.is_string()) fail(where + "." + key, "not a string");
    return value.get<std::string>();
  }
  int64_t integer(const Json& value, const std::string& where) const {
    if (!value.is_number_integer()) fail(where, "not an integer");
    if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(INT64_MAX)) fail(where, "out of range");
    const int64_t result = value.get<int64_t>();
    if (result < 0) fail(where, fmt::format("{} is negative", result));
    return result;
  }
  int64_t integer(const Json& object, const std::string& where, const char* key) const {
    return integer(member(object, where, key), where + "." + key);
  }
  int32_t small(const Json& value, const std::string& where) const {
    const int64_t result = integer(value, where);
    if (result > INT32_MAX) fail(where, fmt::format("{} is out of range", result));
    return int32_t(result);
  }

 private:
  std::string file_;
};

ExpertKey parse_key(const Reader& r, const std::string& text) {
  const auto dot = text.find('.');
  ExpertKey key{-1, -1};
  const auto parse = [&](std::string_view part, int32_t& out) {
    const auto result = std::from_chars(part.data(), part.data() + part.size(), out);
    return !part.empty() && result.ec == std::errc() && result.ptr == part.data() + part.size() && out >= 0;
  };
  if (dot == std::string::npos || !parse(std::string_view(text).substr(0, dot), key.layer) ||
      !parse(std::string_view(text).substr(dot + 1), key.expert))
    r.fail("experts", fmt::format("key \"{}\" is not \"layer.expert\"", text));
  return key;
}

PackedTensor parse_tensor(const Reader& r, const Json& tensors, const std::string& where, const char* name) {
  const std::string at = where + ".tensors." + name;
  const Json& json = r.member(tensors, where + ".tensors", name);
  PackedTensor tensor;
  tensor.offset = r.integer(json, at, "offset");
  const Json& shape = r.member(json, at, "shape");
  if (!shape.is_array() || shape.empty()) r.fail(at + ".shape", "not a non-empty array");
  int64_t elements = 1;
  for (const Json& dim : shape) {
    tensor.shape.push_back(r.integer(dim, at + ".shape"));
    if (tensor.shape.back() == 0 || __builtin_mul_overflow(elements, tensor.shape.back(), &elements) ||
        elements > (int64_t(1) << 48))
      r.fail(at + ".shape", fmt::format("{} is not a valid expert shape", shape.dump()));
  }
  const std::string dtype = r.string(json, at, "dtype");
  auto parsed = dtype_from_name(dtype);
  if (!parsed) parsed = block_dtype_from_name(dtype);
  if (!parsed) r.fail(at + ".dtype", fmt::format("unknown dtype \"{}\"", dtype));
  tensor.dtype = *parsed;
  if (dtype_is_block(tensor.dtype)) {
    // Rows of whole blocks: [rows, cols] with cols a multiple of the block.
    if (tensor.shape.size() != 2 || tensor.shape[1] % dtype_block_elements(tensor.dtype) != 0)
      r.fail(at + ".shape", fmt::format("{} is not a matrix of whole {} blocks", shape.dump(), dtype));
    tensor.bytes = tensor.shape[0] * dtype_row_bytes(tensor.dtype, tensor.shape[1]);
  } else {
    tensor.bytes = elements * dtype_size(tensor.dtype);
  }
  return tensor;
}

uint64_t parse_hash(const Reader& r, const Json& json, const std::string& where) {
  const std::string text = r.string(json, where, "xxh64");
  uint64_t value = 0;
  const auto result = std::from_chars(text.data(), text.data() + text.size(), value, 16);
  if (text.size() != 16 || result.ec != std::errc() || result.ptr != text.data() + text.size())
    r.fail(where + ".xxh64", fmt::format("\"{}\" is not 16 hex digits", text));
  return value;
}

// An entry of "experts" (or of "lowbit.experts"), without its cluster.
PackedExpert parse_expert(const Reader& r, const std::string& text, const Json& json, const std::string& where,
                          int64_t num_experts) {
  PackedExpert expert;
  expert.key = parse_key(r, text);
  if (expert.key.expert >= num_experts)
    r.fail(where, fmt::format("expert {} out of range (num_experts {})", expert.key.expert, num_experts));
  expert.offset = r.integer(json, where, "offset");
  expert.bytes = r.integer(json, where, "bytes");
  expert.xxh64 = parse_hash(r, json, where);
  const Json& tensors = r.member(json, where, "tensors");
  expert.gate = parse_tensor(r, tensors, where, "gate");
  expert.up = parse_tensor(r, tensors, where, "up");
  expert.down = parse_tensor(r, tensors, where, "down");
  return expert;
}

// A plain file name inside the pack folder; other paths would let a manifest point anywhere.
void check_plain_file_name(const Reader& r, const std::string& name, const std::string& where) {
  const fs::path file(name);
  if (file.empty() || file.has_parent_path() || file == "." || file == "..")
    r.fail(where, fmt::format("\"{}\" is not a plain file name", name));
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error("{}: cannot open", path.string());
  std::stringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) throw_error("{}: read failed", path.string());
  return text.str();
}

// Checks one cluster file (or the low-bit copies' file) against the manifest entries that point
// into it: `experts` holds them, `accepts` says which tensor types they may have, `dtype` names them.
void check_cluster_file(const fs::path& dir, const std::string& fingerprint, const PackCluster& cluster,
                        const std::map<ExpertKey, PackedExpert>& experts, const std::string& dtype,
                        const std::function<bool(DType, const std::vector<int64_t>&)>& accepts) {
  const fs::path path = dir / cluster.file;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw_error("{}: cluster {}: file is missing", path.string(), cluster.id);
  const auto size = fs::file_size(path, ec);
  if (ec) throw_error("{}: cannot read its size: {}", path.string(), ec.message());
  if (int64_t(size) != cluster.bytes)
    throw_error("{}: file is {} bytes, the manifest says {} (truncated or replaced?)", path.string(), size,
                cluster.bytes);
  const auto file = SafetensorsFile::open(path);
  const auto& meta = file->metadata();
  const auto meta_is = [&](const char* key, const std::string& expected) {
    const auto it = meta.find(key);
    if (it == meta.end() || it->second != expected)
      throw_error("{}: __metadata__ \"{}\" is \"{}\", expected \"{}\"", path.string(), key,
                  it == meta.end() ? "(absent)" : it->second, expected);
  };
  meta_is("format", "ctsr");
  meta_is("version", "1");
  meta_is("cluster", std::to_string(cluster.id));
  meta_is("fingerprint", fingerprint);

  std::set<std::string> expected_names;
  std::vector<const PackedExpert*> extents;
  for (const ExpertKey& key : cluster.experts) {
    const PackedExpert& expert = experts.at(key);
    const std::string who = fmt::format("{}: layer {} expert {}", path.string(), key.layer, key.expert);
    if (expert.offset % kCtsrAlignment != 0 || expert.bytes % kCtsrAlignment != 0)
      throw_error("{}: extent [{}, +{}) is not {}-aligned", who, expert.offset, expert.bytes, kCtsrAlignment);
    if (expert.bytes < expert.payload_bytes() || expert.bytes - expert.payload_bytes() >= kCtsrAlignment)
      throw_error("{}: extent of {} bytes does not hold its {} tensor bytes padded to {}", who, expert.bytes,
                  expert.payload_bytes(), kCtsrAlignment);
    if (expert.offset < 0 || expert.offset > cluster.bytes - expert.bytes)  // no overflow: both in [0, 2^63)
      throw_error("{}: extent [{}, +{}) runs past the end of the {}-byte file", who, expert.offset, expert.bytes,
                  cluster.bytes);
    int64_t next = expert.offset;  // gate, up, down are back to back from the extent's start
    for (const auto& [projection, packed] :
         {std::pair{"gate", &expert.gate}, std::pair{"up", &expert.up}, std::pair{"down", &expert.down}}) {
      const std::string name = ctsr_tensor_name(key, projection);
      expected_names.insert(name);
      const TensorInfo* tensor = file->find(name);
      if (tensor == nullptr) throw_error("{}: tensor {} is not in the file", who, name);
      if (packed->offset != next)
        throw_error("{}: tensor {} at offset {} in the manifest, expected {} (adjacent to the previous one)", who,
                    projection, packed->offset, next);
      if (tensor->file_offset != packed->offset)
        throw_error("{}: tensor {} at offset {} in the manifest, {} in the file", who, projection, packed->offset,
                    tensor->file_offset);
      // A block-quantized tensor is U8 [bytes] in the file; its type and shape are the manifest's.
      const bool block = dtype_is_block(packed->dtype);
      const std::vector<int64_t> file_shape = block ? std::vector<int64_t>{packed->bytes} : packed->shape;
      const DType file_dtype = block ? DType::kU8 : packed->dtype;
      if (tensor->shape != file_shape)
        throw_error("{}: tensor {} has shape {} in the manifest, {} in the file", who, projection,
                    shape_string(file_shape), shape_string(tensor->shape));
      if (tensor->dtype != file_dtype)
        throw_error("{}: tensor {} has dtype {} in the manifest, {} in the file", who, projection,
                    dtype_name(file_dtype), dtype_name(tensor->dtype));
      if (!accepts(packed->dtype, packed->shape))
        throw_error("{}: tensor {} is {}, the manifest's expert type is {}", who, projection, dtype_name(packed->dtype),
                    dtype);
      next += packed->bytes;
    }
    extents.push_back(&expert);
  }
  std::sort(extents.begin(), extents.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < extents.size(); ++i)
    if (extents[i - 1]->offset + extents[i - 1]->bytes > extents[i]->offset)
      throw_error("{}: extents of layer {} expert {} and layer {} expert {} overlap", path.string(),
                  extents[i - 1]->key.layer, extents[i - 1]->key.expert, extents[i]->key.layer, extents[i]->key.expert);
  for (const TensorInfo& tensor : file->tensors())
    if (tensor.name.rfind("__pad.", 0) != 0 && !expected_names.contains(tensor.name))
      throw_error("{}: tensor {} is not in the manifest", path.string(), tensor.name);
}

// The "lowbit" object of a manifest or of a lowbit.json: a copy of each of `m`'s experts, with the
// experts' shapes, in a file that is not one of `cluster_files`.
LowbitCopies parse_lowbit(const Reader& r, const Json& json, const std::string& at, const PackManifest& m,
                          const std::set<std::string>& cluster_files) {
  LowbitCopies lowbit;
  lowbit.file = r.string(json, at, "file");
  check_plain_file_name(r, lowbit.file, at + ".file");
  if (cluster_files.contains(lowbit.file)) r.fail(at + ".file", fmt::format("{} is also a cluster file", lowbit.file));
  lowbit.bytes = r.integer(json, at, "bytes");
  lowbit.dtype = r.string(json, at, "dtype");
  if (!dtype_from_name(lowbit.dtype) && !block_dtype_from_name(lowbit.dtype))
    r.fail(at + ".dtype", fmt::format("unknown dtype \"{}\"", lowbit.dtype));
  const Json& copies = r.member(json, at, "experts");
  if (!copies.is_object()) r.fail(at + ".experts", "not a JSON object");
  for (const auto& [text, entry] : copies.items()) {
    const std::string where = at + ".experts." + text;
    PackedExpert expert = parse_expert(r, text, entry, where, m.num_experts);
    expert.cluster = kLowbitClusterId;
    const auto full = m.experts.find(expert.key);
    if (full == m.experts.end()) r.fail(where, "no such expert in \"experts\"");
    if (expert.gate.shape != full->second.gate.shape || expert.up.shape != full->second.up.shape ||
        expert.down.shape != full->second.down.shape)
      r.fail(where, "shapes differ from the expert's");
    if (!lowbit.experts.emplace(expert.key, expert).second) r.fail(where, "listed twice");
  }
  if (lowbit.experts.size() != m.experts.size())
    r.fail(at + ".experts", fmt::format("{} copies for {} experts", lowbit.experts.size(), m.experts.size()));
  return lowbit;
}

// The low-bit copies' .ctsr file against their entries, as a cluster file.
void check_lowbit_file(const fs::path& dir, const std::string& fingerprint, const LowbitCopies& lowbit) {
  PackCluster file{kLowbitClusterId, lowbit.file, lowbit.bytes, {}, {}};
  for (const auto& [key, expert] : lowbit.experts) file.experts.push_back(key);
  check_cluster_file(
      dir, fingerprint, file, lowbit.experts, lowbit.dtype,
      [&lowbit](DType t, const std::vector<int64_t>& shape) { return expert_dtype_matches(t, lowbit.dtype, shape); });
}

Json tensor_json(const PackedTensor& t) {
  return Json{{"offset", t.offset}, {"shape", t.shape}, {"dtype", std::string(dtype_name(t.dtype))}};
}

Json expert_json(const PackedExpert& e) {
  return Json{
      {"offset", e.offset},
      {"bytes", e.bytes},
      {"xxh64", fmt::format("{:016x}", e.xxh64)},
      {"tensors", Json{{"gate", tensor_json(e.gate)}, {"up", tensor_json(e.up)}, {"down", tensor_json(e.down)}}}};
}

Json lowbit_json(const LowbitCopies& lowbit) {
  Json copies = Json::object();
  for (const auto& [key, e] : lowbit.experts) copies[fmt::format("{}.{}", key.layer, key.expert)] = expert_json(e);
  return Json{{"file", lowbit.file}, {"bytes", lowbit.bytes}, {"dtype", lowbit.dtype}, {"experts", std::move(copies)}};
}

constexpr const char* kLowbitFormat = "chronos-lowbit-copies";

// A JSON file of ours: an object whose "format" and "version" are checked.
Json read_header(const Reader& r, const fs::path& path, const char* format) {
  Json root;
  try {
    root = Json::parse(read_text(path));
  } catch (const nlohmann::json::exception& e) {
    throw_error("{}: not valid JSON: {}", path.string(), e.what());
  }
  if (!root.is_object()) r.fail("(top level)", "not a JSON object");
  if (r.string(root, "(top level)", "format") != format) r.fail("format", fmt::format("expected \"{}\"", format));
  if (const int64_t version = r.integer(root, "(top level)", "version"); version != kVersion)
    r.fail("version", fmt::format("version {} is not supported (this build reads {})", version, kVersion));
  return root;
}

}  // namespace

void save_lowbit_sidecar(const LowbitCopies& lowbit, const std::string& fingerprint, const fs::path& dir) {
  Json root;
  root["format"] = kLowbitFormat;
  root["version"] = kVersion;
  root["fingerprint"] = fingerprint;
  root["lowbit"] = lowbit_json(lowbit);
  write_file_atomically(dir / kLowbitSidecarFileName, root.dump(1) + "\n");
}

LowbitCopies load_lowbit_sidecar(const fs::path& dir, const PackManifest& m) {
  const fs::path path = dir / kLowbitSidecarFileName;
  if (!fs::exists(path))
    throw_error("{}: no low-bit copies here (chronos pack -m FILE.gguf --lowbit-type q2_k --lowbit-only -o {})",
                path.string(), dir.string());
  const Reader r(path.string());
  const Json root = read_header(r, path, kLowbitFormat);
  const std::string fingerprint = r.string(root, "(top level)", "fingerprint");
  if (fingerprint != m.fingerprint)
    throw_error("{}: copies of another model (fingerprint {}, this model's is {})", path.string(), fingerprint,
                m.fingerprint);
  LowbitCopies lowbit = parse_lowbit(r, r.member(root, "(top level)", "lowbit"), "lowbit", m, {});
  check_lowbit_file(dir, m.fingerprint, lowbit);
  return lowbit;
}

PackManifest PackManifest::load(const fs::path& dir) {
  PackManifest m = parse(dir);
  const std::string types = m.dtypes.empty() ? m.dtype : fmt::format("{}", fmt::join(m.dtypes, "/"));
  for (const PackCluster& cluster : m.clusters)
    check_cluster_file(dir, m.fingerprint, cluster, m.experts, types,
                       [&m](DType t, const std::vector<int64_t>& shape) { return m.accepts_expert_dtype(t, shape); });
  if (m.lowbit) check_lowbit_file(dir, m.fingerprint, *m.lowbit);
  return m;
}

PackManifest PackManifest::parse(const fs::path& dir) {
  const fs::path path = dir / kManifestFileName;
  const Reader r(path.string());
  const Json root = read_header(r, path, kFormat);

  PackManifest m;
  const Json& model = r.member(root, "(top level)", "model");
  m.architecture = r.string(model, "model", "architecture");
  m.num_moe_layers = r.integer(model, "model", "num_moe_layers");
  m.num_experts = r.integer(model, "model", "num_experts");
  m.dtype = r.string(model, "model", "dtype");
  if (!dtype_from_name(m.dtype) && !block_dtype_from_name(m.dtype))
    r.fail("model.dtype", fmt::format("unknown dtype \"{}\"", m.dtype));
  if (model.contains("dtypes")) {
    const Json& types = model["dtypes"];
    if (!types.is_array() || types.empty()) r.fail("model.dtypes", "not a non-empty array of type names");
    for (size_t i = 0; i < types.size(); ++i) {
      const std::string where = fmt::format("model.dtypes[{}]", i);
      if (!types[i].is_string()) r.fail(where, "not a string");
      const std::string name = types[i].get<std::string>();
      if (!dtype_from_name(name) && !block_dtype_from_name(name))
        r.fail(where, fmt::format("unknown dtype \"{}\"", name));
      m.dtypes.push_back(name);
    }
  }
  m.fingerprint = r.string(model, "model", "fingerprint");
  if (model.contains("config_fingerprint")) m.config_fingerprint = r.string(model, "model", "config_fingerprint");
  const Json& clustering = r.member(root, "(top level)", "clustering");
  m.clustering_method = r.string(clustering, "clustering", "method");
  m.clustering_trace = r.string(clustering, "clustering", "trace");
  const Json& seed = r.member(clustering, "clustering", "seed");
  if (!seed.is_number_unsigned()) r.fail("clustering.seed", "not a non-negative integer");
  m.clustering_seed = seed.get<uint64_t>();

  const Json& experts = r.member(root, "(top level)", "experts");
  if (!experts.is_object()) r.fail("experts", "not a JSON object");
  std::set<int32_t> layers;
  for (const auto& [text, json] : experts.items()) {
    const std::string where = "experts." + text;
    PackedExpert expert = parse_expert(r, text, json, where, m.num_experts);
    expert.cluster = r.small(r.member(json, where, "cluster"), where + ".cluster");
    layers.insert(expert.key.layer);
    if (!m.experts.emplace(expert.key, expert).second) r.fail(where, "listed twice");
  }
  if (int64_t(layers.size()) > m.num_moe_layers)
    r.fail("experts", fmt::format("experts of {} layers, num_moe_layers is {}", layers.size(), m.num_moe_layers));

  const Json& clusters = r.member(root, "(top level)", "clusters");
  if (!clusters.is_array()) r.fail("clusters", "not an array");
  std::set<int32_t> ids;
  std::set<std::string> files;
  std::map<ExpertKey, int32_t> placed;
  for (size_t i = 0; i < clusters.size(); ++i) {
    const std::string where = fmt::format("clusters[{}]", i);
    const Json& json = clusters[i];
    PackCluster cluster;
    cluster.id = r.small(r.member(json, where, "id"), where + ".id");
    cluster.file = r.string(json, where, "file");
    check_plain_file_name(r, cluster.file, where + ".file");
    cluster.bytes = r.integer(json, where, "bytes");
    if (!ids.insert(cluster.id).second) r.fail(where + ".id", fmt::format("cluster id {} used twice", cluster.id));
    if (!files.insert(cluster.file).second) r.fail(where + ".file", fmt::format("{} used twice", cluster.file));
    const Json& list = r.member(json, where, "experts");
    if (!list.is_array()) r.fail(where + ".experts", "not an array");
    for (const Json& pair : list) {
      if (!pair.is_array() || pair.size() != 2)
        r.fail(where + ".experts", fmt::format("{} is not [l, e]", pair.dump()));
      const ExpertKey key{r.small(pair[0], where + ".experts"), r.small(pair[1], where + ".experts")};
      const auto it = m.experts.find(key);
      if (it == m.experts.end())
        r.fail(where + ".experts",
               fmt::format("layer {} expert {} has no entry in \"experts\"", key.layer, key.expert));
      if (it->second.cluster != cluster.id)
        r.fail(where + ".experts", fmt::format("layer {} expert {} is listed here but its entry names cluster {}",
                                               key.layer, key.expert, it->second.cluster));
      if (!placed.emplace(key, cluster.id).second)
        r.fail(where + ".experts", fmt::format("layer {} expert {} listed twice", key.layer, key.expert));
      cluster.experts.push_back(key);
    }
    m.clusters.push_back(std::move(cluster));
  }
  for (const auto& [key, expert] : m.experts)
    if (!placed.contains(key))
      r.fail(fmt::format("experts.{}.{}", key.layer, key.expert),
             fmt::format("cluster {} does not list this expert", expert.cluster));

  if (root.contains("lowbit"))  // one copy of every routed expert, in a file of its own
    m.lowbit = parse_lowbit(r, root["lowbit"], "lowbit", m, files);
  return m;
}

void PackManifest::save(const fs::path& path) const {
  Json root;
  root["format"] = kFormat;
  root["version"] = kVersion;
  root["model"] = Json{{"architecture", architecture},
                       {"num_moe_layers", num_moe_layers},
                       {"num_experts", num_experts},
                       {"dtype", dtype},
                       {"fingerprint", fingerprint}};
  if (!config_fingerprint.empty()) root["model"]["config_fingerprint"] = config_fingerprint;
  if (!dtypes.empty()) root["model"]["dtypes"] = dtypes;
  root["clustering"] = Json{{"method", clustering_method}, {"trace", clustering_trace}, {"seed", clustering_seed}};
  root["clusters"] = Json::array();
  for (const PackCluster& cluster : clusters) {
    Json list = Json::array();
    for (const ExpertKey& key : cluster.experts) list.push_back({key.layer, key.expert});
    root["clusters"].push_back(
        Json{{"id", cluster.id}, {"file", cluster.file}, {"bytes", cluster.bytes}, {"experts", std::move(list)}});
  }
  root["experts"] = Json::object();
  for (const auto& [key, e] : experts) {
    Json entry = expert_json(e);
    entry["cluster"] = e.cluster;
    root["experts"][fmt::format("{}.{}", key.layer, key.expert)] = std::move(entry);
  }
  if (lowbit) root["lowbit"] = lowbit_json(*lowbit);
  write_file_atomically(path, root.dump(1) + "\n");
}

bool PackManifest::accepts_expert_dtype(DType type, const std::vector<int64_t>& shape) const {
  if (expert_dtype_matches(type, dtype, shape)) return true;
  return std::any_of(dtypes.begin(), dtypes.end(),
                     [&](const std::string& name) { return expert_dtype_matches(type, name, shape); });
}

std::string config_fingerprint(const fs::path& config_path) {
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(read_text(config_path));
  } catch (const nlohmann::json::exception&) {
    throw_error("{}: not valid JSON", config_path.string());
  }
  const std::string text = config.dump();  // canonical: sorted keys, no whitespace
  return fmt::format("{:016x}", XXH3_64bits(text.data(), text.size()));
}

std::string model_fingerprint(const fs::path& model_dir) {
  if (std::error_code ec; fs::exists(model_dir / kManifestFileName, ec)) {
    const fs::path path = model_dir / kManifestFileName;
    nlohmann::json root;
    try {
      root = nlohmann::json::parse(read_text(path));
    } catch (const nlohmann::json::exception&) {
      throw_error("{}: not valid JSON", path.string());
    }
    if (!root.is_object() || !root.contains("model") || !root["model"].is_object() ||
        !root["model"].contains("fingerprint") || !root["model"]["fingerprint"].is_string())
      throw_error("{}: no model.fingerprint string", path.string());
    return root["model"]["fingerprint"].get<std::string>();
  }
  const fs::path config_path = model_dir / "config.json";
  const TensorStore store = TensorStore::open(model_dir);
  const std::vector<const TensorInfo*> tensors = store.all();
  try {
    return model_fingerprint(read_text(config_path), tensors);
  } catch (const nlohmann::json::exception& e) {
    throw_error("{}: not valid JSON: {}", config_path.string(), e.what());
  }
}

std::string model_fingerprint(const std::string& config_json, std::span<const TensorInfo* const> tensors) {
  // nlohmann::json keeps object keys sorted, so dump() is canonical whatever the file's key order
  // or whitespace.
  std::string text = nlohmann::json::parse(config_json).dump();
  for (const TensorInfo* tensor : tensors)
    text += fmt::format("\n{} {} {}", tensor->name, dtype_name(tensor->dtype), shape_string(tensor->shape));
  const XXH128_hash_t hash = XXH3_128bits(text.data(), text.size());
  return fmt::format("{:016x}{:016x}", hash.high64, hash.low64);
}

}  // namespace chronos
