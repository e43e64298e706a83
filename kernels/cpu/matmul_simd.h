// Generic SIMD matmul y[n_tokens, rows] = x[n_tokens, cols] · wᵀ over a traits type V
// (simd_avx2.h, simd_avx512.h). Included only by matmul_avx2.cpp / matmul_avx512.cpp.
//
// Numerics: every output y[t, r] is one vector accumulator (kLanes partial sums) advanced by
// exact f32 FMA over the columns in order, a zero-padded tail, then V::reduce_add. Weights are
// converted to f32 exactly (f16 via F16C, bf16 by a shift), activations stay f32. (The
// bf16-activation path with vdpbf16ps is matmul_bf16_avx512.cpp, chosen by ops::matmul.)
// The arithmetic for one (t, r) never depends on how rows or tokens are blocked, so the result is
// the same whatever row range a thread gets and whatever n_tokens is (matvec == matmul).
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/quant_layout.h"

namespace chronos::kernels {
namespace {  // internal linkage: one copy per ISA translation unit

// How far ahead of the current column the n_tokens == 1 kernel prefetches each weight row, one
// prefetch per 64-byte line; 1 KiB per stream beat 512 B and 2-4 KiB on a 256 MB matrix.
constexpr int64_t kPrefetchBytes = 1024;

// Tokens whose activations are kept hot (L2) while a block of weight rows passes over them.
constexpr int64_t kTokenPanel = 32;

enum class WKind { kF32, kF16, kBF16 };

template <class V, WKind K>
struct WeightLoad;
template <class V>
struct WeightLoad<V, WKind::kF32> {
  using T = float;
  static typename V::Vec load(const T* p) { return V::load(p); }
  static typename V::Vec tail(const T* p, int n) { return V::load_tail(p, n); }
};
template <class V>
struct WeightLoad<V, WKind::kF16> {
  using T = uint16_t;
  static typename V::Vec load(const T* p) { return V::load_f16(p); }
  static typename V::Vec tail(const T* p, int n) { return V::load_f16_tail(p, n); }
};
template <class V>
struct WeightLoad<V, WKind::kBF16> {
  using T = uint16_t;
  static typename V::Vec load(const T* p) { return V::load_bf16(p); }
  static typename V::Vec tail(const T* p, int n) { return V::load_bf16_tail(p, n); }
};

// y[t * y_stride + i] = w[i * cols + :] · x[t * cols + :] for i < RB, t < TB.
template <class V, WKind K, int RB, int TB>
inline void dot_block(float* y, int64_t y_stride, const float* x, const typename WeightLoad<V, K>::T* w, int64_t cols) {
  using L = WeightLoad<V, K>;
  using Vec = typename V::Vec;
  Vec acc[RB][TB];
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i)
#pragma GCC unroll 8
    for (int t = 0; t < TB; ++t) acc[i][t] = V::zero();
  int64_t c = 0;
  for (; c + V::kLanes <= cols; c += V::kLanes) {
    Vec xv[TB];
#pragma GCC unroll 8
    for (int t = 0; t < TB; ++t) xv[t] = V::load(x + t * cols + c);
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) {
      const Vec wv = L::load(w + i * cols + c);
#pragma GCC unroll 8
      for (int t = 0; t < TB; ++t) acc[i][t] = V::fmadd(wv, xv[t], acc[i][t]);
    }
  }
  if (c < cols) {
    const int n = int(cols - c);
    Vec xv[TB];
#pragma GCC unroll 8
    for (int t = 0; t < TB; ++t) xv[t] = V::load_tail(x + t * cols + c, n);
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) {
      const Vec wv = L::tail(w + i * cols + c, n);
#pragma GCC unroll 8
      for (int t = 0; t < TB; ++t) acc[i][t] = V::fmadd(wv, xv[t], acc[i][t]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i)
#pragma GCC unroll 8
    for (int t = 0; t < TB; ++t) y[t * y_stride + i] = V::reduce_add(acc[i][t]);
}

// out[i] = rows[i][:cols] · x[:cols] for i < RB, rows anywhere in memory; the same arithmetic
// per row as dot_block.
template <class V, WKind K, int RB>
inline void dot_rows(float* out, const float* x, const typename WeightLoad<V, K>::T* const* rows, int64_t cols) {
  using L = WeightLoad<V, K>;
  using Vec = typename V::Vec;
  Vec acc[RB];
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i) acc[i] = V::zero();
  int64_t c = 0;
  constexpr int kUnroll =
      64 / (V::kLanes * int(sizeof(typename L::T))) > 1 ? 64 / (V::kLanes * int(sizeof(typename L::T))) : 1;
  for (; c + kUnroll * V::kLanes <= cols; c += kUnroll * V::kLanes) {
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i)  // integer arithmetic: the address may lie past the matrix
      V::prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(rows[i] + c) + kPrefetchBytes));
#pragma GCC unroll 4
    for (int u = 0; u < kUnroll; ++u) {
      const Vec xv = V::load(x + c + u * V::kLanes);
#pragma GCC unroll 8
      for (int i = 0; i < RB; ++i) acc[i] = V::fmadd(L::load(rows[i] + c + u * V::kLanes), xv, acc[i]);
    }
  }
  for (; c + V::kLanes <= cols; c += V::kLanes) {
    const Vec xv = V::load(x + c);
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) acc[i] = V::fmadd(L::load(rows[i] + c), xv, acc[i]);
  }
  if (c < cols) {
    const int n = int(cols - c);
    const Vec xv = V::load_tail(x + c, n);
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) acc[i] = V::fmadd(L::tail(rows[i] + c, n), xv, acc[i]);
  }
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i) out[i] = V::reduce_add(acc[i]);
}

// out[n] = in[n] as f32.
template <class V, WKind K>
void convert_row(float* out, const typename WeightLoad<V, K>::T* in, int64_t n) {
  using L = WeightLoad<V, K>;
  int64_t c = 0;
  for (; c + V::kLanes <= n; c += V::kLanes) V::store(out + c, L::load(in + c));
  if (c < n) V::store_tail(out + c, L::tail(in + c, int(n - c)), int(n - c));
}

// The n_tokens == 1 case: bandwidth-bound, RB rows streamed at once. The row range is cut
// into RB contiguous slices and step k works on row k of every slice, so each of the RB
// streams runs through memory without a break from row to row (the hardware prefetcher keeps
// its streams) instead of restarting every RB rows: +15% on 256 MB matrices. 16-bit rows take
// twice as many instructions per byte, so more are kept in flight. Measured on Zen (GB/s, one
// core, 256 MB BF16): 4 streams 34, 6 streams 35.5, 8 streams 32 (power-of-two spacing
// conflicts), 12 streams 35; F32: 4 streams 42, 8 streams 36-42.
template <class V, WKind K>
void matvec_rows(float* y, const float* x, const typename WeightLoad<V, K>::T* w, int64_t cols, int64_t row_begin,
                 int64_t row_end) {
  constexpr int RB = K == WKind::kF32 ? 4 : 6;
  const int64_t slice = (row_end - row_begin) / RB;  // rows per stream
  const typename WeightLoad<V, K>::T* rows_in_flight[RB];
  for (int64_t k = 0; k < slice; ++k) {
    float out[RB];
    for (int i = 0; i < RB; ++i) rows_in_flight[i] = w + (row_begin + i * slice + k) * cols;
    dot_rows<V, K, RB>(out, x, rows_in_flight, cols);
    for (int i = 0; i < RB; ++i) y[row_begin + i * slice + k] = out[i];
  }
  for (int64_t r = row_begin + RB * slice; r < row_end; ++r) {
    const typename WeightLoad<V, K>::T* row = w + r * cols;
    dot_rows<V, K, 1>(y + r, x, &row, cols);
  }
}

// Tokens [0, n_tokens) against RB f32 weight rows w_tile[RB, cols]; y has row stride `rows`.
template <class V, int RB, int TB = V::kTokenBlock>
void tile_times_tokens(float* y, int64_t rows, const float* x, int64_t n_tokens, const float* w_tile, int64_t cols) {
  int64_t t = 0;
  for (; t + TB <= n_tokens; t += TB) dot_block<V, WKind::kF32, RB, TB>(y + t * rows, rows, x + t * cols, w_tile, cols);
  if constexpr (TB > 1) {
    if (t < n_tokens) tile_times_tokens<V, RB, TB - 1>(y + t * rows, rows, x + t * cols, n_tokens - t, w_tile, cols);
  }
}

// The n_tokens > 1 case: each block of RB weight rows is converted to f32 once per token panel
// and then reused by every token of the panel.
template <class V, WKind K, int RB = 4>
void gemm_rows(float* y, const float* x, const typename WeightLoad<V, K>::T* w, int64_t rows, int64_t cols,
               int64_t n_tokens, int64_t row_begin, int64_t row_end) {
  float* tile = K == WKind::kF32 ? nullptr : thread_scratch(RB * cols);  // [RB, cols]
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokenPanel) {
    const int64_t n_panel = n_tokens - t0 < kTokenPanel ? n_tokens - t0 : kTokenPanel;
    const float* x_panel = x + t0 * cols;  // [n_panel, cols]
    float* y_panel = y + t0 * rows;        // [n_panel, rows]
    for (int64_t r = row_begin; r < row_end; r += RB) {
      const int64_t n_rows = row_end - r < RB ? row_end - r : RB;
      const float* w_tile;
      if constexpr (K == WKind::kF32) {
        w_tile = w + r * cols;
      } else {
        for (int64_t i = 0; i < n_rows; ++i) convert_row<V, K>(tile + i * cols, w + (r + i) * cols, cols);
        w_tile = tile;
      }
      if (n_rows == RB) {
        tile_times_tokens<V, RB>(y_panel + r, rows, x_panel, n_panel, w_tile, cols);
      } else {
        for (int64_t i = 0; i < n_rows; ++i)
          tile_times_tokens<V, 1>(y_panel + r + i, rows, x_panel, n_panel, w_tile + i * cols, cols);
      }
    }
  }
}

// ---- Block-quantized weights (Q8_0 ... Q6_K) ----
// Each block is decoded (quant_layout.h) and its weights formed in f32 as mul * q - sub with
// dequantize_row_scalar's two roundings, so the kernels multiply the exact dequantized weights by
// the f32 activations; the accumulation is dot_block's (one vector accumulator per (row, token),
// columns in order), so matvec == matmul and the thread split cannot change a bit. The integer-dot
// alternative (activations rounded to 8 bits) is measured against this in docs/quantization.md.

// Levels [i, i + kLanes) of one block as int32 lanes: decode_levels (quant_layout.h) read lane-wise.
// i is a multiple of kLanes, so the lanes read consecutive bytes and share their shift.
template <class V, DType D>
[[gnu::always_inline]] inline typename V::IVec block_levels(const uint8_t* b, int i) {
  using I = typename V::IVec;
  const auto bits = [](I v, int shift, int mask) { return V::iand(V::isrl(v, shift), V::iset1(mask)); };
  if constexpr (D == DType::kQ4_0) {
    return V::isub(bits(V::load_u8(b + q4_0::qs + i % 16), i < 16 ? 0 : 4, 0xF), V::iset1(8));
  } else if constexpr (D == DType::kQ5_0) {
    uint32_t qh;
    std::memcpy(&qh, b + q5_0::qh, 4);
    const I high = V::iand(V::isrlv(V::iset1(int(qh)), V::iadd(V::lane_index(), V::iset1(i))), V::iset1(1));
    const I low = bits(V::load_u8(b + q5_0::qs + i % 16), i < 16 ? 0 : 4, 0xF);
    return V::isub(V::ior(low, V::isll(high, 4)), V::iset1(16));
  } else if constexpr (D == DType::kQ4_1) {
    return bits(V::load_u8(b + q4_1::qs + i % 16), i < 16 ? 0 : 4, 0xF);
  } else if constexpr (D == DType::kQ5_1) {
    uint32_t qh;
    std::memcpy(&qh, b + q5_1::qh, 4);
    const I high = V::iand(V::isrlv(V::iset1(int(qh)), V::iadd(V::lane_index(), V::iset1(i))), V::iset1(1));
    return V::ior(bits(V::load_u8(b + q5_1::qs + i % 16), i < 16 ? 0 : 4, 0xF), V::isll(high, 4));
  } else if constexpr (D == DType::kIQ4_NL || D == DType::kMXFP4 || D == DType::kIQ4_XS) {
    // Sub-block i / 32: nibbles of qs[16 (i / 32) + i % 16], low for the first 16 weights; the grid
    // value of each.
    constexpr int qs_at = D == DType::kIQ4_NL ? iq4_nl::qs : D == DType::kMXFP4 ? mxfp4::qs : iq4_xs::qs;
    const I nibble = bits(V::load_u8(b + qs_at + 16 * (i / 32) + i % 16), i % 32 < 16 ? 0 : 4, 0xF);
    return V::lookup16(D == DType::kMXFP4 ? kMxfp4Grid32 : kIq4NlGrid32, nibble);
  } else if constexpr (D == DType::kQ2_K) {
    return bits(V::load_u8(b + q2_k::qs + (i / 128) * 32 + i % 32), 2 * ((i % 128) / 32), 3);
  } else if constexpr (D == DType::kQ3_K) {
    const I low = bits(V::load_u8(b + q3_k::qs + (i / 128) * 32 + i % 32), 2 * ((i % 128) / 32), 3);
    const I high = bits(V::load_u8(b + q3_k::hmask + i % 32), i / 32, 1);
    return V::isub(V::ior(low, V::isll(high, 2)), V::iset1(4));
  } else if constexpr (D == DType::kQ4_K) {
    return bits(V::load_u8(b + q4_k::qs + (i / 64) * 32 + i % 32), 4 * ((i % 64) / 32), 0xF);
  } else if constexpr (D == DType::kQ5_K) {
    const I low = bits(V::load_u8(b + q5_k::qs + (i / 64) * 32 + i % 32), 4 * ((i % 64) / 32), 0xF);
    const I high = bits(V::load_u8(b + q5_k::qh + i % 32), i / 32, 1);
    return V::ior(low, V::isll(high, 4));
  } else {
    static_assert(D == DType::kQ6_K);
    const int h = i / 128, k = i % 128;
    const I low = bits(V::load_u8(b + q6_k::ql + h * 64 + k % 64), 4 * (k / 64), 0xF);
    const I high = bits(V::load_u8(b + q6_k::qh + h * 32 + k % 32), 2 * (k / 32), 3);
    return V::isub(V::ior(low, V::isll(high, 4)), V::iset1(32));
  }
}

// Weights [i, i + kLanes) of one block from its factors (decode_factors): mul * q - sub, the two
// roundings of dequantize_row_scalar, so the result is bit-identical to it.
template <class V, DType D>
[[gnu::always_inline]] inline typename V::Vec block_weights(const uint8_t* block, int i, const float* mul,
                                                            const float* sub) {
  constexpr int kGroup = group_elements(D);
  typename V::Vec q;
  if constexpr (D == DType::kQ8_0) {
    q = V::load_i8(reinterpret_cast<const int8_t*>(block + q8_0::qs) + i);
  } else if constexpr (is_iq_grid_type(D)) {
    // The grid rows are gathered by the scalar decoder, eight weights at a time, then widened.
    alignas(64) int8_t levels[V::kLanes];
#pragma GCC unroll 2
    for (int k = 0; k < V::kLanes; k += 8) decode_iq_levels8(D, block, i + k, levels + k);
    q = V::load_i8(levels);
  } else
    q = V::to_float(block_levels<V, D>(block, i));
  return V::sub(V::mul(q, V::set1(mul[i / kGroup])), V::set1(sub[i / kGroup]));
}

// out[block_elements_of(D)] = one block's weights.
template <class V, DType D>
inline void dequantize_block(const uint8_t* block, float* out) {
  constexpr int kBlock = block_elements_of(D), kGroup = group_elements(D);
  float mul[kBlock / kGroup], sub[kBlock / kGroup];
  decode_factors(D, block, mul, sub);
#pragma GCC unroll 32
  for (int i = 0; i < kBlock; i += V::kLanes) V::store(out + i, block_weights<V, D>(block, i, mul, sub));
}

template <class V, DType D>
void dequantize_row_block(float* out, const uint8_t* row, int64_t n, int64_t block_bytes) {
  constexpr int kBlock = block_elements_of(D);
  for (int64_t b = 0; b < n / kBlock; ++b) dequantize_block<V, D>(row + b * block_bytes, out + b * kBlock);
}

// out[i] = rows[i] · x for i < RB: the weights formed in registers, then dot_block's FMAs.
template <class V, DType D, int RB>
inline void dot_block_rows(float* out, const float* x, const uint8_t* const* rows, int64_t cols, int64_t block_bytes) {
  constexpr int kBlock = block_elements_of(D), kGroups = kBlock / group_elements(D);
  using Vec = typename V::Vec;
  Vec acc[RB];
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i) acc[i] = V::zero();
  for (int64_t b = 0; b < cols / kBlock; ++b) {
    float mul[RB][kGroups], sub[RB][kGroups];
    const uint8_t* block[RB];
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) {
      block[i] = rows[i] + b * block_bytes;
      V::prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(block[i]) + kPrefetchBytes));
      decode_factors(D, block[i], mul[i], sub[i]);
    }
    const float* xb = x + b * kBlock;
#pragma GCC unroll 32
    for (int c = 0; c < kBlock; c += V::kLanes) {
      const Vec xv = V::load(xb + c);
#pragma GCC unroll 8
      for (int i = 0; i < RB; ++i) acc[i] = V::fmadd(block_weights<V, D>(block[i], c, mul[i], sub[i]), xv, acc[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i) out[i] = V::reduce_add(acc[i]);
}

// The n_tokens == 1 case, RB row streams as matvec_rows.
template <class V, DType D, int RB = 4>
void matvec_block_rows(float* y, const float* x, const uint8_t* w, int64_t cols, int64_t row_begin, int64_t row_end) {
  const int64_t block_bytes = dtype_block_bytes(D), row_bytes = dtype_row_bytes(D, cols);
  const int64_t slice = (row_end - row_begin) / RB;
  const uint8_t* rows_in_flight[RB];
  for (int64_t k = 0; k < slice; ++k) {
    float out[RB];
    for (int i = 0; i < RB; ++i) rows_in_flight[i] = w + (row_begin + i * slice + k) * row_bytes;
    dot_block_rows<V, D, RB>(out, x, rows_in_flight, cols, block_bytes);
    for (int i = 0; i < RB; ++i) y[row_begin + i * slice + k] = out[i];
  }
  for (int64_t r = row_begin + RB * slice; r < row_end; ++r) {
    const uint8_t* row = w + r * row_bytes;
    dot_block_rows<V, D, 1>(y + r, x, &row, cols, block_bytes);
  }
}

// The n_tokens > 1 case: gemm_rows with each tile of RB rows dequantized once per token panel.
template <class V, DType D, int RB = 4>
void gemm_block_rows(float* y, const float* x, const uint8_t* w, int64_t rows, int64_t cols, int64_t n_tokens,
                     int64_t row_begin, int64_t row_end) {
  const int64_t block_bytes = dtype_block_bytes(D), row_bytes = dtype_row_bytes(D, cols);
  float* tile = thread_scratch(RB * cols);  // [RB, cols]
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokenPanel) {
    const int64_t n_panel = n_tokens - t0 < kTokenPanel ? n_tokens - t0 : kTokenPanel;
    const float* x_panel = x + t0 * cols;  // [n_panel, cols]
    float* y_panel = y + t0 * rows;        // [n_panel, rows]
    for (int64_t r = row_begin; r < row_end; r += RB) {
      const int64_t n_rows = row_end - r < RB ? row_end - r : RB;
      for (int64_t i = 0; i < n_rows; ++i)
        dequantize_row_block<V, D>(tile + i * cols, w + (r + i) * row_bytes, cols, block_bytes);
      if (n_rows == RB) {
        tile_times_tokens<V, RB>(y_panel + r, rows, x_panel, n_panel, tile, cols);
      } else {
        for (int64_t i = 0; i < n_rows; ++i)
          tile_times_tokens<V, 1>(y_panel + r + i, rows, x_panel, n_panel, tile + i * cols, cols);
      }
    }
  }
}

template <class V>
void matmul_rows_block(float* y, const float* x, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                       int64_t row_end) {
  const auto* data = static_cast<const uint8_t*>(w.data);
  with_block_type(w.dtype, [&]<DType D>() {
    if (n_tokens == 1)
      matvec_block_rows<V, D>(y, x, data, w.cols, row_begin, row_end);
    else
      gemm_block_rows<V, D>(y, x, data, w.rows, w.cols, n_tokens, row_begin, row_end);
  });
}

template <class V, WKind K>
void matmul_rows_typed(float* y, const float* x, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                       int64_t row_end) {
  const auto* data = static_cast<const typename WeightLoad<V, K>::T*>(w.data);
  if (n_tokens == 1)
    matvec_rows<V, K>(y, x, data, w.cols, row_begin, row_end);
  else
    gemm_rows<V, K>(y, x, data, w.rows, w.cols, n_tokens, row_begin, row_end);
}

// Entry point for one ISA; unsupported dtypes go to the scalar reference, which reports them.
template <class V>
void matmul_rows_simd(float* y, const float* x, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                      int64_t row_end) {
  switch (w.dtype) {
    case DType::kF32: return matmul_rows_typed<V, WKind::kF32>(y, x, w, n_tokens, row_begin, row_end);
    case DType::kF16: return matmul_rows_typed<V, WKind::kF16>(y, x, w, n_tokens, row_begin, row_end);
    case DType::kBF16: return matmul_rows_typed<V, WKind::kBF16>(y, x, w, n_tokens, row_begin, row_end);
    default:
      if (dtype_is_block(w.dtype)) return matmul_rows_block<V>(y, x, w, n_tokens, row_begin, row_end);
      return matmul_rows_scalar(y, x, w, n_tokens, row_begin, row_end);
  }
}

template <class V>
void row_to_f32_simd(float* out, const void* row, DType dtype, int64_t n) {
  switch (dtype) {
    case DType::kF32: return convert_row<V, WKind::kF32>(out, static_cast<const float*>(row), n);
    case DType::kF16: return convert_row<V, WKind::kF16>(out, static_cast<const uint16_t*>(row), n);
    case DType::kBF16: return convert_row<V, WKind::kBF16>(out, static_cast<const uint16_t*>(row), n);
    default:
      if (dtype_is_block(dtype)) {
        dtype_row_bytes(dtype, n);  // checks that n is whole blocks
        return with_block_type(dtype, [&]<DType D>() {
          dequantize_row_block<V, D>(out, static_cast<const uint8_t*>(row), n, dtype_block_bytes(D));
        });
      }
      return row_to_f32_scalar(out, row, dtype, n);
  }
}

}  // namespace
}  // namespace chronos::kernels
