// present_hf_mxfp4: gpt-oss's *_blocks / *_scales pairs checked and repacked into GGUF's MXFP4 blocks.
#include "io/hf_mxfp4.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string_view>

#include "chronos/block_types.h"
#include "chronos/error.h"

namespace chronos::io_detail {
namespace {

constexpr std::string_view kBlocks = "_blocks";
constexpr std::string_view kScales = "_scales";
constexpr int64_t kHfBlockBytes = 16;  // 32 E2M1 values, two a byte

bool ends_with(std::string_view name, std::string_view suffix) {
  return name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
}

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// The shape of X that `blocks` and `scales` store; throws naming the tensor that does not fit.
std::vector<int64_t> presented_shape(const TensorInfo& blocks, const TensorInfo& scales) {
  const auto bad = [&](const TensorInfo& t, const std::string& what) {
    throw_error("{}: tensor {}: {}", t.file, t.name, what);
  };
  if (blocks.dtype != DType::kU8)
    bad(blocks, fmt::format("dtype {}, expected U8 (MXFP4 blocks: two E2M1 values a byte)", dtype_name(blocks.dtype)));
  if (scales.dtype != DType::kU8)
    bad(scales,
        fmt::format("dtype {}, expected U8 (MXFP4 scales: one E8M0 exponent per 32 values)", dtype_name(scales.dtype)));
  if (scales.shape.empty()) bad(scales, "a scalar, expected [..., rows, groups of 32 values]");
  const int64_t groups = scales.shape.back();
  std::vector<int64_t> expected = scales.shape;
  expected.push_back(kHfBlockBytes);
  const auto mismatch = [&] {
    bad(blocks, fmt::format("shape {} does not fit {} {}: expected {} (16 bytes per scale)", shape_text(blocks.shape),
                            scales.name, shape_text(scales.shape), shape_text(expected)));
  };
  const std::vector<int64_t> prefix(scales.shape.begin(), scales.shape.end() - 1);
  if (blocks.shape.size() == scales.shape.size() + 1) {  // [..., rows, groups, 16], as saved
    if (!std::equal(scales.shape.begin(), scales.shape.end(), blocks.shape.begin()) ||
        blocks.shape.back() != kHfBlockBytes)
      mismatch();
  } else if (blocks.shape.size() == scales.shape.size()) {  // [..., rows, 16 * groups], flattened
    const int64_t row_bytes = blocks.shape.back();
    if (row_bytes % kHfBlockBytes != 0)
      bad(blocks, fmt::format("shape {}: rows of {} bytes hold {} values, not a multiple of 32 (one MXFP4 block)",
                              shape_text(blocks.shape), row_bytes, 2 * row_bytes));
    if (!std::equal(prefix.begin(), prefix.end(), blocks.shape.begin()) || row_bytes != kHfBlockBytes * groups)
      mismatch();
  } else {
    mismatch();
  }
  std::vector<int64_t> shape = prefix;
  shape.push_back(groups * kBlockType<DType::kMXFP4>.block_elements);
  return shape;
}

std::shared_ptr<const MadeTensor> repack(std::string name, const TensorInfo& blocks, const TensorInfo& scales) {
  auto made = std::make_shared<MadeTensor>();
  made->info.shape = presented_shape(blocks, scales);
  const int64_t n_blocks = scales.n_bytes;  // U8: one byte per block
  const int64_t gguf_bytes = kBlockType<DType::kMXFP4>.block_bytes;
  made->bytes.resize(size_t(n_blocks * gguf_bytes));
  const auto* in = reinterpret_cast<const uint8_t*>(blocks.data);
  const auto* scale = reinterpret_cast<const uint8_t*>(scales.data);
  auto* out = reinterpret_cast<uint8_t*>(made->bytes.data());
  for (int64_t b = 0; b < n_blocks; ++b) hf_mxfp4_block_to_gguf(in + b * kHfBlockBytes, scale[b], out + b * gguf_bytes);
  made->info.name = std::move(name);
  made->info.dtype = DType::kMXFP4;
  made->info.data = made->bytes.data();
  made->info.n_bytes = int64_t(made->bytes.size());
  made->info.file_offset = blocks.file_offset;  // names the source, as GGUF's restored copies do
  made->info.file = blocks.file;
  return made;
}

}  // namespace

std::vector<std::shared_ptr<const MadeTensor>> present_hf_mxfp4(
    const std::map<std::string, const TensorInfo*, std::less<>>& tensors) {
  std::vector<std::shared_ptr<const MadeTensor>> out;
  for (const auto& [name, t] : tensors) {
    const bool is_blocks = ends_with(name, kBlocks);
    if (!is_blocks && !ends_with(name, kScales)) continue;
    const std::string base = name.substr(0, name.size() - (is_blocks ? kBlocks : kScales).size());
    const std::string partner = base + std::string(is_blocks ? kScales : kBlocks);
    const auto partner_it = tensors.find(partner);
    if (partner_it == tensors.end()) {
      // Some other checkpoint's tensor that happens to end so; only U8 says MXFP4.
      if (t->dtype != DType::kU8) continue;
      throw_error("{}: tensor {}: no {} beside it (MXFP4 weights are stored as {}{} and {}{})", t->file, name, partner,
                  base, kBlocks, base, kScales);
    }
    if (!is_blocks) continue;  // the pair is handled once, from its blocks
    if (const auto plain = tensors.find(base); plain != tensors.end())
      throw_error("{}: tensor {}: also stored as the MXFP4 pair {} / {}", plain->second->file, base, name, partner);
    out.push_back(repack(base, *t, *partner_it->second));
  }
  return out;
}

}  // namespace chronos::io_detail
