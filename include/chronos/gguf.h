// GGUF reading (versions 2 and 3, little-endian, memory-mapped): the key-values and the tensor
// directory of a .gguf file, every length, count, offset, type and alignment checked before use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chronos/dtype.h"

namespace chronos {

// GGUF's key-value types (gguf_type in the GGUF specification).
enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// One tensor of the file. `shape` is row-major, outermost dimension first (GGUF stores ggml's `ne`,
// innermost first: shape is ne reversed), so a [rows, cols] weight matrix has shape {rows, cols}
// like its safetensors counterpart. `data` points into the mapping and lives as long as the file.
struct GgufTensor {
  std::string name;
  uint32_t ggml_type = 0;     // as stored
  DType dtype = DType::kF32;  // F32, F16, BF16 or a block type Chronos implements
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  int64_t n_bytes = 0;
  int64_t file_offset = 0;  // absolute offset of the first byte in the file
};

// A validated, memory-mapped GGUF file. open() throws chronos::Error with one line naming the file
// (and the key or tensor) for anything that does not check out: bad magic or version, truncation,
// counts or string lengths beyond the file, unknown value or tensor types (a tensor of a type
// Chronos does not implement is refused naming the tensor and the type), duplicate keys or tensors,
// misaligned or overlapping tensor data, data past the end of the file.
class GgufFile {
 public:
  static std::unique_ptr<GgufFile> open(const std::filesystem::path& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  uint32_t version() const { return version_; }
  int64_t alignment() const { return alignment_; }

  // Typed key-value access. Absent key: nullopt (or an empty vector). A key of another type:
  // Error naming the file, the key and both types. get_int accepts every integer type (and bool),
  // get_float f32 and f64; the array getters accept arrays of the named element type (get_i32_array
  // also any integer element type whose values fit).
  bool has(std::string_view key) const;
  std::optional<GgufValueType> type_of(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<float> get_f32_array(std::string_view key) const;
  std::vector<int32_t> get_i32_array(std::string_view key) const;
  std::vector<bool> get_bool_array(std::string_view key) const;  // bool elements (or integers: != 0)
  std::vector<std::string> keys() const;                         // in file order

  const std::vector<GgufTensor>& tensors() const { return tensors_; }  // in file order
  const GgufTensor* find(std::string_view name) const;                 // nullptr if absent
  // For a file whose stacked routed experts (the *_exps tensors) are read with direct I/O rather
  // than through the mapping: the mapping stops reading ahead (a fault near an expert tensor would
  // otherwise pull the kernel's read-ahead window of expert bytes into the page cache) and every
  // other tensor is asked for ahead (MADV_WILLNEED), so the dense weights still load in large reads.
  void advise_experts_read_elsewhere() const;

  struct Value;  // defined in gguf.cpp

 private:
  GgufFile() = default;
  std::filesystem::path path_;
  uint32_t version_ = 0;
  int64_t alignment_ = 32;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  std::vector<std::pair<std::string, std::shared_ptr<const Value>>> kv_;  // in file order
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// The ggml type id of a DType GGUF can hold (F32 0, F16 1, BF16 30, and each block type's id in
// chronos/block_types.h), and back; nullopt for the others.
std::optional<uint32_t> ggml_type_of(DType dtype);
std::optional<DType> dtype_of_ggml_type(uint32_t ggml_type);
// Whether a tensor holds a stack of routed experts (llama.cpp's blk.N.ffn_{gate,up,down}_exps.*).
bool is_stacked_experts(std::string_view tensor_name);

// GGUF's name of a ggml type id ("IQ2_XXS", "Q5_K", ...), or "type N" when unknown.
std::string ggml_type_name(uint32_t ggml_type);

}  // namespace chronos
