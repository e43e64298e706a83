// DType names and sizes (whole-byte and block types), the block-type fallback rule, and the
// f32 -> f16 conversion.
#include "chronos/dtype.h"

#include <array>
#include <cctype>
#include <cmath>

#include "chronos/error.h"

namespace chronos {
namespace {

// bits is per element for the whole-byte types and 0 for the block types, which have
// block_elements weights in block_bytes bytes instead.
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  int bits;
  int block_elements = 1;
  int block_bytes = 0;
};

constexpr std::array<DTypeInfo, 25> kDTypes = {{
    {DType::kBool, "BOOL", 8},      {DType::kU8, "U8", 8},          {DType::kI8, "I8", 8},
    {DType::kF8E5M2, "F8_E5M2", 8}, {DType::kF8E4M3, "F8_E4M3", 8}, {DType::kF8E8M0, "F8_E8M0", 8},
    {DType::kI16, "I16", 16},       {DType::kU16, "U16", 16},       {DType::kF16, "F16", 16},
    {DType::kBF16, "BF16", 16},     {DType::kI32, "I32", 32},       {DType::kU32, "U32", 32},
    {DType::kF32, "F32", 32},       {DType::kF64, "F64", 64},       {DType::kI64, "I64", 64},
    {DType::kU64, "U64", 64},       {DType::kC64, "C64", 64},
    // GGUF's sizes (ggml-common.h): blocks of 32 (QK8_0, QK4_0, QK5_0) or 256 (QK_K) weights.
    {DType::kQ8_0, "Q8_0", 0, 32, 34},   {DType::kQ4_0, "Q4_0", 0, 32, 18},
    {DType::kQ5_0, "Q5_0", 0, 32, 22},   {DType::kQ2_K, "Q2_K", 0, 256, 84},
    {DType::kQ3_K, "Q3_K", 0, 256, 110}, {DType::kQ4_K, "Q4_K", 0, 256, 144},
    {DType::kQ6_K, "Q6_K", 0, 256, 210}, {DType::kQ5_K, "Q5_K", 0, 256, 176},
}};

const DTypeInfo& info(DType dtype) {
  for (const auto& entry : kDTypes)
    if (entry.dtype == dtype) return entry;
  check_failed("dtype in kDTypes", __FILE__, __LINE__, fmt::format("unknown DType {}", int(dtype)));
}

}  // namespace

int dtype_bits(DType dtype) {
  const DTypeInfo& entry = info(dtype);
  CHRONOS_CHECK_MSG(entry.bits > 0, "{} is a block type: it has no per-element size", entry.name);
  return entry.bits;
}

int64_t dtype_size(DType dtype) { return dtype_bits(dtype) / 8; }

std::string_view dtype_name(DType dtype) { return info(dtype).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& entry : kDTypes)
    if (entry.bits > 0 && entry.name == name) return entry.dtype;
  return std::nullopt;
}

bool dtype_is_block(DType dtype) { return info(dtype).bits == 0; }

int64_t dtype_block_elements(DType dtype) { return info(dtype).block_elements; }

int64_t dtype_block_bytes(DType dtype) {
  const DTypeInfo& entry = info(dtype);
  return entry.bits > 0 ? entry.bits / 8 : entry.block_bytes;
}

int64_t dtype_row_bytes(DType dtype, int64_t n_elements) {
  const DTypeInfo& entry = info(dtype);
  CHRONOS_CHECK_MSG(n_elements >= 0 && n_elements % entry.block_elements == 0,
                    "a {} row of {} elements is not a whole number of {}-element blocks", entry.name,
                    n_elements, entry.block_elements);
  return entry.bits > 0 ? n_elements * (entry.bits / 8) : n_elements / entry.block_elements * entry.block_bytes;
}

std::optional<DType> block_dtype_from_name(std::string_view name) {
  for (const auto& entry : kDTypes) {
    if (entry.bits > 0 || entry.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size(); ++i)
      same = same && std::toupper(static_cast<unsigned char>(name[i])) == entry.name[i];
    if (same) return entry.dtype;
  }
  return std::nullopt;
}

DType block_dtype_for_row(DType wanted, int64_t row_length) {
  CHRONOS_CHECK_MSG(dtype_is_block(wanted), "block_dtype_for_row: {} is not a block type", dtype_name(wanted));
  CHRONOS_CHECK_MSG(row_length > 0 && row_length % 32 == 0,
                    "block_dtype_for_row: a row of {} weights fits no block type", row_length);
  if (row_length % dtype_block_elements(wanted) == 0) return wanted;
  switch (wanted) {
    case DType::kQ4_K:
    case DType::kQ5_K: return DType::kQ5_0;
    case DType::kQ6_K: return DType::kQ8_0;
    default: return DType::kQ4_0;  // Q2_K, Q3_K
  }
}

uint16_t f32_to_f16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
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
