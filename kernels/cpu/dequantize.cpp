// Scalar dequantization of block-quantized rows: the reference every SIMD dequantization and the
// gguf package's numpy decoder are checked against (tests/kernels/test_quant_fixtures.cpp).
#include "chronos/error.h"
#include "chronos/quant.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/quant_layout.h"

namespace chronos {
namespace kernels {

void dequantize_row_scalar(float* out, const void* in, DType dtype, int64_t n) {
  CHRONOS_CHECK_MSG(dtype_is_block(dtype), "dequantize_row: {} is not a block type", dtype_name(dtype));
  const int64_t block = dtype_block_elements(dtype), block_bytes = dtype_block_bytes(dtype);
  const int64_t n_blocks = dtype_row_bytes(dtype, n) / block_bytes;
  const int group = group_elements(dtype);
  const auto* bytes = static_cast<const uint8_t*>(in);
  int8_t q[kMaxBlockElements];
  float mul[kMaxGroups], sub[kMaxGroups];
  for (int64_t b = 0; b < n_blocks; ++b) {
    decode_block(dtype, bytes + b * block_bytes, q, mul, sub);
    float* w = out + b * block;  // [block]
    for (int64_t i = 0; i < block; ++i) w[i] = mul[i / group] * float(q[i]) - sub[i / group];
  }
}

}  // namespace kernels

void dequantize_row(DType dtype, const void* in, float* out, int64_t n) {
  kernels::dequantize_row_scalar(out, in, dtype, n);
}

}  // namespace chronos
