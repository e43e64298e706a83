// DType names and sizes, and the f32 -> f16 conversion.
#include "chronos/dtype.h"

#include <array>
#include <cmath>

namespace chronos {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  int bits;
};

constexpr std::array<DTypeInfo, 17> kDTypes = {{
    {DType::kBool, "BOOL", 8},      {DType::kU8, "U8", 8},          {DType::kI8, "I8", 8},
    {DType::kF8E5M2, "F8_E5M2", 8}, {DType::kF8E4M3, "F8_E4M3", 8}, {DType::kF8E8M0, "F8_E8M0", 8},
    {DType::kI16, "I16", 16},       {DType::kU16, "U16", 16},       {DType::kF16, "F16", 16},
    {DType::kBF16, "BF16", 16},     {DType::kI32, "I32", 32},       {DType::kU32, "U32", 32},
    {DType::kF32, "F32", 32},       {DType::kF64, "F64", 64},       {DType::kI64, "I64", 64},
    {DType::kU64, "U64", 64},       {DType::kC64, "C64", 64},
}};

const DTypeInfo& info(DType dtype) {
  for (const auto& entry : kDTypes)
    if (entry.dtype == dtype) return entry;
  return kDTypes[0];
}

}  // namespace

int dtype_bits(DType dtype) { return info(dtype).bits; }
std::string_view dtype_name(DType dtype) { return info(dtype).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& entry : kDTypes)
    if (entry.name == name) return entry.dtype;
  return std::nullopt;
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
