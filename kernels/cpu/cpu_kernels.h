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
  void (*matmul_rows)(float* y, const float* x, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                      int64_t row_end);
  // out[n] = row[n] converted from dtype (F32, F16, BF16 or a block type) to f32; for a block type
  // bit-identical to dequantize_row_scalar.
  void (*row_to_f32)(float* out, const void* row, DType dtype, int64_t n);
  // The 8-bit-activation path for block-type weights (matmul_int8.cpp, matmul_int8_simd.h):
  // quantize_activations writes n_tokens rows of activation blocks for weights of `weight_dtype`
  // (activation_row_bytes each); matmul_rows_int8 is matmul_rows over those rows. Every ISA gives
  // the scalar reference's bits: the integer dots are exact and the f32 steps the same.
  void (*quantize_activations)(void* out, const float* x, DType weight_dtype, int64_t n_tokens, int64_t cols);
  void (*matmul_rows_int8)(float* y, const void* xq, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                           int64_t row_end);
  void (*rmsnorm)(float* y, const float* x, const float* weight, int64_t n, float eps);
  void (*softmax)(float* x, int64_t n);
  void (*silu_mul)(float* out, const float* gate, const float* up, int64_t n);
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float* y, float alpha, const float* x, int64_t n);
  // The bf16-activation path for BF16 weights (matmul_bf16_avx512.cpp), only in the table of a CPU
  // with AVX512_BF16 (null elsewhere): activations_to_bf16 rounds n activations to bf16 (f32_to_bf16),
  // matmul_rows_bf16 is matmul_rows over those rows with vdpbf16ps, bit-identical to
  // matmul_rows_bf16_scalar.
  void (*activations_to_bf16)(uint16_t* out, const float* x, int64_t n);
  void (*matmul_rows_bf16)(float* y, const uint16_t* xb, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                           int64_t row_end);
};

// The table for `isa`; CHRONOS_CHECKs that the CPU supports it.
const CpuKernels& kernels_for(Isa isa);
// The table for active_isa().
const CpuKernels& active_kernels();

// A per-thread f32 buffer of at least n_floats, reused across calls (matmul.cpp). Lives in a
// scalar translation unit so that no std::vector code is compiled for an ISA the CPU may lack.
// ops::reserve_thread_buffers sizes it to kReservedScratchFloats on every pool thread.
constexpr int64_t kReservedScratchFloats = int64_t(1) << 16;  // 256 KiB: a 4-row tile of 16384 columns
float* thread_scratch(int64_t n_floats);

// 8-bit activation blocks for the integer-dot path. 32-weight types (Q8_0, Q4_0, Q5_0) pair with
// ActBlock32, K types with ActBlock256: x[i] ~ d * qs[i], d = max|x| / 127 over the block, qs
// rounded to nearest (ties to even), |qs| <= 127 (so the sign trick's u8 x s8 pairs never
// saturate); bsums[g] = the sum of qs over 16-element group g. A block holding NaN or Inf gets
// d = NaN and qs = 0, so every product it enters is NaN, as on the f32 path.
struct ActBlock32 {
  float d;
  int8_t qs[32];
};
struct ActBlock256 {
  float d;
  int16_t bsums[16];
  int8_t qs[256];
};
// Bytes of one token's activation blocks for a row of `cols` weights of `weight_dtype`.
int64_t activation_row_bytes(DType weight_dtype, int64_t cols);
// A per-thread byte buffer, 64-byte aligned, for the VNNI batch kernel's interleaved activations
// and decoded rows (matmul_int8_tiles.h); it grows to the largest shape seen and is then reused.
uint8_t* thread_tile_scratch(int64_t bytes);
// A per-thread byte buffer for quantized activations, separate from thread_scratch (which the
// kernels use while ops hold this one); reserved as thread_scratch is.
constexpr int64_t kReservedActivationBytes = int64_t(1) << 18;  // 256 KiB
void* thread_activation_scratch(int64_t bytes);

// Block quantization (quantize.cpp, dequantize.cpp): the scalar reference of quant.h's functions.
void quantize_row_scalar(void* out, const float* x, DType dtype, int64_t n);
void dequantize_row_scalar(float* out, const void* in, DType dtype, int64_t n);

// Scalar reference (matmul.cpp, vector_ops.cpp). For a block type, matmul_rows_scalar is the f32
// product of the dequantized row, summed in column order.
void matmul_rows_scalar(float* y, const float* x, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                        int64_t row_end);
void row_to_f32_scalar(float* out, const void* row, DType dtype, int64_t n);
// The integer-dot reference (matmul_int8.cpp): decode_levels' integers, exact integer sums per
// block (or sub-block, times its integer scale), then per row and block in order
// acc = fma(d_w * d_x, float(isum), acc) [and fma(-(dmin_w * d_x), float(isum_min), acc) for Q2_K, Q4_K].
void quantize_activations_scalar(void* out, const float* x, DType weight_dtype, int64_t n_tokens, int64_t cols);
void matmul_rows_int8_scalar(float* y, const void* xq, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                             int64_t row_end);
void rmsnorm_scalar(float* y, const float* x, const float* weight, int64_t n, float eps);
void softmax_scalar(float* x, int64_t n);
void silu_mul_scalar(float* out, const float* gate, const float* up, int64_t n);
float dot_scalar(const float* a, const float* b, int64_t n);
void axpy_scalar(float* y, float alpha, const float* x, int64_t n);

// The bf16-activation reference (matmul_bf16.cpp): per (row, token) kBf16Lanes f32 partial sums
// over the columns in chunks of 2 * kBf16Lanes, lane j adding the exact product of pair element
// 2j + 1 and then of 2j (vdpbf16ps' order; denormal inputs and results are zeros), a zero-padded
// tail, then the lane sum below. Bit-equal to the hardware whenever no product or partial sum
// overflows or falls below the normal range (where vdpbf16ps keeps a wider exponent).
// The lanes are summed as a8[i] = l[i] + l[i + 8], a4[i] = a8[i] + a8[i + 4], then
// (a4[0] + a4[2]) + (a4[1] + a4[3]).
constexpr int kBf16Lanes = 16;
void activations_to_bf16_scalar(uint16_t* out, const float* x, int64_t n);
void matmul_rows_bf16_scalar(float* y, const uint16_t* xb, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                             int64_t row_end);

// AVX2 + FMA + F16C (matmul_avx2.cpp, vector_ops_avx2.cpp).
void matmul_rows_avx2(float* y, const float* x, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                      int64_t row_end);
void row_to_f32_avx2(float* out, const void* row, DType dtype, int64_t n);
void quantize_activations_avx2(void* out, const float* x, DType weight_dtype, int64_t n_tokens, int64_t cols);
void matmul_rows_int8_avx2(float* y, const void* xq, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                           int64_t row_end);
void rmsnorm_avx2(float* y, const float* x, const float* weight, int64_t n, float eps);
void softmax_avx2(float* x, int64_t n);
void silu_mul_avx2(float* out, const float* gate, const float* up, int64_t n);
float dot_avx2(const float* a, const float* b, int64_t n);
void axpy_avx2(float* y, float alpha, const float* x, int64_t n);

// AVX-512 F/BW/VL/DQ (matmul_avx512.cpp, vector_ops_avx512.cpp).
void matmul_rows_avx512(float* y, const float* x, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                        int64_t row_end);
void row_to_f32_avx512(float* out, const void* row, DType dtype, int64_t n);
// AVX-512 VNNI + VL (matmul_int8_vnni_avx512.cpp): the AVX2 integer kernels with vpdpbusd on
// 256-bit vectors for the 32-weight types and vpdpwssd for the K types' scaled sums; chosen only
// where CPUID reports AVX512_VNNI.
void matmul_rows_int8_avx512vnni(float* y, const void* xq, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                                 int64_t row_end);
// AVX-512 + AVX512_BF16 (matmul_bf16_avx512.cpp): chosen only where CPUID reports AVX512_BF16.
void activations_to_bf16_avx512bf16(uint16_t* out, const float* x, int64_t n);
void matmul_rows_bf16_avx512bf16(float* y, const uint16_t* xb, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                                 int64_t row_end);
void rmsnorm_avx512(float* y, const float* x, const float* weight, int64_t n, float eps);
void softmax_avx512(float* x, int64_t n);
void silu_mul_avx512(float* out, const float* gate, const float* up, int64_t n);
float dot_avx512(const float* a, const float* b, int64_t n);
void axpy_avx512(float* y, float alpha, const float* x, int64_t n);

}  // namespace chronos::kernels
