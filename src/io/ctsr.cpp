// `.ctsr` cluster files: the writer (4096-aligned expert extents in a valid safetensors file) and
// the checksum check readers run on the bytes they load.
#include <xxhash.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "chronos/error.h"
#include "chronos/pack_format.h"
#include "io/safetensors_writer.h"

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
  if (dtype_is_block(view.dtype) && view.cols % dtype_block_elements(view.dtype) != 0)
    fail(path,
         fmt::format("tensor {}: rows of {} weights are not whole {} blocks", name, view.cols, dtype_name(view.dtype)));
  const int64_t bytes = view.rows * dtype_row_bytes(view.dtype, view.cols);
  // A block-quantized tensor is raw bytes to safetensors (U8 [bytes]); the manifest keeps its type
  // and logical shape (DESIGN.md §5).
  if (dtype_is_block(view.dtype))
    out.push_back({name, DType::kU8, {bytes}, view.data, bytes, cursor});
  else
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

  std::vector<io_detail::DataPiece> pieces;
  pieces.reserve(planned.size());
  for (const PlannedTensor& tensor : planned) pieces.push_back({tensor.name, tensor.data, tensor.bytes});
  io_detail::write_safetensors_file(path, header, pieces);
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
