// predictors.safetensors and predictors.json: writing them, and reading them back with every
// shape and field checked.
#include "predict/pack.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/ranges.h>

#include "chronos/error.h"
#include "chronos/file_util.h"
#include "chronos/safetensors.h"

namespace chronos::predict {
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

std::span<const std::byte> bytes_of(const std::vector<float>& v) { return std::as_bytes(std::span(v)); }

void add_mlp(std::vector<TensorToWrite>& out, const std::string& prefix, const Mlp<float>& net,
             std::vector<std::vector<float>>& storage) {
  const auto part = [&](const char* name, std::vector<int64_t> shape, int64_t offset, int64_t count) {
    storage.emplace_back(net.params.begin() + offset, net.params.begin() + offset + count);
    out.push_back({prefix + name, DType::kF32, std::move(shape), bytes_of(storage.back())});
  };
  out.push_back({prefix + "input_mean", DType::kF32, {net.n_in}, bytes_of(net.in_mean)});
  out.push_back({prefix + "input_scale", DType::kF32, {net.n_in}, bytes_of(net.in_scale)});
  part("fc1.weight", {net.n_hidden, net.n_in}, net.w1_offset(), net.n_hidden * net.n_in);
  part("fc1.bias", {net.n_hidden}, net.b1_offset(), net.n_hidden);
  part("fc2.weight", {net.n_out, net.n_hidden}, net.w2_offset(), net.n_out * net.n_hidden);
  part("fc2.bias", {net.n_out}, net.b2_offset(), net.n_out);
}

// Copies a tensor that must be F32 with exactly `shape` into `out`.
void read_f32(const SafetensorsFile& file, const std::string& name, const std::vector<int64_t>& shape, float* out) {
  const TensorInfo* t = file.find(name);
  if (t == nullptr) throw_error("{}: tensor {} is missing", file.path().string(), name);
  if (t->dtype != DType::kF32) throw_error("{}: tensor {}: dtype is not F32", file.path().string(), name);
  if (t->shape != shape)
    throw_error("{}: tensor {}: shape [{}], expected [{}]", file.path().string(), name, fmt::join(t->shape, ","),
                fmt::join(shape, ","));
  std::memcpy(out, t->data, size_t(t->n_bytes));
}

void read_mlp(const SafetensorsFile& file, const std::string& prefix, Mlp<float>& net) {
  read_f32(file, prefix + "input_mean", {net.n_in}, net.in_mean.data());
  read_f32(file, prefix + "input_scale", {net.n_in}, net.in_scale.data());
  read_f32(file, prefix + "fc1.weight", {net.n_hidden, net.n_in}, net.params.data() + net.w1_offset());
  read_f32(file, prefix + "fc1.bias", {net.n_hidden}, net.params.data() + net.b1_offset());
  read_f32(file, prefix + "fc2.weight", {net.n_out, net.n_hidden}, net.params.data() + net.w2_offset());
  read_f32(file, prefix + "fc2.bias", {net.n_out}, net.params.data() + net.b2_offset());
}

}  // namespace

void save_pack(const PredictorPack& pack, const fs::path& dir) {
  const int64_t E = pack.shape.n_expert, L = pack.shape.n_moe_layers();
  CHRONOS_CHECK(pack.lookahead.n_out == std::ssize(pack.slots) * E && pack.intent.n_out == L * E);
  std::vector<std::vector<float>> storage;
  storage.reserve(8);  // add_mlp keeps spans into it: no reallocation
  std::vector<TensorToWrite> tensors;
  add_mlp(tensors, "lookahead.", pack.lookahead, storage);
  std::vector<int32_t> slots;
  for (const Slot& s : pack.slots) slots.insert(slots.end(), {s.horizon, s.moe_index});
  tensors.push_back({"lookahead.slots", DType::kI32, {std::ssize(pack.slots), 2}, std::as_bytes(std::span(slots))});
  add_mlp(tensors, "intent.", pack.intent, storage);
  if (!pack.frequency.empty())
    tensors.push_back({"stats.expert_frequency", DType::kF32, {L, E}, bytes_of(pack.frequency)});

  Json slots_json = Json::array();
  for (const Slot& s : pack.slots) slots_json.push_back({s.horizon, pack.shape.moe_layers[size_t(s.moe_index)]});
  Json root = {{"format", "chronos-predictors"}, {"version", kPredictorsVersion}};
  root["model"] = {{"fingerprint", pack.model_fingerprint},
                   {"n_embd", pack.shape.n_embd},
                   {"n_expert", pack.shape.n_expert},
                   {"n_expert_used", pack.shape.n_expert_used},
                   {"moe_layers", pack.shape.moe_layers}};
  root["lookahead"] = {
      {"architecture", "Linear(n_embd,rank) -> SiLU -> Linear(rank,n_slots*n_expert), softmax per slot"},
      {"input", "h0 (hidden state after block 0), standardized by lookahead.input_mean/input_scale"},
      {"horizon", pack.horizon},
      {"rank", pack.lookahead.n_hidden},
      {"slots", slots_json},
      {"params", pack.lookahead.n_params()},
      {"flops_per_token", pack.lookahead.forward_flops()}};
  root["intent"] = {
      {"architecture", "Linear(2*n_embd,hidden) -> SiLU -> Linear(hidden,n_moe_layers*n_expert), softmax per layer"},
      {"input", fmt::format("[mean, max] of h0 over the first {} prompt tokens, standardized", kMaxPromptTokens)},
      {"hidden", pack.intent.n_hidden},
      {"params", pack.intent.n_params()}};
  root["tensors"] = {
      {"lookahead.input_mean, lookahead.input_scale", "[n_embd] h0 standardization: (h0 - mean) * scale"},
      {"lookahead.fc1.weight, lookahead.fc1.bias", "[rank, n_embd], [rank]"},
      {"lookahead.fc2.weight, lookahead.fc2.bias",
       "[n_slots * n_expert, rank], [n_slots * n_expert]; block s is slot s"},
      {"lookahead.slots", "[n_slots, 2] I32: (horizon, position in moe_layers) of each output block"},
      {"intent.input_mean, intent.input_scale", "[2 * n_embd] pooled-feature standardization"},
      {"intent.fc1.weight, intent.fc1.bias", "[hidden, 2 * n_embd], [hidden]"},
      {"intent.fc2.weight, intent.fc2.bias", "[n_moe_layers * n_expert, hidden], [n_moe_layers * n_expert]"},
      {"stats.expert_frequency", "[n_moe_layers, n_expert] share of top-k selections in the training split"}};
  for (const auto& [key, value] : pack.training.items()) root[key] = value;

  fs::create_directories(dir);
  write_file_atomically(dir / kPredictorsJson, root.dump(2) + "\n");
  write_safetensors(dir / kPredictorsTensors, tensors,
                    {{"format", "chronos-predictors"}, {"version", std::to_string(kPredictorsVersion)}});
}

std::unique_ptr<PredictorPack> load_pack(const fs::path& dir) {
  const fs::path tensors_path = dir / kPredictorsTensors, json_path = dir / kPredictorsJson;
  if (std::error_code ec; !fs::exists(tensors_path, ec)) return nullptr;
  std::ifstream in(json_path);
  if (!in) throw_error("{}: missing (it belongs with {})", json_path.string(), tensors_path.string());
  std::stringstream text;
  text << in.rdbuf();
  auto pack = std::make_unique<PredictorPack>();
  const std::string where = json_path.string();
  // Every value is checked for its kind and range here, so a crafted file is one named error,
  // never an undefined conversion or an allocation sized by an untrusted number.
  const auto member = [&](const Json& object, const char* key, const char* parent) -> const Json& {
    if (!object.is_object() || !object.contains(key))
      throw_error("{}: missing key '{}{}{}'", where, parent, *parent != 0 ? "." : "", key);
    return object[key];
  };
  const auto integer = [&](const Json& value, const std::string& name, int64_t lo, int64_t hi) {
    if (!value.is_number_integer()) throw_error("{}: {} is not an integer", where, name);
    if ((value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(hi)) || value.get<int64_t>() < lo ||
        value.get<int64_t>() > hi)
      throw_error("{}: {} = {} is out of range [{}, {}]", where, name, value.dump(), lo, hi);
    return int32_t(value.get<int64_t>());
  };
  constexpr int64_t kMaxWidth = int64_t(1) << 20;
  int32_t rank = 0, hidden = 0;
  try {
    const Json root = Json::parse(text.str());
    const Json& format = member(root, "format", "");
    if (!format.is_string() || format.get<std::string>() != "chronos-predictors")
      throw_error("{}: format is not chronos-predictors", where);
    if (integer(member(root, "version", ""), "version", 0, 1 << 20) != kPredictorsVersion)
      throw_error("{}: version {} is not supported (expected {})", where, root["version"].dump(), kPredictorsVersion);
    const Json& model = member(root, "model", "");
    const Json& fingerprint = member(model, "fingerprint", "model");
    if (!fingerprint.is_string()) throw_error("{}: model.fingerprint is not a string", where);
    pack->model_fingerprint = fingerprint.get<std::string>();
    pack->shape.n_embd = integer(member(model, "n_embd", "model"), "model.n_embd", 1, kMaxWidth);
    pack->shape.n_expert = integer(member(model, "n_expert", "model"), "model.n_expert", 1, 65536);
    pack->shape.n_expert_used =
        integer(member(model, "n_expert_used", "model"), "model.n_expert_used", 1, pack->shape.n_expert);
    const Json& layers = member(model, "moe_layers", "model");
    if (!layers.is_array() || layers.empty() || layers.size() > 4096)
      throw_error("{}: model.moe_layers is not a list of 1 to 4096 layers", where);
    for (const Json& layer : layers) pack->shape.moe_layers.push_back(integer(layer, "model.moe_layers[]", 0, 4095));
    const Json& lookahead = member(root, "lookahead", "");
    pack->horizon = integer(member(lookahead, "horizon", "lookahead"), "lookahead.horizon", 0, 64);
    rank = integer(member(lookahead, "rank", "lookahead"), "lookahead.rank", 1, kMaxWidth);
    hidden = integer(member(member(root, "intent", ""), "hidden", "intent"), "intent.hidden", 1, kMaxWidth);
    for (const char* key : {"training", "heldout"})
      if (root.contains(key)) pack->training[key] = root[key];
    pack->slots = lookahead_slots(pack->shape, pack->horizon);
    const Json& slots = member(lookahead, "slots", "lookahead");
    if (!slots.is_array() || slots.size() != pack->slots.size())
      throw_error("{}: lookahead.slots has {} entries, expected {}", where, slots.is_array() ? slots.size() : 0,
                  pack->slots.size());
    for (size_t i = 0; i < slots.size(); ++i) {
      if (!slots[i].is_array() || slots[i].size() != 2) throw_error("{}: lookahead.slots[{}] is not a pair", where, i);
      if (integer(slots[i][0], "lookahead.slots[]", 0, 64) != pack->slots[i].horizon ||
          integer(slots[i][1], "lookahead.slots[]", 0, 4095) !=
              pack->shape.moe_layers[size_t(pack->slots[i].moe_index)])
        throw_error("{}: lookahead.slots[{}] is {}, not in the expected order", where, i, slots[i].dump());
    }
  } catch (const Json::exception&) {
    throw_error("{}: not valid JSON", where);
  }

  // The tensors' shapes are compared with the stated sizes before the networks are allocated.
  const auto file = SafetensorsFile::open(tensors_path);
  const int64_t d = pack->shape.n_embd, E = pack->shape.n_expert, L = pack->shape.n_moe_layers();
  for (const auto& [name, shape] : {std::pair<const char*, std::vector<int64_t>>{"lookahead.fc1.weight", {rank, d}},
                                    {"lookahead.fc2.weight", {std::ssize(pack->slots) * E, rank}},
                                    {"intent.fc1.weight", {hidden, 2 * d}},
                                    {"intent.fc2.weight", {L * E, hidden}}}) {
    const TensorInfo* tensor = file->find(name);
    if (tensor == nullptr) throw_error("{}: tensor {}: missing", tensors_path.string(), name);
    if (tensor->shape != shape)
      throw_error("{}: tensor {}: shape [{}], expected [{}] (from predictors.json)", tensors_path.string(), name,
                  fmt::join(tensor->shape, ","), fmt::join(shape, ","));
  }
  pack->lookahead = Mlp<float>(d, rank, std::ssize(pack->slots) * E, E);
  pack->intent = Mlp<float>(2 * d, hidden, L * E, E);
  read_mlp(*file, "lookahead.", pack->lookahead);
  read_mlp(*file, "intent.", pack->intent);
  const TensorInfo* slots = file->find("lookahead.slots");
  const std::vector<int64_t> slots_shape = {std::ssize(pack->slots), 2};
  if (slots == nullptr || slots->dtype != DType::kI32 || slots->shape != slots_shape)
    throw_error("{}: tensor lookahead.slots: missing or not I32 [{}, 2]", tensors_path.string(), pack->slots.size());
  std::vector<int32_t> stored(pack->slots.size() * 2);
  std::memcpy(stored.data(), slots->data, stored.size() * sizeof(int32_t));
  for (size_t i = 0; i < pack->slots.size(); ++i)
    if (stored[2 * i] != pack->slots[i].horizon || stored[2 * i + 1] != pack->slots[i].moe_index)
      throw_error("{}: tensor lookahead.slots: row {} does not match predictors.json", tensors_path.string(), i);
  if (file->find("stats.expert_frequency") != nullptr) {
    pack->frequency.resize(size_t(pack->shape.n_moe_layers() * pack->shape.n_expert));
    read_f32(*file, "stats.expert_frequency", {pack->shape.n_moe_layers(), pack->shape.n_expert},
             pack->frequency.data());
  }
  return pack;
}

}  // namespace chronos::predict
