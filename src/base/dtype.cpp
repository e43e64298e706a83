// DType names and sizes (whole-byte and block types), the block-type fallback rule, and the
// f32 -> f16 conversion.
#include "chronos/dtype.h"

#include <cctype>
#include <cmath>
#include <string>

#include "chronos/block_types.h"
#include "chronos/error.h"

namespace chronos {
namespace {

// The whole-byte types of safetensors headers, bits per element; the block types are in
// chronos/block_types.h.
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  int bits;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kBool, "BOOL", 8},      {DType::kU8, "U8", 8},          {DType::kI8, "I8", 8},
    {DType::kF8E5M2, "F8_E5M2", 8}, {DType::kF8E4M3, "F8_E4M3", 8}, {DType::kF8E8M0, "F8_E8M0", 8},
    {DType::kI16, "I16", 16},       {DType::kU16, "U16", 16},       {DType::kF16, "F16", 16},
    {DType::kBF16, "BF16", 16},     {DType::kI32, "I32", 32},       {DType::kU32, "U32", 32},
    {DType::kF32, "F32", 32},       {DType::kF64, "F64", 64},       {DType::kI64, "I64", 64},
    {DType::kU64, "U64", 64},       {DType::kC64, "C64", 64},
};

const DTypeInfo& info(DType dtype) {
  for (const auto& entry : kDTypes)
    if (entry.dtype == dtype) return entry;
  check_failed("dtype in kDTypes", __FILE__, __LINE__, fmt::format("unknown DType {}", int(dtype)));
}

}  // namespace

int dtype_bits(DType dtype) {
  CHRONOS_CHECK_MSG(!dtype_is_block(dtype), "{} is a block type: it has no per-element size", dtype_name(dtype));
  return info(dtype).bits;
}

int64_t dtype_size(DType dtype) { return dtype_bits(dtype) / 8; }

std::string_view dtype_name(DType dtype) {
  if (const BlockType* block = find_block_type(dtype)) return block->name;
  return info(dtype).name;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& entry : kDTypes)
    if (entry.name == name) return entry.dtype;
  return std::nullopt;
}

bool dtype_is_block(DType dtype) { return is_block_type(dtype); }

int64_t dtype_block_elements(DType dtype) {
  const BlockType* block = find_block_type(dtype);
  return block != nullptr ? block->block_elements : 1;
}

int64_t dtype_block_bytes(DType dtype) {
  const BlockType* block = find_block_type(dtype);
  return block != nullptr ? block->block_bytes : info(dtype).bits / 8;
}

int64_t dtype_row_bytes(DType dtype, int64_t n_elements) {
  const int64_t block_elements = dtype_block_elements(dtype);
  CHRONOS_CHECK_MSG(n_elements >= 0 && n_elements % block_elements == 0,
                    "a {} row of {} elements is not a whole number of {}-element blocks", dtype_name(dtype), n_elements,
                    block_elements);
  return n_elements / block_elements * dtype_block_bytes(dtype);
}

std::optional<DType> block_dtype_from_name(std::string_view name) {
  for (const BlockType& entry : kBlockTypes) {
    if (entry.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size(); ++i)
      same = same && std::toupper(static_cast<unsigned char>(name[i])) == entry.name[i];
    if (same) return entry.dtype;
  }
  return std::nullopt;
}

std::string block_type_names(bool quantizable_only) {
  std::string names;
  for (const BlockType& entry : kBlockTypes) {
    if (quantizable_only && !entry.quantizer) continue;
    if (!names.empty()) names += ", ";
    for (const char ch : entry.name) names += char(std::tolower(static_cast<unsigned char>(ch)));
  }
  return names;
}

DType block_dtype_for_row(DType wanted, int64_t row_length) {
  CHRONOS_CHECK_MSG(dtype_is_block(wanted), "block_dtype_for_row: {} is not a block type", dtype_name(wanted));
  CHRONOS_CHECK_MSG(row_length > 0 && row_length % 32 == 0,
                    "block_dtype_for_row: a row of {} weights fits no block type", row_length);
  if (row_length % dtype_block_elements(wanted) == 0) return wanted;
  return find_block_type(wanted)->short_row_fallback;
}

uint16_t f32_to_f16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow (>= 65520) -> inf
  if (abs < 0x38800000u) {                                  // subnormal or zero in f16
    const float magnitude = std::bit_cast<float>(abs);
    // 2^-24 is the f16 subnormal step; nearbyint rounds half to even.
    return uint16_t(sign | uint16_t(std::nearbyint(magnitude * 16777216.0f)));
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  rounded -= (127u - 15u) << 23;
  return uint16_t(sign | uint16_t(rounded >> 13));
}

}  // namespace chronos
