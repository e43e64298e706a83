// The batch path of the 256-weight types (the K types, IQ4_XS and the IQ grid types) on AVX-512
// VNNI as an outer product: 16 tokens in the int32 lanes of one vector, so that one vpdpbusd is 4
// weights of one row times 4 activations of each of 16 tokens and no lane is ever reduced across.
// Included only by matmul_int8_vnni_avx512.cpp, after matmul_int8_simd.h.
//
// The dot-product steps (step256, step_decoded) put the weights and the activations in the same
// lanes: every (row, token, block) ended in a horizontal sum, and the sign trick cost two more
// instructions per 64 products; with a vpdpbusd per 64 products and nothing else in the inner loop
// the same multiplies run at about twice the rate.
//
// Numerics are step256's, so every ISA, batch size and thread split still gives the same bits. Per
// (row, token, block), in int32 and exactly (no partial sum leaves int32; see matmul_int8_simd.h for
// the ranges):
// - the weights are unsigned codes u: the K types' levels as stored (Q3_K and Q6_K with their offset
//   4 and 32), the signed types' levels plus 128 (IQ4_XS's grid, the IQ2/IQ3 magnitudes with their
//   signs, IQ1's 8 g + delta: all within [-127, 127]), so that vpdpbusd's unsigned operand takes them;
// - s = the sum over the block's groups of the group's integer scale times the group's sum of u * x;
// - m = the sum over the groups of a second integer factor times the group's activation sum (from
//   the activation blocks' bsums): the mins (Q2_K, Q4_K, Q5_K), or the scales again for the types
//   with an offset (Q3_K, Q6_K, the signed types: s - offset * m is then the signed levels' sum);
// - then the scalar reference's f32 steps, blocks in order: acc = fma(d * d_x, float(s), acc) and
//   acc = fnmadd(dmin * d_x, float(m), acc) for the types with mins, acc = fma(d * d_x,
//   float(s - offset * m), acc) for the others (d: the IQ grid types' iq_int8_d).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/matmul_int8_simd.h"

namespace chronos::kernels {
namespace {

// Tokens per panel: the 16 int32 lanes of a 512-bit vector.
constexpr int64_t kTileTokens = 16;
// Rows per pass of the inner kernel (8 accumulators of partial sums, 8 of block sums, 8 of f32).
constexpr int64_t kTileBand = 8;
// Rows decoded at a time: their codes stay in L2 while every panel of the chunk passes over them.
constexpr int64_t kTileRows = 32;
// Panels interleaved at a time, at most (each is 16 tokens x the row's blocks).
constexpr int64_t kTilePanels = 4;
constexpr int64_t kTilePanelBytes = int64_t(384) << 10;

// One activation block of a panel: q[g] holds weights 4 g .. 4 g + 3 of each of the 16 tokens
// (token t in int32 lane t); sums[i][t] token t's activation sums of groups 2 i and 2 i + 1 as two
// int16 (|sum| <= 32 * 127); dx[t] token t's block scale.
struct alignas(64) PanelBlock {
  int8_t q[64][kTileTokens][4];
  int32_t sums[8][kTileTokens];
  float dx[kTileTokens];
};

// One weight block of a row: the codes u in weight order, the integer scale of each group, the
// second factors (mins or scales) of groups 2 i and 2 i + 1 as two int16, and the f32 factors.
struct alignas(64) RowBlock {
  uint8_t code[256];
  int32_t scale[16];
  int32_t factors[8];
  float d, dmin;
};

// The types whose sum has a min term subtracted in f32 (the rest: an offset subtracted in int32).
constexpr bool has_tile_mins(DType d) { return d == DType::kQ2_K || d == DType::kQ4_K || d == DType::kQ5_K; }
// log2 of the offset of the codes: Q3_K 4, Q6_K 32, the signed types 128.
constexpr int tile_offset_log2(DType d) { return d == DType::kQ3_K ? 2 : d == DType::kQ6_K ? 5 : 7; }

// Lane j of out[i] = lane i of v[j]: a 16 x 16 transpose of int32s.
[[gnu::always_inline]] inline void transpose16(__m512i* out, const __m512i* v) {
  __m512i a[16], b[16];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    a[2 * k] = _mm512_unpacklo_epi32(v[2 * k], v[2 * k + 1]);
    a[2 * k + 1] = _mm512_unpackhi_epi32(v[2 * k], v[2 * k + 1]);
  }
  // b[4 k + e], 128-bit lane L: element 4 L + e of rows 4 k .. 4 k + 3.
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    b[4 * k] = _mm512_unpacklo_epi64(a[4 * k], a[4 * k + 2]);
    b[4 * k + 1] = _mm512_unpackhi_epi64(a[4 * k], a[4 * k + 2]);
    b[4 * k + 2] = _mm512_unpacklo_epi64(a[4 * k + 1], a[4 * k + 3]);
    b[4 * k + 3] = _mm512_unpackhi_epi64(a[4 * k + 1], a[4 * k + 3]);
  }
  // A 4 x 4 transpose of 128-bit lanes for each e.
#pragma GCC unroll 4
  for (int e = 0; e < 4; ++e) {
    const __m512i c0 = _mm512_shuffle_i32x4(b[e], b[4 + e], 0x44), c1 = _mm512_shuffle_i32x4(b[e], b[4 + e], 0xEE);
    const __m512i c2 = _mm512_shuffle_i32x4(b[8 + e], b[12 + e], 0x44);
    const __m512i c3 = _mm512_shuffle_i32x4(b[8 + e], b[12 + e], 0xEE);
    out[e] = _mm512_shuffle_i32x4(c0, c2, 0x88);
    out[4 + e] = _mm512_shuffle_i32x4(c0, c2, 0xDD);
    out[8 + e] = _mm512_shuffle_i32x4(c1, c3, 0x88);
    out[12 + e] = _mm512_shuffle_i32x4(c1, c3, 0xDD);
  }
}

// The activation rows of n_valid (1..16) tokens starting at xq (act_bytes apart) as n_blocks
// PanelBlocks; the lanes of a short panel's missing tokens hold zeros (their results are dropped).
template <DType D>
void interleave_panel(PanelBlock* out, const uint8_t* xq, int64_t act_bytes, int64_t n_blocks, int n_valid) {
  constexpr int kPairs = 128 / group_elements(D);
  for (int64_t b = 0; b < n_blocks; ++b) {
    const ActBlock256* a[kTileTokens];
    for (int t = 0; t < kTileTokens; ++t)
      a[t] = reinterpret_cast<const ActBlock256*>(xq + std::min(t, n_valid - 1) * act_bytes) + b;
    PanelBlock& p = out[b];
    for (int c = 0; c < 4; ++c) {
      __m512i v[16], q[16];
#pragma GCC unroll 16
      for (int t = 0; t < kTileTokens; ++t)
        v[t] = t < n_valid ? _mm512_loadu_si512(a[t]->qs + 64 * c) : _mm512_setzero_si512();
      transpose16(q, v);
#pragma GCC unroll 16
      for (int g = 0; g < 16; ++g) _mm512_store_si512(p.q[16 * c + g], q[g]);
    }
    for (int t = 0; t < kTileTokens; ++t) {
      p.dx[t] = t < n_valid ? a[t]->d : 0.0f;
      for (int i = 0; i < kPairs; ++i) {
        const int16_t* bs = a[t]->bsums;
        // Groups of 16: the bsums pair as it is; of 32: sums of two.
        const int lo = kPairs == 8 ? bs[2 * i] : bs[4 * i] + bs[4 * i + 1];
        const int hi = kPairs == 8 ? bs[2 * i + 1] : bs[4 * i + 2] + bs[4 * i + 3];
        p.sums[i][t] = t < n_valid ? int32_t(uint32_t(uint16_t(lo)) | (uint32_t(uint16_t(hi)) << 16)) : 0;
      }
    }
  }
}

// Group g's scale (and, for the types with mins, its min) of a 256-weight block.
template <DType D>
[[gnu::always_inline]] inline void tile_group_factors(const uint8_t* b, int g, int* scale, int* min) {
  *min = 0;
  if constexpr (has_q4_k_scales(D)) {
    q4_k_scale_min(b + q4_k::scales, g, scale, min);
  } else if constexpr (D == DType::kQ2_K) {
    *scale = b[q2_k::scales + g] & 0xF;
    *min = b[q2_k::scales + g] >> 4;
  } else if constexpr (D == DType::kQ3_K) {
    *scale = q3_k_scale(b + q3_k::scales, g);
  } else if constexpr (D == DType::kQ6_K) {
    *scale = int8_t(b[q6_k::scales + g]);
  } else if constexpr (D == DType::kIQ4_XS) {
    *scale = iq4_xs_scale(b, g);
  } else {
    *scale = iq_int8_scale(D, b, g);
  }
}

// A row's blocks as RowBlocks.
template <DType D>
void decode_row_blocks(RowBlock* out, const uint8_t* row, int64_t n_blocks) {
  constexpr int64_t kBlockBytes = kBlockType<D>.block_bytes;
  constexpr int kGroups = 256 / group_elements(D);
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk = row + b * kBlockBytes;
    RowBlock& o = out[b];
    if constexpr (has_scales_only(D)) {  // signed levels from decode_block, + 128
      DecodedBlock decoded;
      decode_block<D>(decoded, blk);
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m256i level = _mm256_sign_epi8(decoded.magnitude[k], decoded.flip[k]);
        _mm256_store_si256(reinterpret_cast<__m256i*>(o.code + 32 * k),
                           _mm256_xor_si256(level, _mm256_set1_epi8(int8_t(0x80))));
      }
      o.d = decoded.factor;
      o.dmin = 0.0f;
    } else {
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k)
        _mm256_store_si256(reinterpret_cast<__m256i*>(o.code + 32 * k), chunk_levels<D>(blk, k));
      constexpr int d_at = has_q4_k_scales(D)  ? q4_k::d
                           : D == DType::kQ2_K ? q2_k::d
                           : D == DType::kQ3_K ? q3_k::d
                                               : q6_k::d;
      o.d = read_f16(blk + d_at);
      o.dmin = has_tile_mins(D) ? read_f16(blk + (D == DType::kQ2_K ? q2_k::dmin : q4_k::dmin)) : 0.0f;
    }
    int second[16];
    for (int g = 0; g < kGroups; ++g) {
      tile_group_factors<D>(blk, g, &o.scale[g], &second[g]);
      if constexpr (!has_tile_mins(D)) second[g] = o.scale[g];
    }
    for (int i = 0; i < kGroups / 2; ++i)
      o.factors[i] = int32_t(uint32_t(uint16_t(second[2 * i])) | (uint32_t(uint16_t(second[2 * i + 1])) << 16));
  }
}

// out[r][t] = rows w[r] (kTileBand of them) against the panel's 16 tokens, over n_blocks blocks.
template <DType D>
[[gnu::always_inline]] inline void band_panel(float (*out)[kTileTokens], const RowBlock* const* w,
                                              const PanelBlock* panel, int64_t n_blocks) {
  constexpr int kGroups = 256 / group_elements(D), kQuads = group_elements(D) / 4;
  __m512 acc[kTileBand];
#pragma GCC unroll 8
  for (int r = 0; r < kTileBand; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const PanelBlock& p = panel[b];
    __m512i s[kTileBand], m[kTileBand];
#pragma GCC unroll 8
    for (int r = 0; r < kTileBand; ++r) s[r] = _mm512_setzero_si512();
    for (int g = 0; g < kGroups; ++g) {
      __m512i raw[kTileBand];
#pragma GCC unroll 8
      for (int r = 0; r < kTileBand; ++r) raw[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int q = 0; q < kQuads; ++q) {
        const __m512i x = _mm512_load_si512(p.q[g * kQuads + q]);
#pragma GCC unroll 8
        for (int r = 0; r < kTileBand; ++r) {
          int32_t u4;
          std::memcpy(&u4, w[r][b].code + 4 * (g * kQuads + q), 4);
          raw[r] = _mm512_dpbusd_epi32(raw[r], _mm512_set1_epi32(u4), x);
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < kTileBand; ++r)
        s[r] = _mm512_add_epi32(s[r], _mm512_mullo_epi32(raw[r], _mm512_set1_epi32(w[r][b].scale[g])));
    }
    // The second sum after the first, so that its accumulators do not compete with raw's registers.
#pragma GCC unroll 8
    for (int r = 0; r < kTileBand; ++r) m[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int i = 0; i < kGroups / 2; ++i) {
      const __m512i sums = _mm512_load_si512(p.sums[i]);
#pragma GCC unroll 8
      for (int r = 0; r < kTileBand; ++r) m[r] = _mm512_dpwssd_epi32(m[r], sums, _mm512_set1_epi32(w[r][b].factors[i]));
    }
    const __m512 dx = _mm512_load_ps(p.dx);
#pragma GCC unroll 8
    for (int r = 0; r < kTileBand; ++r) {
      const __m512 dd = _mm512_mul_ps(_mm512_set1_ps(w[r][b].d), dx);
      if constexpr (has_tile_mins(D)) {
        acc[r] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(s[r]), acc[r]);
        acc[r] = _mm512_fnmadd_ps(_mm512_mul_ps(_mm512_set1_ps(w[r][b].dmin), dx), _mm512_cvtepi32_ps(m[r]), acc[r]);
      } else {
        const __m512i isum = _mm512_sub_epi32(s[r], _mm512_slli_epi32(m[r], tile_offset_log2(D)));
        acc[r] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(isum), acc[r]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kTileBand; ++r) _mm512_storeu_ps(out[r], acc[r]);
}

// The 32-weight types (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, IQ4_NL, MXFP4) the same way, with their own
// steps: per (row, token, block) the exact integer dot of the levels with the activations, then
// step32's f32 steps, acc = fma(d * d_x, float(isum), acc) and, for Q4_1 and Q5_1, acc = fma(m *
// d_x, float(xsum), acc) with xsum the block's activation sum. The codes are the levels plus an
// offset (Q8_0, IQ4_NL, MXFP4: 128; Q4_0: 8, Q5_0: 16, their nibbles as stored; Q4_1, Q5_1: none,
// their levels are unsigned), so isum = the codes' dot - offset * xsum (|codes' dot| <= 32 * 255 *
// 127, exact in int32).

// One activation block of a panel: q[g] holds weights 4 g .. 4 g + 3 of each of the 16 tokens,
// sums[t] token t's sum of the block's 32 activations, dx[t] its block scale.
struct alignas(64) PanelBlock32 {
  int8_t q[8][kTileTokens][4];
  int32_t sums[kTileTokens];
  float dx[kTileTokens];
};

// One weight block of a row: its 32 codes, its scale (MXFP4's E8M0 half-power as f32) and min.
struct RowBlock32 {
  uint8_t code[32];
  float d, m;
};

constexpr bool has_tile_mins32(DType d) { return d == DType::kQ4_1 || d == DType::kQ5_1; }
// log2 of the offset of the codes (none for Q4_1 and Q5_1).
constexpr int tile_offset_log2_32(DType d) {
  return d == DType::kQ4_0 ? 3 : d == DType::kQ5_0 ? 4 : has_tile_mins32(d) ? -1 : 7;
}

// The activation rows of n_valid (1..16) tokens as n_blocks PanelBlock32s, two blocks per transpose
// (an odd last block with zeros beside it); missing tokens' lanes hold zeros.
inline void interleave_panel32(PanelBlock32* out, const uint8_t* xq, int64_t act_bytes, int64_t n_blocks, int n_valid) {
  const ActBlock32* a[kTileTokens];
  for (int t = 0; t < kTileTokens; ++t)
    a[t] = reinterpret_cast<const ActBlock32*>(xq + std::min(t, n_valid - 1) * act_bytes);
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t b = 0; b < n_blocks; b += 2) {
    const bool pair = b + 1 < n_blocks;
    __m512i v[16], q[16];
#pragma GCC unroll 16
    for (int t = 0; t < kTileTokens; ++t) {
      const __m512i first = _mm512_zextsi256_si512(load256(a[t][b].qs));
      v[t] = t >= n_valid ? _mm512_setzero_si512()
             : pair       ? _mm512_inserti64x4(first, load256(a[t][b + 1].qs), 1)
                          : first;
    }
    transpose16(q, v);
    for (int64_t k = 0; k < (pair ? 2 : 1); ++k) {
      PanelBlock32& p = out[b + k];
      __m512i sums = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        _mm512_store_si512(p.q[g], q[8 * k + g]);
        sums = _mm512_dpbusd_epi32(sums, ones, q[8 * k + g]);
      }
      _mm512_store_si512(p.sums, sums);
      for (int t = 0; t < kTileTokens; ++t) p.dx[t] = t < n_valid ? a[t][b + k].d : 0.0f;
    }
  }
}

// A row's blocks as RowBlock32s.
template <DType D>
void decode_row_blocks32(RowBlock32* out, const uint8_t* row, int64_t n_blocks) {
  constexpr int64_t kBlockBytes = kBlockType<D>.block_bytes;
  constexpr int kOffset = tile_offset_log2_32(D) < 0 ? 0 : 1 << tile_offset_log2_32(D);
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk = row + b * kBlockBytes;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].code),
                        _mm256_add_epi8(levels32<D>(blk), _mm256_set1_epi8(int8_t(kOffset & 0xFF))));
    out[b].d = D == DType::kMXFP4 ? e8m0_half(blk[mxfp4::e]) : read_f16(blk);
    out[b].m = has_tile_mins32(D) ? read_f16(blk + q4_1::m) : 0.0f;
  }
}

// out[r][t] = rows w[r] (kTileBand of them) against the panel's 16 tokens, over n_blocks blocks.
template <DType D>
[[gnu::always_inline]] inline void band_panel32(float (*out)[kTileTokens], const RowBlock32* const* w,
                                                const PanelBlock32* panel, int64_t n_blocks) {
  __m512 acc[kTileBand];
#pragma GCC unroll 8
  for (int r = 0; r < kTileBand; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const PanelBlock32& p = panel[b];
    __m512i raw[kTileBand];
#pragma GCC unroll 8
    for (int r = 0; r < kTileBand; ++r) raw[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      const __m512i x = _mm512_load_si512(p.q[q]);
#pragma GCC unroll 8
      for (int r = 0; r < kTileBand; ++r) {
        int32_t u4;
        std::memcpy(&u4, w[r][b].code + 4 * q, 4);
        raw[r] = _mm512_dpbusd_epi32(raw[r], _mm512_set1_epi32(u4), x);
      }
    }
    const __m512 dx = _mm512_load_ps(p.dx);
    const __m512i sums = _mm512_load_si512(p.sums);
#pragma GCC unroll 8
    for (int r = 0; r < kTileBand; ++r) {
      const __m512 dd = _mm512_mul_ps(_mm512_set1_ps(w[r][b].d), dx);
      if constexpr (has_tile_mins32(D)) {
        acc[r] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(raw[r]), acc[r]);
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(w[r][b].m), dx), _mm512_cvtepi32_ps(sums), acc[r]);
      } else {
        const __m512i isum = _mm512_sub_epi32(raw[r], _mm512_slli_epi32(sums, tile_offset_log2_32(D)));
        acc[r] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(isum), acc[r]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kTileBand; ++r) _mm512_storeu_ps(out[r], acc[r]);
}

// Rows [row_begin, row_end) against tokens [0, n_tokens): y[t * rows + r]. Tokens [0, n_tiled) go
// in panels, the last of which may be short; per chunk of panels the activations are interleaved
// once, per kTileRows rows the blocks are decoded once for every panel of the chunk. The tokens
// after n_tiled (1 <= n_tiled) take matmul_int8_rows' single-token steps (dot_rt_int8 with 4 rows x
// 1 token, the same arithmetic per row) on each group of rows while its bytes are still in cache:
// a separate pass read every weight again from memory for each such token, which cost a Q8_0
// prefill from RAM 14% of its MoE time.
template <class Dot, DType D>
void tile_matmul_rows(float* y, const uint8_t* xq, const uint8_t* w, int64_t rows, int64_t cols, int64_t n_tokens,
                      int64_t n_tiled, int64_t row_begin, int64_t row_end) {
  constexpr bool kBlock32 = block_elements_of(D) == 32;
  using Panel = std::conditional_t<kBlock32, PanelBlock32, PanelBlock>;
  using Row = std::conditional_t<kBlock32, RowBlock32, RowBlock>;
  const int64_t n_blocks = cols / block_elements_of(D), row_bytes = dtype_row_bytes(D, cols);
  const int64_t act_bytes = activation_row_bytes(D, cols), panel_bytes = n_blocks * int64_t(sizeof(Panel));
  const int64_t chunk_panels = std::clamp<int64_t>(kTilePanelBytes / panel_bytes, 1, kTilePanels);
  const int64_t rows_bytes = kTileRows * n_blocks * int64_t(sizeof(Row));
  uint8_t* scratch = thread_tile_scratch(chunk_panels * panel_bytes + rows_bytes);
  auto* panels = reinterpret_cast<Panel*>(scratch);
  auto* decoded = reinterpret_cast<Row*>(scratch + chunk_panels * panel_bytes);
  float out[kTileBand][kTileTokens];
  for (int64_t t0 = 0; t0 < n_tiled; t0 += chunk_panels * kTileTokens) {
    const int64_t n_panels = std::min(chunk_panels, (n_tiled - t0 + kTileTokens - 1) / kTileTokens);
    const bool last_chunk = t0 + n_panels * kTileTokens >= n_tiled;
    for (int64_t p = 0; p < n_panels; ++p) {
      const uint8_t* x = xq + (t0 + p * kTileTokens) * act_bytes;
      const int n_valid = int(std::min(kTileTokens, n_tiled - t0 - p * kTileTokens));
      if constexpr (kBlock32)
        interleave_panel32(panels + p * n_blocks, x, act_bytes, n_blocks, n_valid);
      else
        interleave_panel<D>(panels + p * n_blocks, x, act_bytes, n_blocks, n_valid);
    }
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kTileRows) {
      const int64_t n_rows = std::min(kTileRows, row_end - r0);
      const int64_t padded = (n_rows + kTileBand - 1) / kTileBand * kTileBand;
      // Each row's successor kTileRows on into L2 while these rows are decoded, so that it
      // arrives while the panels pass over them: decoding waited on memory for 30% of this
      // function's time on a prefill from RAM without it (perf, Q8_0 experts).
      const int64_t ahead = std::clamp<int64_t>(row_end - r0 - kTileRows, 0, kTileRows);
      for (int64_t r = 0; r < n_rows; ++r) {
        const uint8_t* row = w + (r0 + r) * row_bytes;
        if (r < ahead)
          for (int64_t line = 0; line < row_bytes; line += 64)
            _mm_prefetch(reinterpret_cast<const char*>(row + kTileRows * row_bytes + line), _MM_HINT_T1);
        if constexpr (kBlock32)
          decode_row_blocks32<D>(decoded + r * n_blocks, row, n_blocks);
        else
          decode_row_blocks<D>(decoded + r * n_blocks, row, n_blocks);
      }
      for (int64_t p = 0; p < n_panels; ++p) {
        for (int64_t band = 0; band < padded; band += kTileBand) {
          const Row* band_rows[kTileBand];
          for (int64_t r = 0; r < kTileBand; ++r)  // rows past the end repeat the last; their results are dropped
            band_rows[r] = decoded + std::min(band + r, n_rows - 1) * n_blocks;
          if constexpr (kBlock32)
            band_panel32<D>(out, band_rows, panels + p * n_blocks, n_blocks);
          else
            band_panel<D>(out, band_rows, panels + p * n_blocks, n_blocks);
          const int64_t valid = std::min(kTileBand, n_rows - band);
          const int64_t tokens = std::min(kTileTokens, n_tiled - t0 - p * kTileTokens);
          for (int64_t t = 0; t < tokens; ++t)
            for (int64_t r = 0; r < valid; ++r) y[(t0 + p * kTileTokens + t) * rows + r0 + band + r] = out[r][t];
        }
      }
      if (last_chunk) single_token_rows<Dot, D>(y, xq, w, rows, cols, r0, r0 + n_rows, n_tiled, n_tokens);
    }
  }
}

}  // namespace
}  // namespace chronos::kernels
