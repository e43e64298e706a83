// TensorStore: every tensor of a model folder, from model.safetensors or an index + shards.
#include <spdlog/spdlog.h>

#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "chronos/error.h"
#include "chronos/safetensors.h"
#include "io/hf_mxfp4.h"

namespace chronos {
namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// tensor name -> shard file name, as listed in model.safetensors.index.json.
std::map<std::string, std::string, std::less<>> read_weight_map(const std::filesystem::path& index_path) {
  std::ifstream in(index_path, std::ios::binary);
  if (!in) throw_error("{}: cannot open", index_path.string());
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    throw_error("{}: not valid JSON: {}", index_path.string(), e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw_error("{}: no \"weight_map\" object", index_path.string());
  std::map<std::string, std::string, std::less<>> weight_map;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) throw_error("{}: weight_map entry of {} is not a string", index_path.string(), name);
    const std::filesystem::path shard_path(shard.get<std::string>());
    // Shards live next to the index; refusing other paths keeps a crafted index from reading
    // arbitrary files.
    if (shard_path.empty() || shard_path.has_parent_path() || shard_path == "." || shard_path == "..")
      throw_error("{}: tensor {}: shard name \"{}\" is not a plain file name", index_path.string(), name,
                  shard.get<std::string>());
    weight_map.emplace(name, shard.get<std::string>());
  }
  return weight_map;
}

}  // namespace

TensorStore TensorStore::open(const std::filesystem::path& dir_or_file) {
  TensorStore store = open_files(dir_or_file);
  // After every shard is in: a pair's two tensors may sit in different shards.
  store.made_ = io_detail::present_hf_mxfp4(store.by_name_);
  for (const auto& made : store.made_) {
    const std::string& name = made->info.name;
    store.by_name_.erase(name + "_blocks");
    store.by_name_.erase(name + "_scales");
    store.by_name_.emplace(name, &made->info);
  }
  return store;
}

void TensorStore::present(std::span<const std::string> replaced, std::vector<std::shared_ptr<const MadeTensor>> made) {
  for (const std::string& name : replaced) by_name_.erase(name);
  for (auto& tensor : made) {
    const auto [it, inserted] = by_name_.emplace(tensor->info.name, &tensor->info);
    if (!inserted) throw_error("{}: tensor {} is made from others and also stored", it->second->file, it->first);
    made_.push_back(std::move(tensor));
  }
}

TensorStore TensorStore::open_files(const std::filesystem::path& dir_or_file) {
  TensorStore store;
  store.source_ = dir_or_file;
  std::error_code error;
  const auto status = std::filesystem::status(dir_or_file, error);
  if (!std::filesystem::exists(status)) throw_error("{}: no such file or directory", dir_or_file.string());

  const auto add_file = [&store](std::shared_ptr<SafetensorsFile> file) {
    for (const auto& tensor : file->tensors()) {
      const auto [it, inserted] = store.by_name_.emplace(tensor.name, &tensor);
      if (!inserted) throw_error("{}: tensor {} is also in {}", file->path().string(), tensor.name, it->second->file);
    }
    store.files_.push_back(std::move(file));
  };

  if (!std::filesystem::is_directory(status)) {
    add_file(SafetensorsFile::open(dir_or_file));
    return store;
  }
  if (std::filesystem::exists(dir_or_file / kSingleFile, error)) {
    add_file(SafetensorsFile::open(dir_or_file / kSingleFile));
    return store;
  }
  const auto index_path = dir_or_file / kIndexFile;
  if (!std::filesystem::exists(index_path, error))
    throw_error("no {} or {} in {}", kSingleFile, kIndexFile, dir_or_file.string());

  const auto weight_map = read_weight_map(index_path);
  std::map<std::string, std::string> first_tensor_of_shard;  // shard -> a tensor mapped to it
  for (const auto& [name, shard] : weight_map) first_tensor_of_shard.emplace(shard, name);
  for (const auto& [shard, some_tensor] : first_tensor_of_shard) {
    const auto shard_path = dir_or_file / shard;
    if (!std::filesystem::exists(shard_path, error))
      throw_error("{}: shard {} (holding tensor {}) does not exist", index_path.string(), shard, some_tensor);
    add_file(SafetensorsFile::open(shard_path));
    for (const auto& tensor : store.files_.back()->tensors()) {
      const auto it = weight_map.find(tensor.name);
      if (it == weight_map.end())
        spdlog::warn("{}: tensor {} is not listed in {}", shard_path.string(), tensor.name, kIndexFile);
    }
  }
  for (const auto& [name, shard] : weight_map) {
    const auto it = store.by_name_.find(name);
    if (it == store.by_name_.end())
      throw_error("{}: tensor {} is mapped to {} but that shard does not contain it", index_path.string(), name, shard);
    if (std::filesystem::path(it->second->file).filename() != shard)
      throw_error("{}: tensor {} is mapped to {} but found in {}", index_path.string(), name, shard, it->second->file);
  }
  return store;
}

const TensorInfo* TensorStore::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorInfo& TensorStore::get(std::string_view name) const {
  const TensorInfo* tensor = find(name);
  if (tensor == nullptr) throw_error("{}: tensor {} not found", source_.string(), name);
  return *tensor;
}

std::vector<const TensorInfo*> TensorStore::all() const {
  std::vector<const TensorInfo*> tensors;
  tensors.reserve(by_name_.size());
  for (const auto& [name, tensor] : by_name_) tensors.push_back(tensor);
  return tensors;
}

std::optional<std::string> TensorStore::metadata(std::string_view key) const {
  for (const auto& file : files_) {
    const auto it = file->metadata().find(std::string(key));
    if (it != file->metadata().end()) return it->second;
  }
  return std::nullopt;
}

int64_t TensorStore::total_bytes() const {
  int64_t total = 0;
  for (const auto& [name, tensor] : by_name_) total += tensor->n_bytes;
  return total;
}

}  // namespace chronos
