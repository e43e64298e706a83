// Block quantization of weight rows to GGUF's block types (DType::kQ8_0 ... kQ6_K) and back.
//
// The bytes are GGUF's own layouts (docs/quantization.md), so a row quantized here can be written
// to a GGUF file and a GGUF tensor's rows can be used by ops::matmul as they are. Once quantized,
// a [rows, cols] matrix is used through a WeightView whose dtype is the block type: row r starts
// at data + r * dtype_row_bytes(dtype, cols); ops::matmul, ops::matmul_rows and
// ops::weight_row_to_f32 accept it like an F16 or BF16 matrix.
//
// A K type needs rows that are a multiple of 256 weights: choose the row's type with
// block_dtype_for_row (chronos/dtype.h) first, as GGUF writers do (Q4_K -> Q5_0 on a 128-wide row).
#pragma once

#include <cstdint>

#include "chronos/dtype.h"

namespace chronos {

// out[dtype_row_bytes(dtype, n)] = x[n] quantized: round to nearest with, for the K types, a
// search of each sub-block's scale (and min) that minimizes a weighted squared error, as GGUF's
// reference quantizer does; no calibration data. Deterministic: the same x gives the same bytes.
// n must be a multiple of dtype_block_elements(dtype) (CHRONOS_CHECK); a NaN or infinite x
// throws Error naming the element.
void quantize_row(DType dtype, const float* x, void* out, int64_t n);

// out[n] = the f32 value of each weight of a quantized row, exactly as GGUF defines it (the
// f32 arithmetic of gguf.quants.dequantize, bit for bit). n as for quantize_row.
void dequantize_row(DType dtype, const void* in, float* out, int64_t n);

// quantize_row over rows of a row-major x[rows, cols]; out[rows * dtype_row_bytes(dtype, cols)].
void quantize_rows(DType dtype, const float* x, void* out, int64_t rows, int64_t cols);

}  // namespace chronos
