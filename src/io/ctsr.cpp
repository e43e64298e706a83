// `.ctsr` cluster files: the writer (4096-aligned expert extents in a valid safetensors file) and
// the checksum check readers run on the bytes they load.
#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "chronos/error.h"
#include "chronos/file_util.h"
#include "chronos/pack_format.h"

namespace chronos {
namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& message) {
  throw Error(fmt::format("{}: {}", path.string(), message));
}

int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// One tensor of the file in write order: an expert projection or a padding run of zeros.
struct PlannedTensor {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // nullptr: zeros
  int64_t bytes = 0;
  int64_t data_offset = 0;  // relative to the data buffer
};

PackedTensor plan_projection(const std::filesystem::path& path, const ExpertKey& key, const char* projection,
                             const WeightView& view, int64_t& cursor, std::vector<PlannedTensor>& out) {
  const std::string name = ctsr_tensor_name(key, projection);
  if (view.data == nullptr || view.rows <= 0 || view.cols <= 0)
    fail(path, fmt::format("tensor {}: empty weight view [{}, {}]", name, view.rows, view.cols));
  const int64_t bytes = view.rows * view.cols * dtype_size(view.dtype);
  out.push_back({name, view.dtype, {view.rows, view.cols}, view.data, bytes, cursor});
  PackedTensor packed{cursor, {view.rows, view.cols}, view.dtype, bytes};
  cursor += bytes;
  return packed;
}


uint64_t payload_hash(const ExpertSource& source, const PackedExpert& expert) {
  const std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> state(XXH64_createState(), &XXH64_freeState);
  CHRONOS_CHECK(state != nullptr);
  XXH64_reset(state.get(), 0);
  XXH64_update(state.get(), source.gate.data, size_t(expert.gate.bytes));
  XXH64_update(state.get(), source.up.data, size_t(expert.up.bytes));
  XXH64_update(state.get(), source.down.data, size_t(expert.down.bytes));
  return XXH64_digest(state.get());
}

}  // namespace

std::string ctsr_tensor_name(const ExpertKey& key, const char* projection) {
  return fmt::format("layers.{}.experts.{}.{}", key.layer, key.expert, projection);
}

std::vector<PackedExpert> write_ctsr(const std::filesystem::path& path, int32_t cluster_id,
                                     const std::string& fingerprint, std::span<const ExpertSource> experts) {
  // Plan the data buffer: relative offsets first, made absolute once the header size is known.
  std::vector<PlannedTensor> planned;
  std::vector<PackedExpert> packed;
  std::set<ExpertKey> seen;
  int64_t cursor = 0;
  int pad_index = 0;
  for (const ExpertSource& source : experts) {
    if (source.key.layer < 0 || source.key.expert < 0)
      fail(path, fmt::format("layer {} expert {}: negative index", source.key.layer, source.key.expert));
    if (!seen.insert(source.key).second)
      fail(path, fmt::format("layer {} expert {}: given twice", source.key.layer, source.key.expert));
    PackedExpert expert;
    expert.key = source.key;
    expert.cluster = cluster_id;
    expert.offset = cursor;
    expert.gate = plan_projection(path, source.key, "gate", source.gate, cursor, planned);
    expert.up = plan_projection(path, source.key, "up", source.up, cursor, planned);
    expert.down = plan_projection(path, source.key, "down", source.down, cursor, planned);
    const int64_t end = round_up(cursor, kCtsrAlignment);
    if (end > cursor) {
      planned.push_back(
          {fmt::format("__pad.{}", pad_index++), DType::kU8, {end - cursor}, nullptr, end - cursor, cursor});
      cursor = end;
    }
    expert.bytes = cursor - expert.offset;
    expert.xxh64 = payload_hash(source, expert);
    packed.push_back(std::move(expert));
  }

  std::string header = "{\"__metadata__\":" + nlohmann::json{{"format", "ctsr"},
                                                             {"version", "1"},
                                                             {"cluster", std::to_string(cluster_id)},
                                                             {"fingerprint", fingerprint}}
                                                  .dump();
  for (const PlannedTensor& tensor : planned) {
    const nlohmann::json entry = {{"dtype", std::string(dtype_name(tensor.dtype))},
                                  {"shape", tensor.shape},
                                  {"data_offsets", {tensor.data_offset, tensor.data_offset + tensor.bytes}}};
    header += fmt::format(",{}:{}", nlohmann::json(tensor.name).dump(), entry.dump());
  }
  header += "}";
  // Spaces after the JSON (allowed by the spec) put the data buffer on a 4096-byte boundary, so
  // relative extent offsets that are multiples of 4096 are absolute ones too.
  header.append(size_t(round_up(int64_t(8 + header.size()), kCtsrAlignment) - int64_t(8 + header.size())), ' ');
  const int64_t data_start = 8 + int64_t(header.size());
  for (PackedExpert& expert : packed) {
    expert.offset += data_start;
    for (PackedTensor* tensor : {&expert.gate, &expert.up, &expert.down}) tensor->offset += data_start;
  }

  std::filesystem::path temp_path = path;
  temp_path += ".tmp";
  const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(temp_path, fmt::format("cannot create: {}", std::strerror(errno)));
  const auto abandon = [&](const std::string& what) {
    const int saved = errno;
    ::close(fd);
    ::unlink(temp_path.c_str());
    fail(temp_path, fmt::format("{}: {}", what, std::strerror(saved)));
  };
  std::array<uint8_t, 8> length{};
  for (size_t i = 0; i < 8; ++i) length[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  if (!write_all(fd, length.data(), length.size()) || !write_all(fd, header.data(), header.size()))
    abandon("cannot write header");
  static constexpr std::array<std::byte, kCtsrAlignment> kZeros{};
  for (const PlannedTensor& tensor : planned) {
    const bool ok = tensor.data != nullptr ? write_all(fd, tensor.data, size_t(tensor.bytes))
                                           : write_all(fd, kZeros.data(), size_t(tensor.bytes));
    if (!ok) abandon(fmt::format("cannot write tensor {}", tensor.name));
  }
  if (::fsync(fd) != 0) abandon("cannot sync");
  if (::close(fd) != 0) {
    const int saved = errno;
    ::unlink(temp_path.c_str());
    fail(temp_path, fmt::format("cannot close: {}", std::strerror(saved)));
  }
  if (::rename(temp_path.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    ::unlink(temp_path.c_str());
    fail(path, fmt::format("cannot rename {} into place: {}", temp_path.string(), std::strerror(saved)));
  }
  return packed;
}

void verify_expert_bytes(const PackedExpert& expert, const std::string& cluster_file,
                         std::span<const std::byte> bytes) {
  const int64_t payload = expert.payload_bytes();
  if (int64_t(bytes.size()) < payload)
    throw_error("{}: layer {} expert {}: {} bytes read, the expert has {}", cluster_file, expert.key.layer,
                expert.key.expert, bytes.size(), payload);
  const uint64_t got = XXH64(bytes.data(), size_t(payload), 0);
  if (got != expert.xxh64)
    throw_error("{}: layer {} expert {}: checksum mismatch (expected {:016x}, got {:016x})", cluster_file,
                expert.key.layer, expert.key.expert, expert.xxh64, got);
}

}  // namespace chronos
