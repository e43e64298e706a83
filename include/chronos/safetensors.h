// Safetensors reading (single file and sharded folders, memory-mapped) and writing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "chronos/dtype.h"

namespace chronos {

// One tensor of a mapped file. `data` points into the mapping and lives as long as the
// SafetensorsFile (or TensorStore) that produced it.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  int64_t n_bytes = 0;
  int64_t file_offset = 0;  // absolute offset of the first byte in its file
  std::string file;         // path of the file that holds it, for error messages
  int64_t n_elements() const;
};

// A validated, memory-mapped safetensors file. open() checks everything the reference reader
// checks (header size cap, JSON schema, known dtypes, offsets tiling the buffer with no holes,
// overlaps or trailing bytes, sizes matching shapes) plus duplicate names, and throws
// chronos::Error naming the file (and tensor) otherwise.
class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::filesystem::path& path);
  ~SafetensorsFile();

  const std::filesystem::path& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in file order
  const TensorInfo* find(std::string_view name) const;                 // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// A tensor made from others rather than mapped: its TensorInfo points into `bytes`, or into a
// tensor it is a slice of (whose owner keeps it alive).
struct MadeTensor {
  TensorInfo info;
  std::vector<std::byte> bytes;
};

// All tensors of a model folder: model.safetensors, or model.safetensors.index.json and its
// shards (every weight_map entry must exist in its shard; names unique across shards), or any
// single *.safetensors file given directly. A weight stored as Hugging Face's MXFP4 pair
// (X_blocks and X_scales, U8, as gpt-oss ships) is found as one tensor X of dtype MXFP4 in GGUF's
// block layout (a repacked copy the store owns); the pair itself is not listed.
class TensorStore {
 public:
  static TensorStore open(const std::filesystem::path& dir_or_file);

  const TensorInfo* find(std::string_view name) const;  // nullptr if absent
  const TensorInfo& get(std::string_view name) const;   // throws Error naming the tensor
  std::vector<const TensorInfo*> all() const;           // sorted by name
  int64_t total_bytes() const;
  // The __metadata__ value of `key` in the first file that has it.
  std::optional<std::string> metadata(std::string_view key) const;
  // Lists `made` in place of the tensors named `replaced` (an architecture's split of fused
  // weights, as open() presents MXFP4 pairs): find() and all() see the made ones from then on,
  // and the store keeps them, and what they slice, alive.
  void present(std::span<const std::string> replaced, std::vector<std::shared_ptr<const MadeTensor>> made);

 private:
  static TensorStore open_files(const std::filesystem::path& dir_or_file);

  std::filesystem::path source_;  // what open() was given, for error messages
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::vector<std::shared_ptr<const MadeTensor>> made_;  // the MXFP4 pairs repacked, and present()'s
  std::map<std::string, const TensorInfo*, std::less<>> by_name_;
};

// Writes a safetensors file the way the reference writer does (header padded to 8 bytes,
// tensors in the given order, contiguous). Writes to a temporary name and renames on success,
// so a failed write never leaves a partial file.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;
};
void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace chronos
