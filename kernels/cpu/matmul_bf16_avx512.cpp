// The bf16-activation path for BF16 weights on AVX512_BF16: activations rounded to bf16 once per
// call (ops::matmul), then vdpbf16ps, 32 products per instruction straight from the stored weights
// with no conversion, against the f32 path's 16 per FMA after a widening of every weight.
// Numerics: each (row, token) is one 16-lane accumulator advanced chunk by chunk over the columns
// (masked zeros past the end), then the reference's lane order: matmul_rows_bf16_scalar
// (matmul_bf16.cpp) bit for bit, whatever the row range, the token count or the blocking.
// kernels/CMakeLists.txt compiles *_avx512.cpp for AVX-512 F/BW/VL/DQ; AVX512_BF16 is added here
// for this file alone, and the dispatch uses it only where CPUID reports it.
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512bf16"))), apply_to = function)
#else
#pragma GCC target("avx512bf16")
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"

namespace chronos::kernels {
namespace {

constexpr int64_t kChunk = 2 * kBf16Lanes;  // bf16 values per 512-bit vector

// How far ahead of the current column the single-token kernel prefetches each weight row.
constexpr int64_t kPrefetchElements = 512;

__m512i load_chunk(const uint16_t* p) { return _mm512_loadu_si512(p); }
__m512i load_tail(const uint16_t* p, int n) { return _mm512_maskz_loadu_epi16(__mmask32((uint64_t(1) << n) - 1), p); }

__m512 dot(__m512 acc, __m512i x, __m512i w) { return _mm512_dpbf16_ps(acc, __m512bh(x), __m512bh(w)); }

// The reference's lane sum (cpu_kernels.h) with vector adds: the same additions in the same order. (Extracts rather
// than casts for the low halves: GCC 12 flags its own 512-to-256-bit cast as uninitialized, bug 105593.)
float reduce(__m512 acc) {
  const __m256 a8 = _mm256_add_ps(_mm512_extractf32x8_ps(acc, 0), _mm512_extractf32x8_ps(acc, 1));
  const __m128 a4 = _mm_add_ps(_mm256_extractf128_ps(a8, 0), _mm256_extractf128_ps(a8, 1));
  const __m128 a2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));  // a4[0] + a4[2], a4[1] + a4[3]
  return _mm_cvtss_f32(_mm_add_ss(a2, _mm_movehdup_ps(a2)));
}

// y[t * y_stride + i] = rows[i] . x[t] for i < RB, t < TB; x holds TB token rows `cols` apart.
// While the first token block of a row block runs, `next` (RB rows or null) is pulled into cache.
template <int RB, int TB>
void dot_tile(float* y, int64_t y_stride, const uint16_t* x, const uint16_t* const* rows, int64_t cols,
              const uint16_t* const* next) {
  __m512 acc[RB][TB];
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i)
#pragma GCC unroll 8
    for (int t = 0; t < TB; ++t) acc[i][t] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + kChunk <= cols; c += kChunk) {
    __m512i w[RB];
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) {
      w[i] = load_chunk(rows[i] + c);
      if (next != nullptr) _mm_prefetch(reinterpret_cast<const char*>(next[i] + c), _MM_HINT_T1);
    }
#pragma GCC unroll 8
    for (int t = 0; t < TB; ++t) {
      const __m512i xv = load_chunk(x + t * cols + c);
#pragma GCC unroll 8
      for (int i = 0; i < RB; ++i) acc[i][t] = dot(acc[i][t], xv, w[i]);
    }
  }
  if (c < cols) {
    const int n = int(cols - c);
#pragma GCC unroll 8
    for (int t = 0; t < TB; ++t) {
      const __m512i xv = load_tail(x + t * cols + c, n);
#pragma GCC unroll 8
      for (int i = 0; i < RB; ++i) acc[i][t] = dot(acc[i][t], xv, load_tail(rows[i] + c, n));
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < TB; ++t)
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) y[t * y_stride + i] = reduce(acc[i][t]);
}

// Every token of x against RB rows: blocks of TB tokens, then the rest one size smaller at a time.
template <int RB, int TB>
void rows_times_tokens(float* y, int64_t y_stride, const uint16_t* x, int64_t n_tokens, const uint16_t* const* rows,
                       int64_t cols, const uint16_t* const* next) {
  int64_t t = 0;
  for (; t + TB <= n_tokens; t += TB, next = nullptr)
    dot_tile<RB, TB>(y + t * y_stride, y_stride, x + t * cols, rows, cols, next);
  if constexpr (TB > 1) {
    if (t < n_tokens)
      rows_times_tokens<RB, TB - 1>(y + t * y_stride, y_stride, x + t * cols, n_tokens - t, rows, cols, next);
  }
}

// A single token: bandwidth-bound, RB row streams at once from RB contiguous slices of the range
// (as matmul_simd.h's matvec_rows), each prefetched kPrefetchElements ahead.
template <int RB>
void matvec(float* y, const uint16_t* x, const uint16_t* w, int64_t cols, int64_t row_begin, int64_t row_end) {
  const int64_t slice = (row_end - row_begin) / RB;
  for (int64_t k = 0; k < slice; ++k) {
    const uint16_t* rows[RB];
    const uint16_t* ahead[RB];
    float out[RB];
    for (int i = 0; i < RB; ++i) {
      rows[i] = w + (row_begin + i * slice + k) * cols;
      ahead[i] = rows[i] + kPrefetchElements;
    }
    dot_tile<RB, 1>(out, 1, x, rows, cols, ahead);
    for (int i = 0; i < RB; ++i) y[row_begin + i * slice + k] = out[i];
  }
  for (int64_t r = row_begin + RB * slice; r < row_end; ++r) {
    const uint16_t* row = w + r * cols;
    dot_tile<1, 1>(y + r, 1, x, &row, cols, nullptr);
  }
}

}  // namespace

void activations_to_bf16_avx512bf16(uint16_t* out, const float* x, int64_t n) {
  // f32_to_bf16 sixteen at a time: round to nearest even on the bits, NaN kept quiet.
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff), quiet = _mm512_set1_epi32(0x40);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  for (int64_t i = 0; i < n; i += 16) {
    const int m = n - i < 16 ? int(n - i) : 16;
    const __mmask16 mask = __mmask16((1u << m) - 1u);
    const __m512i bits = _mm512_maskz_loadu_epi32(mask, x + i);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(bias, lsb)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, abs_mask), inf);
    rounded = _mm512_mask_or_epi32(rounded, nan, _mm512_srli_epi32(bits, 16), quiet);
    _mm256_mask_storeu_epi16(out + i, mask, _mm512_cvtepi32_epi16(rounded));
  }
}

void matmul_rows_bf16_avx512bf16(float* y, const uint16_t* xb, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                                 int64_t row_end) {
  constexpr int RB = 4, TB = 4;  // 16 accumulators, 4 weight vectors and a token vector
  const auto* weights = static_cast<const uint16_t*>(w.data);
  const int64_t cols = w.cols;
  if (n_tokens == 1) return matvec<6>(y, xb, weights, cols, row_begin, row_end);
  int64_t r = row_begin;
  for (; r + RB <= row_end; r += RB) {
    const uint16_t* rows[RB];
    const uint16_t* next[RB];
    for (int i = 0; i < RB; ++i) {
      rows[i] = weights + (r + i) * cols;
      next[i] = r + RB + i < row_end ? rows[i] + RB * cols : rows[i];
    }
    rows_times_tokens<RB, TB>(y + r, w.rows, xb, n_tokens, rows, cols, next);
  }
  for (; r < row_end; ++r) {
    const uint16_t* row = weights + r * cols;
    rows_times_tokens<1, TB>(y + r, w.rows, xb, n_tokens, &row, cols, nullptr);
  }
}

}  // namespace chronos::kernels

#if defined(__clang__)
#pragma clang attribute pop
#endif
