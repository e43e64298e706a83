// SafetensorsFile (validated mmap reader) and write_safetensors (atomic writer).
#include "chronos/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "chronos/error.h"
#include "chronos/file_util.h"
#include "io/mapped_file.h"
#include "io/safetensors_writer.h"

namespace chronos {
namespace {

// The reference reader's anti-DoS cap on the JSON header.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& message) {
  throw Error(fmt::format("{}: {}", path.string(), message));
}

std::string shape_string(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// A tensor entry as parsed from the header, before its offsets are checked against the file.
struct HeaderEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// Reads a non-negative JSON integer that fits in int64 (shapes and offsets are <= 2^48 per spec,
// and int64 keeps later arithmetic in one signed type).
bool read_size(const nlohmann::json& value, uint64_t& out) {
  if (!value.is_number_unsigned()) return false;
  out = value.get<uint64_t>();
  return out <= uint64_t(INT64_MAX);
}

HeaderEntry parse_entry(const std::filesystem::path& path, const std::string& name, const nlohmann::json& value) {
  const auto bad = [&](std::string_view what) { fail(path, fmt::format("tensor {}: {}", name, what)); };
  if (!value.is_object()) bad("entry is not a JSON object");
  HeaderEntry entry;
  entry.name = name;

  const auto dtype_it = value.find("dtype");
  if (dtype_it == value.end() || !dtype_it->is_string()) bad("missing or non-string \"dtype\"");
  const auto& dtype_text = dtype_it->get_ref<const std::string&>();
  const auto dtype = dtype_from_name(dtype_text);
  if (!dtype) bad(fmt::format("unknown dtype \"{}\"", dtype_text));
  entry.dtype = *dtype;

  const auto shape_it = value.find("shape");
  if (shape_it == value.end() || !shape_it->is_array()) bad("missing or non-array \"shape\"");
  for (const auto& dim : *shape_it) {
    uint64_t size = 0;
    if (!read_size(dim, size))
      bad(fmt::format("shape {} has a dimension that is not a non-negative integer", shape_it->dump()));
    entry.shape.push_back(int64_t(size));
  }

  const auto offsets_it = value.find("data_offsets");
  if (offsets_it == value.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !read_size((*offsets_it)[0], entry.begin) || !read_size((*offsets_it)[1], entry.end))
    bad("\"data_offsets\" is not a pair of non-negative integers");
  return entry;
}

// Parses the header JSON; rejects duplicate top-level keys, which a plain parse would silently
// collapse (the spec forbids them; serde lets the last one win).
nlohmann::json parse_header(const std::filesystem::path& path, std::string_view text) {
  std::set<std::string, std::less<>> seen;
  std::string duplicate;
  const nlohmann::json::parser_callback_t on_event = [&](int depth, nlohmann::json::parse_event_t event,
                                                         nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && duplicate.empty()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!seen.insert(key).second) duplicate = key;
    }
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text.begin(), text.end(), on_event);
  } catch (const nlohmann::json::exception& e) {
    fail(path, fmt::format("header is not valid JSON: {}", e.what()));
  }
  if (!duplicate.empty()) fail(path, fmt::format("tensor {}: name appears twice in the header", duplicate));
  if (!header.is_object()) fail(path, "header is not a JSON object");
  return header;
}

}  // namespace

int64_t TensorInfo::n_elements() const {
  // A zero anywhere makes the count 0 even when the other dimensions' product would overflow
  // (open() accepts [2^62, 2, 0]: it holds no bytes).
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t count = 1;
  for (int64_t dim : shape) CHRONOS_CHECK(!__builtin_mul_overflow(count, dim, &count));
  return count;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;

  const io_detail::Mapping mapped = io_detail::map_whole_file(path, 8, "the 8-byte header length");
  const uint64_t file_size = mapped.size;
  void* mapping = mapped.data;
  // Owned from here on: the destructor unmaps even if validation throws.
  file->mapping_ = mapping;
  file->mapping_size_ = size_t(file_size);
  const auto* bytes = static_cast<const std::byte*>(mapping);

  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | uint64_t(bytes[i]);
  if (header_size > kMaxHeaderBytes)
    fail(path, fmt::format("header length {} exceeds the {}-byte limit", header_size, kMaxHeaderBytes));
  // header_size <= 1e8, so 8 + header_size cannot overflow.
  const uint64_t data_start = 8 + header_size;
  if (data_start > file_size)
    fail(path, fmt::format("header length {} runs past the end of the {}-byte file", header_size, file_size));
  if (header_size == 0 || char(bytes[8]) != '{') fail(path, "header does not start with '{'");

  const std::string_view header_text(reinterpret_cast<const char*>(bytes + 8), size_t(header_size));
  const nlohmann::json header = parse_header(path, header_text);

  std::vector<HeaderEntry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (value.is_null()) continue;
      if (!value.is_object()) fail(path, "__metadata__ is not a JSON object");
      for (const auto& [meta_key, meta_value] : value.items()) {
        if (!meta_value.is_string()) fail(path, fmt::format("__metadata__ value of \"{}\" is not a string", meta_key));
        file->metadata_[meta_key] = meta_value.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, key, value));
  }

  // The buffer must be tiled exactly, in offset order, as the reference reader requires.
  std::stable_sort(entries.begin(), entries.end(), [](const HeaderEntry& a, const HeaderEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t previous_end = 0;
  std::string previous_name;
  for (const auto& entry : entries) {
    const std::string offsets = fmt::format("data_offsets [{}, {}]", entry.begin, entry.end);
    if (entry.end < entry.begin) fail(path, fmt::format("tensor {}: {} end before they begin", entry.name, offsets));
    if (entry.begin > previous_end) {
      fail(path, previous_name.empty()
                     ? fmt::format("tensor {}: {} leave a hole of {} bytes at the start of the data", entry.name,
                                   offsets, entry.begin)
                     : fmt::format("tensor {}: {} leave a hole of {} bytes after tensor {} (ends at {})", entry.name,
                                   offsets, entry.begin - previous_end, previous_name, previous_end));
    }
    if (entry.begin < previous_end)
      fail(path, fmt::format("tensor {}: {} overlap tensor {} (ends at {})", entry.name, offsets, previous_name,
                             previous_end));

    uint64_t n_elements = 1;
    for (int64_t dim : entry.shape)
      if (__builtin_mul_overflow(n_elements, uint64_t(dim), &n_elements))
        fail(path,
             fmt::format("tensor {}: shape {} overflows the element count", entry.name, shape_string(entry.shape)));
    uint64_t n_bits = 0;
    if (__builtin_mul_overflow(n_elements, uint64_t(dtype_bits(entry.dtype)), &n_bits))
      fail(path, fmt::format("tensor {}: shape {} of {} overflows the byte count", entry.name,
                             shape_string(entry.shape), dtype_name(entry.dtype)));
    if (n_bits % 8 != 0)
      fail(path, fmt::format("tensor {}: shape {} of {} does not end on a byte boundary", entry.name,
                             shape_string(entry.shape), dtype_name(entry.dtype)));
    const uint64_t n_bytes = n_bits / 8;
    if (entry.end - entry.begin != n_bytes)
      fail(path, fmt::format("tensor {}: {} do not match shape {} of {} ({} bytes)", entry.name, offsets,
                             shape_string(entry.shape), dtype_name(entry.dtype), n_bytes));
    previous_end = entry.end;
    previous_name = entry.name;
  }
  const uint64_t data_size = file_size - data_start;
  if (previous_end > data_size)
    fail(path, fmt::format("file is truncated: tensors need {} bytes of data, only {} present ({} missing)",
                           previous_end, data_size, previous_end - data_size));
  if (previous_end < data_size)
    fail(path, fmt::format("{} trailing bytes after the last tensor", data_size - previous_end));

  file->tensors_.reserve(entries.size());
  for (auto& entry : entries) {
    TensorInfo tensor;
    tensor.name = std::move(entry.name);
    tensor.dtype = entry.dtype;
    tensor.shape = std::move(entry.shape);
    tensor.file_offset = int64_t(data_start + entry.begin);
    tensor.n_bytes = int64_t(entry.end - entry.begin);
    tensor.data = bytes + tensor.file_offset;
    tensor.file = path.string();
    file->index_.emplace(tensor.name, file->tensors_.size());
    file->tensors_.push_back(std::move(tensor));
  }
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

std::string build_header(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":" + nlohmann::json(metadata).dump();
    first = false;
  }
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const auto& tensor : tensors) {
    if (tensor.name.empty() || tensor.name == "__metadata__")
      fail(path, fmt::format("cannot write a tensor named \"{}\"", tensor.name));
    if (!names.insert(tensor.name).second) fail(path, fmt::format("tensor {}: name given twice", tensor.name));
    uint64_t n_bytes = uint64_t(dtype_size(tensor.dtype));
    for (int64_t dim : tensor.shape)
      if (dim < 0 || __builtin_mul_overflow(n_bytes, uint64_t(dim), &n_bytes))
        fail(path, fmt::format("tensor {}: invalid shape {}", tensor.name, shape_string(tensor.shape)));
    if (n_bytes != tensor.bytes.size())
      fail(path, fmt::format("tensor {}: {} bytes given for shape {} of {} ({} bytes)", tensor.name,
                             tensor.bytes.size(), shape_string(tensor.shape), dtype_name(tensor.dtype), n_bytes));
    nlohmann::json entry;
    entry["dtype"] = std::string(dtype_name(tensor.dtype));
    entry["shape"] = tensor.shape;
    entry["data_offsets"] = {offset, offset + n_bytes};
    header += fmt::format("{}{}:{}", first ? "" : ",", nlohmann::json(tensor.name).dump(), entry.dump());
    first = false;
    offset += n_bytes;
  }
  header += "}";
  // Padding to 8 bytes puts the data buffer on an 8-byte boundary, so mapped tensors of any
  // element size whose offsets are multiples of it are naturally aligned.
  header.append((8 - header.size() % 8) % 8, ' ');
  return header;
}

}  // namespace

namespace io_detail {

void write_safetensors_file(const std::filesystem::path& path, std::string_view header,
                            std::span<const DataPiece> pieces) {
  AtomicFile file(path);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  file.write(length, sizeof(length));
  file.write(header);
  static constexpr std::array<std::byte, 4096> kZeros{};
  for (const DataPiece& piece : pieces) {
    if (piece.data != nullptr) {
      file.write(piece.data, size_t(piece.bytes));
    } else {
      for (int64_t left = piece.bytes; left > 0; left -= int64_t(kZeros.size()))
        file.write(kZeros.data(), size_t(std::min<int64_t>(left, int64_t(kZeros.size()))));
    }
  }
  file.commit();
}

}  // namespace io_detail

void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string header = build_header(path, tensors, metadata);
  std::vector<io_detail::DataPiece> pieces;
  pieces.reserve(tensors.size());
  for (const auto& tensor : tensors) pieces.push_back({tensor.name, tensor.bytes.data(), int64_t(tensor.bytes.size())});
  io_detail::write_safetensors_file(path, header, pieces);
}

}  // namespace chronos
