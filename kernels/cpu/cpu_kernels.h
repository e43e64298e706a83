// The CPU kernel table: one set of function pointers per instruction set, chosen by dispatch.cpp.
#pragma once

#include <cstdint>

#include "chronos/dtype.h"
#include "chronos/ops.h"

namespace chronos::kernels {

// Every entry has the contract of the ops:: function of the same name (include/chronos/ops.h);
// the kernels never allocate except matmul_rows for F16/BF16/block-type weights, which keeps one
// per-thread f32 tile that grows to 4 * w.cols floats (6 * 256 for a block-type matvec).
struct CpuKernels {
  void (*matmul_rows)(float* y, const float* x, const WeightView& w, int64_t n_tokens,
                      int64_t row_begin, int64_t row_end);
  // out[n] = row[n] converted from dtype (F32, F16, BF16 or a block type) to f32; for a block type
  // bit-identical to dequantize_row_scalar.
  void (*row_to_f32)(float* out, const void* row, DType dtype, int64_t n);
  void (*rmsnorm)(float* y, const float* x, const float* weight, int64_t n, float eps);
  void (*softmax)(float* x, int64_t n);
  void (*silu_mul)(float* out, const float* gate, const float* up, int64_t n);
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float* y, float alpha, const float* x, int64_t n);
};

// The table for `isa`; CHRONOS_CHECKs that the CPU supports it.
const CpuKernels& kernels_for(Isa isa);
// The table for active_isa().
const CpuKernels& active_kernels();

// A per-thread f32 buffer of at least n_floats, reused across calls (matmul.cpp). Lives in a
// scalar translation unit so that no std::vector code is compiled for an ISA the CPU may lack.
float* thread_scratch(int64_t n_floats);

// Block quantization (quantize.cpp, dequantize.cpp): the scalar reference of quant.h's functions.
void quantize_row_scalar(void* out, const float* x, DType dtype, int64_t n);
void dequantize_row_scalar(float* out, const void* in, DType dtype, int64_t n);

// Scalar reference (matmul.cpp, vector_ops.cpp). For a block type, matmul_rows_scalar is the f32
// product of the dequantized row, summed in column order.
void matmul_rows_scalar(float* y, const float* x, const WeightView& w, int64_t n_tokens,
                        int64_t row_begin, int64_t row_end);
void row_to_f32_scalar(float* out, const void* row, DType dtype, int64_t n);
void rmsnorm_scalar(float* y, const float* x, const float* weight, int64_t n, float eps);
void softmax_scalar(float* x, int64_t n);
void silu_mul_scalar(float* out, const float* gate, const float* up, int64_t n);
float dot_scalar(const float* a, const float* b, int64_t n);
void axpy_scalar(float* y, float alpha, const float* x, int64_t n);

// AVX2 + FMA + F16C (matmul_avx2.cpp, vector_ops_avx2.cpp).
void matmul_rows_avx2(float* y, const float* x, const WeightView& w, int64_t n_tokens,
                      int64_t row_begin, int64_t row_end);
void row_to_f32_avx2(float* out, const void* row, DType dtype, int64_t n);
void rmsnorm_avx2(float* y, const float* x, const float* weight, int64_t n, float eps);
void softmax_avx2(float* x, int64_t n);
void silu_mul_avx2(float* out, const float* gate, const float* up, int64_t n);
float dot_avx2(const float* a, const float* b, int64_t n);
void axpy_avx2(float* y, float alpha, const float* x, int64_t n);

// AVX-512 F/BW/VL/DQ (matmul_avx512.cpp, vector_ops_avx512.cpp).
void matmul_rows_avx512(float* y, const float* x, const WeightView& w, int64_t n_tokens,
                        int64_t row_begin, int64_t row_end);
void row_to_f32_avx512(float* out, const void* row, DType dtype, int64_t n);
void rmsnorm_avx512(float* y, const float* x, const float* weight, int64_t n, float eps);
void softmax_avx512(float* x, int64_t n);
void silu_mul_avx512(float* out, const float* gate, const float* up, int64_t n);
float dot_avx512(const float* a, const float* b, int64_t n);
void axpy_avx512(float* y, float alpha, const float* x, int64_t n);

}  // namespace chronos::kernels
