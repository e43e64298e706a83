// GgufFile: the validated, memory-mapped GGUF reader (v2 and v3, little-endian).
#include "chronos/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "chronos/block_types.h"
#include "chronos/error.h"
#include "io/mapped_file.h"

namespace chronos {

// A key's value. Scalars are decoded; arrays of scalars stay in the mapping (count × element size
// already checked against the file) and are decoded by the getters; string arrays keep views into
// the mapping; nested arrays are validated and kept as their element type and count only.
struct GgufFile::Value {
  GgufValueType type = GgufValueType::kU8;
  int64_t int_value = 0;     // the signed integer types and bool
  uint64_t uint_value = 0;   // the unsigned integer types
  double float_value = 0.0;  // f32 and f64
  std::string_view string_value;
  GgufValueType element_type = GgufValueType::kU8;  // arrays
  uint64_t count = 0;                               // arrays
  const std::byte* elements = nullptr;              // arrays of scalars
  std::vector<std::string_view> strings;            // arrays of strings
};

namespace {

using Value = GgufFile::Value;

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxArrayDepth = 8;        // nested arrays deeper than this are refused, not recursed into
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& message) {
  throw Error(fmt::format("{}: {}", path.string(), message));
}

std::string_view value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8: return "u8";
    case GgufValueType::kI8: return "i8";
    case GgufValueType::kU16: return "u16";
    case GgufValueType::kI16: return "i16";
    case GgufValueType::kU32: return "u32";
    case GgufValueType::kI32: return "i32";
    case GgufValueType::kF32: return "f32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kU64: return "u64";
    case GgufValueType::kI64: return "i64";
    case GgufValueType::kF64: return "f64";
  }
  return "unknown";
}

// Bytes of one scalar of `type`; 0 for string and array (variable length).
uint64_t scalar_size(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16: return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32: return 4;
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64: return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray: return 0;
  }
  return 0;
}

bool is_integer(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kU16:
    case GgufValueType::kI16:
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kU64:
    case GgufValueType::kI64: return true;
    default: return false;
  }
}

template <typename T>
T load(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// A scalar at p as a signed 128-bit-safe pair: fits_int64 says whether the value is representable.
bool integer_at(GgufValueType type, const std::byte* p, int64_t& out) {
  switch (type) {
    case GgufValueType::kU8: out = load<uint8_t>(p); return true;
    case GgufValueType::kI8: out = load<int8_t>(p); return true;
    case GgufValueType::kU16: out = load<uint16_t>(p); return true;
    case GgufValueType::kI16: out = load<int16_t>(p); return true;
    case GgufValueType::kU32: out = load<uint32_t>(p); return true;
    case GgufValueType::kI32: out = load<int32_t>(p); return true;
    case GgufValueType::kI64: out = load<int64_t>(p); return true;
    case GgufValueType::kU64: {
      const uint64_t value = load<uint64_t>(p);
      if (value > uint64_t(INT64_MAX)) return false;
      out = int64_t(value);
      return true;
    }
    case GgufValueType::kBool: out = load<uint8_t>(p) != 0; return true;
    default: return false;
  }
}

// Reads the header region front to back; every read is bounds-checked against the file.
class Cursor {
 public:
  Cursor(const std::filesystem::path& path, const std::byte* bytes, uint64_t size)
      : path_(path), bytes_(bytes), size_(size) {}

  uint64_t position() const { return position_; }
  uint64_t left() const { return size_ - position_; }
  const std::byte* here() const { return bytes_ + position_; }

  // `what` names the field for the truncation message ("key general.name: value").
  void need(uint64_t n, const std::string& what) const {
    if (n > left())
      fail(path_,
           fmt::format("file is truncated: {} needs {} bytes at offset {}, only {} left", what, n, position_, left()));
  }
  void skip(uint64_t n, const std::string& what) {
    need(n, what);
    position_ += n;
  }
  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    const T value = load<T>(here());
    position_ += sizeof(T);
    return value;
  }
  std::string_view read_string(const std::string& what) {
    const uint64_t length = read<uint64_t>(what + " length");
    if (length > left())
      fail(path_, fmt::format("{}: string length {} runs past the end of the file ({} bytes left at offset {})", what,
                              length, left(), position_));
    const std::string_view text(reinterpret_cast<const char*>(here()), size_t(length));
    position_ += length;
    return text;
  }

 private:
  const std::filesystem::path& path_;
  const std::byte* bytes_;
  uint64_t size_;
  uint64_t position_ = 0;
};

GgufValueType read_value_type(const std::filesystem::path& path, Cursor& cursor, const std::string& what) {
  const uint32_t raw = cursor.read<uint32_t>(what);
  if (raw > uint32_t(GgufValueType::kF64)) fail(path, fmt::format("{}: unknown value type {}", what, raw));
  return GgufValueType(raw);
}

// Reads an array's body (after its element type); `depth` counts enclosing arrays.
void read_array(const std::filesystem::path& path, Cursor& cursor, Value& value, const std::string& what, int depth) {
  if (depth > kMaxArrayDepth) fail(path, fmt::format("{}: arrays nested more than {} deep", what, kMaxArrayDepth));
  value.element_type = read_value_type(path, cursor, what + ": array element type");
  value.count = cursor.read<uint64_t>(what + ": array length");
  const uint64_t element_size = scalar_size(value.element_type);
  if (element_size > 0) {
    // count × size within what is left: no overflow since count <= left / size is checked first.
    if (value.count > cursor.left() / element_size)
      fail(path, fmt::format("{}: array of {} {} values ({} bytes each) runs past the end of the file", what,
                             value.count, value_type_name(value.element_type), element_size));
    value.elements = cursor.here();
    cursor.skip(value.count * element_size, what);
    return;
  }
  if (value.element_type == GgufValueType::kString) {
    // Each string takes at least its 8-byte length: bound the count before reserving.
    if (value.count > cursor.left() / 8)
      fail(path, fmt::format("{}: array of {} strings runs past the end of the file", what, value.count));
    value.strings.reserve(size_t(value.count));
    for (uint64_t i = 0; i < value.count; ++i)
      value.strings.push_back(cursor.read_string(fmt::format("{}[{}]", what, i)));
    return;
  }
  // Nested arrays: each takes at least 12 bytes (element type + count).
  if (value.count > cursor.left() / 12)
    fail(path, fmt::format("{}: array of {} arrays runs past the end of the file", what, value.count));
  for (uint64_t i = 0; i < value.count; ++i) {
    Value inner;
    read_array(path, cursor, inner, fmt::format("{}[{}]", what, i), depth + 1);
  }
}

Value read_value(const std::filesystem::path& path, Cursor& cursor, const std::string& what) {
  Value value;
  value.type = read_value_type(path, cursor, what + ": value type");
  const std::byte* p = cursor.here();
  switch (value.type) {
    case GgufValueType::kString: value.string_value = cursor.read_string(what); return value;
    case GgufValueType::kArray: read_array(path, cursor, value, what, 1); return value;
    case GgufValueType::kF32:
      cursor.skip(4, what);
      value.float_value = load<float>(p);
      return value;
    case GgufValueType::kF64:
      cursor.skip(8, what);
      value.float_value = load<double>(p);
      return value;
    case GgufValueType::kU8:
    case GgufValueType::kU16:
    case GgufValueType::kU32:
    case GgufValueType::kU64: {
      const uint64_t size = scalar_size(value.type);
      cursor.skip(size, what);
      uint64_t bits = 0;
      std::memcpy(&bits, p, size_t(size));  // little-endian host: the low bytes
      value.uint_value = bits;
      return value;
    }
    default:
      cursor.skip(scalar_size(value.type), what);
      integer_at(value.type, p, value.int_value);
      return value;
  }
}

std::string shape_string(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace

// The float types GGUF holds; the block types' ids are in chronos/block_types.h.
constexpr std::pair<DType, uint32_t> kGgmlFloatTypes[] = {{DType::kF32, 0}, {DType::kF16, 1}, {DType::kBF16, 30}};

std::optional<uint32_t> ggml_type_of(DType dtype) {
  if (const BlockType* block = find_block_type(dtype)) return block->ggml_type;
  for (const auto& [float_dtype, id] : kGgmlFloatTypes)
    if (float_dtype == dtype) return id;
  return std::nullopt;
}

std::optional<DType> dtype_of_ggml_type(uint32_t ggml_type) {
  for (const BlockType& block : kBlockTypes)
    if (block.ggml_type == ggml_type) return block.dtype;
  for (const auto& [float_dtype, id] : kGgmlFloatTypes)
    if (id == ggml_type) return float_dtype;
  return std::nullopt;
}

std::string ggml_type_name(uint32_t ggml_type) {
  // ggml.h's enum ggml_type; the gaps are ids ggml has retired.
  static constexpr std::string_view kNames[] = {
      "F32",   "F16",    "Q4_0",  "Q4_1", "",     "",        "Q5_0",   "Q5_1",    "Q8_0",  "Q8_1",   "Q2_K",
      "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S",
      "IQ2_S", "IQ4_XS", "I8",    "I16",  "I32",  "I64",     "F64",    "IQ1_M",   "BF16",  "",       "",
      "",      "TQ1_0",  "TQ2_0", "",     "",     "",        "MXFP4",  "NVFP4",   "Q1_0",
  };
  if (ggml_type < std::size(kNames) && !kNames[ggml_type].empty()) return std::string(kNames[ggml_type]);
  return fmt::format("type {}", ggml_type);
}

namespace {

// The names of the ggml types dtype_of_ggml_type maps, in id order: the list an error gives.
std::string supported_ggml_types() {
  std::string names;
  for (uint32_t id = 0; id < 64; ++id)
    if (dtype_of_ggml_type(id)) names += (names.empty() ? "" : ", ") + ggml_type_name(id);
  return names;
}

}  // namespace

std::unique_ptr<GgufFile> GgufFile::open(const std::filesystem::path& path) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;

  const io_detail::Mapping mapped = io_detail::map_whole_file(path, 24, "a GGUF header (24 bytes)");
  const uint64_t file_size = mapped.size;
  void* mapping = mapped.data;
  file->mapping_ = mapping;  // owned from here on: the destructor unmaps even if validation throws
  file->mapping_size_ = size_t(file_size);
  const auto* bytes = static_cast<const std::byte*>(mapping);
  Cursor cursor(path, bytes, file_size);

  if (cursor.read<uint32_t>("magic") != kMagic) fail(path, "not a GGUF file (the first 4 bytes are not \"GGUF\")");
  const uint32_t version = cursor.read<uint32_t>("version");
  if (version == 1) fail(path, "GGUF version 1 is not supported (only versions 2 and 3)");
  if (version != 2 && version != 3) {
    const bool swapped = (version & 0xffffu) == 0 && (version >> 16) != 0;
    fail(path, fmt::format("GGUF version {} is not supported (only versions 2 and 3{})", version,
                           swapped ? "; this looks like a big-endian file" : ""));
  }
  file->version_ = version;
  const uint64_t n_tensors = cursor.read<uint64_t>("tensor count");
  const uint64_t n_kv = cursor.read<uint64_t>("key-value count");
  // A key-value takes at least 13 bytes (key length, value type, one byte of value); a tensor
  // entry at least 32 (name length, n_dims, one dimension, type, offset).
  if (n_kv > cursor.left() / 13)
    fail(path, fmt::format("key-value count {} is more than the {}-byte file can hold", n_kv, file_size));
  if (n_tensors > cursor.left() / 32)
    fail(path, fmt::format("tensor count {} is more than the {}-byte file can hold", n_tensors, file_size));

  file->kv_.reserve(size_t(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string key(cursor.read_string(fmt::format("key {} of {}", i, n_kv)));
    const std::string what = fmt::format("key {}", key);
    auto value = std::make_shared<Value>(read_value(path, cursor, what));
    if (!file->kv_index_.emplace(key, file->kv_.size()).second) fail(path, fmt::format("{}: appears twice", what));
    file->kv_.emplace_back(key, std::move(value));
  }

  if (file->has("general.alignment")) {
    const auto alignment = file->get_int("general.alignment");
    if (!alignment || *alignment <= 0 || (*alignment & (*alignment - 1)) != 0 || *alignment > (int64_t(1) << 30))
      fail(path, fmt::format("key general.alignment: {} is not a power of two up to 2^30",
                             alignment ? std::to_string(*alignment) : std::string("(not an integer)")));
    file->alignment_ = *alignment;
  }

  struct Entry {
    GgufTensor tensor;
    uint64_t offset = 0;  // relative to the data section
  };
  std::vector<Entry> entries;
  entries.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    Entry entry;
    GgufTensor& tensor = entry.tensor;
    tensor.name = std::string(cursor.read_string(fmt::format("tensor {} of {}: name", i, n_tensors)));
    const std::string what = fmt::format("tensor {}", tensor.name);
    if (!file->tensor_index_.emplace(tensor.name, i).second) fail(path, fmt::format("{}: appears twice", what));
    const uint32_t n_dims = cursor.read<uint32_t>(what + ": n_dims");
    if (n_dims < 1 || n_dims > kMaxDims)
      fail(path, fmt::format("{}: {} dimensions (1 to {} allowed)", what, n_dims, kMaxDims));
    std::vector<int64_t> ne(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = cursor.read<uint64_t>(what + ": dimensions");
      if (dim == 0 || dim > uint64_t(INT64_MAX))
        fail(path, fmt::format("{}: dimension {} is {} (must be positive and below 2^63)", what, d, dim));
      ne[d] = int64_t(dim);
    }
    tensor.shape.assign(ne.rbegin(), ne.rend());
    tensor.ggml_type = cursor.read<uint32_t>(what + ": type");
    entry.offset = cursor.read<uint64_t>(what + ": offset");
    const auto dtype = dtype_of_ggml_type(tensor.ggml_type);
    if (!dtype) {
      fail(path, fmt::format("{}: ggml type {} is not supported (supported: {})", what,
                             ggml_type_name(tensor.ggml_type), supported_ggml_types()));
    }
    tensor.dtype = *dtype;

    int64_t n_elements = 1;
    for (int64_t dim : ne)
      if (__builtin_mul_overflow(n_elements, dim, &n_elements))
        fail(path, fmt::format("{}: shape {} overflows the element count", what, shape_string(tensor.shape)));
    const int64_t cols = ne[0];
    const int64_t block = dtype_block_elements(tensor.dtype);
    if (cols % block != 0)
      fail(path, fmt::format("{}: rows of {} elements are not whole {}-element blocks of {}", what, cols, block,
                             dtype_name(tensor.dtype)));
    const int64_t rows = n_elements / cols;
    int64_t row_bytes = 0;
    if (__builtin_mul_overflow(cols / block, dtype_block_bytes(tensor.dtype), &row_bytes) ||
        __builtin_mul_overflow(rows, row_bytes, &tensor.n_bytes))
      fail(path, fmt::format("{}: shape {} of {} overflows the byte count", what, shape_string(tensor.shape),
                             dtype_name(tensor.dtype)));
    if (entry.offset % uint64_t(file->alignment_) != 0)
      fail(path, fmt::format("{}: data offset {} is not a multiple of the alignment {}", what, entry.offset,
                             file->alignment_));
    entries.push_back(std::move(entry));
  }

  // The data section starts at the next multiple of the alignment after the tensor entries.
  const uint64_t header_end = cursor.position();
  const uint64_t alignment = uint64_t(file->alignment_);
  const uint64_t data_start = (header_end + alignment - 1) / alignment * alignment;
  if (!entries.empty() && data_start > file_size)
    fail(path, fmt::format("file is truncated: the data section would start at {}, past the end of the {}-byte file",
                           data_start, file_size));
  const uint64_t data_size = data_start <= file_size ? file_size - data_start : 0;
  for (Entry& entry : entries) {
    GgufTensor& tensor = entry.tensor;
    if (entry.offset > data_size || uint64_t(tensor.n_bytes) > data_size - entry.offset)
      fail(path,
           fmt::format("tensor {}: data [{}, +{}) runs past the end of the {}-byte data section{}", tensor.name,
                       entry.offset, tensor.n_bytes, data_size, entry.offset <= data_size ? " (file truncated?)" : ""));
    tensor.file_offset = int64_t(data_start + entry.offset);
    tensor.data = bytes + tensor.file_offset;
  }

  // No two tensors may share bytes.
  std::vector<const Entry*> by_offset;
  by_offset.reserve(entries.size());
  for (const Entry& entry : entries) by_offset.push_back(&entry);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const Entry& previous = *by_offset[i - 1];
    const Entry& next = *by_offset[i];
    if (next.offset < previous.offset + uint64_t(previous.tensor.n_bytes))
      fail(path, fmt::format("tensor {}: data at offset {} overlaps tensor {} [{}, +{})", next.tensor.name, next.offset,
                             previous.tensor.name, previous.offset, previous.tensor.n_bytes));
  }

  file->tensors_.reserve(entries.size());
  for (Entry& entry : entries) file->tensors_.push_back(std::move(entry.tensor));
  return file;
}

bool is_stacked_experts(std::string_view tensor_name) { return tensor_name.find("_exps.") != std::string_view::npos; }

void GgufFile::advise_experts_read_elsewhere() const {
  if (mapping_ == nullptr) return;
  auto* base = static_cast<std::byte*>(mapping_);
  if (::madvise(base, mapping_size_, MADV_RANDOM) != 0)
    spdlog::debug("{}: madvise(MADV_RANDOM): {}", path_.string(), std::strerror(errno));
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  for (const GgufTensor& t : tensors_) {
    if (is_stacked_experts(t.name) || t.n_bytes == 0) continue;
    const int64_t begin = t.file_offset / page * page, end = t.file_offset + t.n_bytes;
    if (::madvise(base + begin, size_t(end - begin), MADV_WILLNEED) != 0)
      spdlog::debug("{}: madvise(MADV_WILLNEED) of {}: {}", path_.string(), t.name, std::strerror(errno));
  }
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

bool GgufFile::has(std::string_view key) const { return kv_index_.find(key) != kv_index_.end(); }

std::optional<GgufValueType> GgufFile::type_of(std::string_view key) const {
  const auto it = kv_index_.find(key);
  if (it == kv_index_.end()) return std::nullopt;
  return kv_[it->second].second->type;
}

namespace {

[[noreturn]] void wrong_type(const std::filesystem::path& path, std::string_view key, const Value& value,
                             std::string_view wanted) {
  std::string have(value_type_name(value.type));
  if (value.type == GgufValueType::kArray) have = fmt::format("array of {}", value_type_name(value.element_type));
  fail(path, fmt::format("key {}: is {}, expected {}", key, have, wanted));
}

}  // namespace

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const auto it = kv_index_.find(key);
  if (it == kv_index_.end()) return std::nullopt;
  const Value& value = *kv_[it->second].second;
  if (value.type != GgufValueType::kString) wrong_type(path_, key, value, "string");
  return std::string(value.string_value);
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const auto it = kv_index_.find(key);
  if (it == kv_index_.end()) return std::nullopt;
  const Value& value = *kv_[it->second].second;
  switch (value.type) {
    case GgufValueType::kU8:
    case GgufValueType::kU16:
    case GgufValueType::kU32:
    case GgufValueType::kU64:
      if (value.uint_value > uint64_t(INT64_MAX))
        fail(path_, fmt::format("key {}: value {} does not fit a signed 64-bit integer", key, value.uint_value));
      return int64_t(value.uint_value);
    case GgufValueType::kI8:
    case GgufValueType::kI16:
    case GgufValueType::kI32:
    case GgufValueType::kI64:
    case GgufValueType::kBool: return value.int_value;
    default: wrong_type(path_, key, value, "an integer");
  }
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const auto it = kv_index_.find(key);
  if (it == kv_index_.end()) return std::nullopt;
  const Value& value = *kv_[it->second].second;
  if (value.type != GgufValueType::kF32 && value.type != GgufValueType::kF64)
    wrong_type(path_, key, value, "f32 or f64");
  return value.float_value;
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const auto it = kv_index_.find(key);
  if (it == kv_index_.end()) return std::nullopt;
  const Value& value = *kv_[it->second].second;
  if (value.type != GgufValueType::kBool) wrong_type(path_, key, value, "bool");
  return value.int_value != 0;
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  const auto it = kv_index_.find(key);
  if (it == kv_index_.end()) return {};
  const Value& value = *kv_[it->second].second;
  if (value.type != GgufValueType::kArray || value.element_type != GgufValueType::kString)
    wrong_type(path_, key, value, "array of string");
  return {value.strings.begin(), value.strings.end()};
}

std::vector<float> GgufFile::get_f32_array(std::string_view key) const {
  const auto it = kv_index_.find(key);
  if (it == kv_index_.end()) return {};
  const Value& value = *kv_[it->second].second;
  if (value.type != GgufValueType::kArray || value.element_type != GgufValueType::kF32)
    wrong_type(path_, key, value, "array of f32");
  std::vector<float> out(size_t(value.count));
  if (value.count > 0) std::memcpy(out.data(), value.elements, size_t(value.count) * sizeof(float));
  return out;
}

std::vector<int32_t> GgufFile::get_i32_array(std::string_view key) const {
  const auto it = kv_index_.find(key);
  if (it == kv_index_.end()) return {};
  const Value& value = *kv_[it->second].second;
  if (value.type != GgufValueType::kArray || !is_integer(value.element_type))
    wrong_type(path_, key, value, "array of integers");
  const uint64_t size = scalar_size(value.element_type);
  std::vector<int32_t> out;
  out.reserve(size_t(value.count));
  for (uint64_t i = 0; i < value.count; ++i) {
    int64_t element = 0;
    if (!integer_at(value.element_type, value.elements + i * size, element) ||
        element < std::numeric_limits<int32_t>::min() || element > std::numeric_limits<int32_t>::max())
      fail(path_, fmt::format("key {}: element {} does not fit a 32-bit integer", key, i));
    out.push_back(int32_t(element));
  }
  return out;
}

std::vector<bool> GgufFile::get_bool_array(std::string_view key) const {
  const auto it = kv_index_.find(key);
  if (it == kv_index_.end()) return {};
  const Value& value = *kv_[it->second].second;
  if (value.type != GgufValueType::kArray ||
      !(value.element_type == GgufValueType::kBool || is_integer(value.element_type)))
    wrong_type(path_, key, value, "array of bools");
  const uint64_t size = scalar_size(value.element_type);
  std::vector<bool> out;
  out.reserve(size_t(value.count));
  for (uint64_t i = 0; i < value.count; ++i) {
    int64_t element = 0;
    integer_at(value.element_type, value.elements + i * size, element);
    out.push_back(element != 0);
  }
  return out;
}

std::vector<std::string> GgufFile::keys() const {
  std::vector<std::string> out;
  out.reserve(kv_.size());
  for (const auto& entry : kv_) out.push_back(entry.first);
  return out;
}

const GgufTensor* GgufFile::find(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace chronos
