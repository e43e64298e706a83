// Reference (scalar) quantization of f32 rows to GGUF's block types: round to nearest, with the
// per-sub-block scale and min searches of GGUF's reference quantizer for the K types (a weighted
// least-squares refit over a few candidate scales; no calibration data). Only the layouts have to
// match GGUF bit for bit (quant_layout.h); the searches follow the published algorithms.
#include <algorithm>
#include <cmath>

#include "chronos/error.h"
#include "chronos/quant.h"
#include "kernels/cpu/quant_layout.h"

namespace chronos {
namespace kernels {
namespace {

// Below this a group is treated as all zeros (its scale would underflow f16 anyway).
constexpr float kGroupMaxEps = 1e-15f;

// Round half to even under the default rounding mode.
inline int nearest_int(float v) { return int(std::nearbyint(v)); }

// The element of largest magnitude, with its sign (the first one on ties).
float signed_absmax(const float* x, int n) {
  float max = 0.0f, amax = 0.0f;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  return max;
}

// x[n] ~ scale * L[i] - min_out with L in [0, nmax] and min_out >= 0 (an asymmetric grid whose
// minimum is clamped to <= 0, so zero stays representable). Starts from the min/max grid, then
// tries nstep scales around it, each refitted by weighted least squares for (scale, min); keeps the
// one of least weighted error (absolute error when use_mad, else squared). Returns the scale.
float fit_scale_min(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* min_out, float rmin,
                    float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0], sum_w = weights[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0.0f) min = 0.0f;
  if (max == min) {
    std::fill(L, L + n, uint8_t(0));
    *min_out = -min;
    return 0.0f;
  }
  auto error_of = [&](float scale, float offset, const uint8_t* levels) {
    float error = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float diff = scale * float(levels[i]) + offset - x[i];
      error += weights[i] * (use_mad ? std::fabs(diff) : diff * diff);
    }
    return error;
  };
  float iscale = float(nmax) / (max - min);
  float scale = 1.0f / iscale;
  for (int i = 0; i < n; ++i) L[i] = uint8_t(std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax));
  float best_error = error_of(scale, min, L);
  uint8_t candidate[kMaxBlockElements];
  for (int step = 0; step <= nstep; ++step) {
    iscale = (rmin + rdelta * float(step) + float(nmax)) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
      candidate[i] = uint8_t(l);
      sum_l += weights[i] * float(l);
      sum_l2 += weights[i] * float(l * l);
      sum_xl += weights[i] * float(l) * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det <= 0.0f) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0.0f) {
      this_min = 0.0f;
      this_scale = sum_xl / sum_l2;
    }
    const float error = error_of(this_scale, this_min, candidate);
    if (error < best_error) {
      std::copy(candidate, candidate + n, L);
      best_error = error;
      scale = this_scale;
      min = this_min;
    }
  }
  *min_out = -min;
  return scale;
}

// x[n] ~ scale * (L[i] - nmax) with L - nmax in [-nmax, nmax - 1] (symmetric, weights x^2): the
// max-magnitude grid and 18 scales around it, each refitted by least squares. Returns the scale.
float fit_scale_symmetric(int n, int nmax, const float* x, uint8_t* L) {
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::fill(L, L + n, uint8_t(nmax));
    return 0.0f;
  }
  auto fit = [&](float iscale, float* sum_lx, float* sum_l2) {
    *sum_lx = 0.0f;
    *sum_l2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      *sum_lx += w * x[i] * float(l);
      *sum_l2 += w * float(l * l);
    }
  };
  auto assign = [&](float iscale) {
    for (int i = 0; i < n; ++i) L[i] = uint8_t(std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1) + nmax);
  };
  float iscale = -float(nmax) / max;
  float sum_lx, sum_l2;
  fit(iscale, &sum_lx, &sum_l2);
  assign(iscale);
  float scale = sum_l2 > 0.0f ? sum_lx / sum_l2 : 0.0f;
  float best = scale * sum_lx;
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    iscale = -(float(nmax) + 0.1f * float(step)) / max;
    fit(iscale, &sum_lx, &sum_l2);
    if (sum_l2 > 0.0f && sum_lx * sum_lx > best * sum_l2) {
      assign(iscale);
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

// The 3-bit variant: levels in [-nmax, nmax - 1] (stored + nmax), weights x^2, refined one element
// at a time (a coordinate descent on the least-squares fit, at most five sweeps).
float fit_scale_q3(int n, int nmax, const float* x, uint8_t* L) {
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::fill(L, L + n, uint8_t(nmax));
    return 0.0f;
  }
  const float iscale = -float(nmax) / max;
  int level[16];  // n <= 16: Q3_K's sub-blocks
  float sum_lx = 0.0f, sum_l2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    level[i] = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    const float w = x[i] * x[i];
    sum_lx += w * x[i] * float(level[i]);
    sum_l2 += w * float(level[i] * level[i]);
  }
  for (int sweep = 0; sweep < 5; ++sweep) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sum_lx - w * x[i] * float(level[i]);
      if (slx <= 0.0f) continue;
      float sl2 = sum_l2 - w * float(level[i] * level[i]);
      const int new_level = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (new_level == level[i]) continue;
      slx += w * x[i] * float(new_level);
      sl2 += w * float(new_level * new_level);
      if (sl2 > 0.0f && slx * slx * sum_l2 > sum_lx * sum_lx * sl2) {
        level[i] = new_level;
        sum_lx = slx;
        sum_l2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = uint8_t(level[i] + nmax);
  return sum_l2 > 0.0f ? sum_lx / sum_l2 : 0.0f;
}

void quantize_q8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  write_f16(b + q8_0::d, d);
  for (int i = 0; i < 32; ++i) b[q8_0::qs + i] = uint8_t(int8_t(std::round(x[i] * id)));  // half away from 0
}

// Q4_0 and Q5_0: d = -max / 2^(bits-1) puts the largest magnitude on the extreme level -2^(bits-1).
void quantize_q4_0(const float* x, uint8_t* b) {
  const float d = signed_absmax(x, 32) / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  write_f16(b + q4_0::d, d);
  for (int j = 0; j < 16; ++j) {
    const int low = std::min(15, int(x[j] * id + 8.5f)), high = std::min(15, int(x[j + 16] * id + 8.5f));
    b[q4_0::qs + j] = uint8_t(low | (high << 4));
  }
}

void quantize_q5_0(const float* x, uint8_t* b) {
  const float d = signed_absmax(x, 32) / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  write_f16(b + q5_0::d, d);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const int low = std::min(31, int(x[j] * id + 16.5f)), high = std::min(31, int(x[j + 16] * id + 16.5f));
    b[q5_0::qs + j] = uint8_t((low & 0xF) | ((high & 0xF) << 4));
    qh |= uint32_t(low >> 4) << j;
    qh |= uint32_t(high >> 4) << (j + 16);
  }
  std::memcpy(b + q5_0::qh, &qh, 4);
}

// Q4_1 and Q5_1: d = (max - min) / n_max, m = min, levels truncated from (x - min) / d + 0.5 with
// d and min unrounded (gguf's numpy quantizer and ggml's reference, operation for operation).
// Returns the levels in L[32]; d and m written.
void quantize_min_max32(const float* x, uint8_t* b, int n_max, uint8_t* L) {
  float min = x[0], max = x[0];
  for (int i = 1; i < 32; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
  }
  const float d = (max - min) / float(n_max), id = d != 0.0f ? 1.0f / d : 0.0f;
  write_f16(b + q4_1::d, d);
  write_f16(b + q4_1::m, min);
  for (int i = 0; i < 32; ++i) L[i] = uint8_t(std::min(n_max, int((x[i] - min) * id + 0.5f)));
}

void quantize_q4_1(const float* x, uint8_t* b) {
  uint8_t L[32];
  quantize_min_max32(x, b, 15, L);
  for (int j = 0; j < 16; ++j) b[q4_1::qs + j] = uint8_t(L[j] | (L[j + 16] << 4));
}

void quantize_q5_1(const float* x, uint8_t* b) {
  uint8_t L[32];
  quantize_min_max32(x, b, 31, L);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    b[q5_1::qs + j] = uint8_t((L[j] & 0xF) | ((L[j + 16] & 0xF) << 4));
    qh |= uint32_t(L[j] >> 4) << j;
    qh |= uint32_t(L[j + 16] >> 4) << (j + 16);
  }
  std::memcpy(b + q5_1::qh, &qh, 4);
}

// The grid index nearest to v (grid ascending; the lower one on a tie), by bisection.
int nearest_grid_index(const int8_t* grid, float v) {
  if (v <= float(grid[0])) return 0;
  if (v >= float(grid[15])) return 15;
  int low = 0, high = 15;
  while (high - low > 1) {
    const int mid = (low + high) / 2;
    if (v < float(grid[mid]))
      high = mid;
    else
      low = mid;
  }
  return v - float(grid[high - 1]) < float(grid[high]) - v ? high - 1 : high;
}

// IQ4_NL's search for one sub-block of 32 (llama.cpp's, without an importance matrix: weights
// x^2): the scale putting the largest magnitude on the grid's end, refitted by weighted least
// squares, then 15 trial scales around it (-max / (127 -+ 7)), each refitted, keeping the one of
// largest sum(w q x)^2 / sum(w q q). Returns the scale (0 for an all-zero sub-block).
float fit_iq4_scale(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  if (amax < kGroupMaxEps) return 0.0f;
  auto sums = [&](float id, float* sum_qx, float* sum_q2) {
    *sum_qx = 0.0f;
    *sum_q2 = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float q = float(kIq4NlGrid[nearest_grid_index(kIq4NlGrid, id * x[j])]), w = x[j] * x[j];
      *sum_qx += w * q * x[j];
      *sum_q2 += w * q * q;
    }
  };
  float sum_qx, sum_q2;
  sums(1.0f / (-max / float(kIq4NlGrid[0])), &sum_qx, &sum_q2);
  float d = sum_q2 > 0.0f ? sum_qx / sum_q2 : 0.0f;
  float best = d * sum_qx;
  for (int step = -7; step <= 7; ++step) {
    sums(float(step + kIq4NlGrid[0]) / max, &sum_qx, &sum_q2);
    if (sum_q2 > 0.0f && sum_qx * sum_qx > best * sum_q2) {
      d = sum_qx / sum_q2;
      best = d * sum_qx;
    }
  }
  return d;
}

// 16 bytes of grid indices: weight j in the low nibble of byte j, weight j + 16 in the high one.
void pack_grid_indices(const float* x, float id, uint8_t* qs) {
  for (int j = 0; j < 16; ++j)
    qs[j] = uint8_t(nearest_grid_index(kIq4NlGrid, id * x[j]) | (nearest_grid_index(kIq4NlGrid, id * x[j + 16]) << 4));
}

void quantize_iq4_nl(const float* x, uint8_t* b) {
  const float d = fit_iq4_scale(x);
  write_f16(b + iq4_nl::d, d);
  pack_grid_indices(x, d != 0.0f ? 1.0f / d : 0.0f, b + iq4_nl::qs);
}

// IQ4_XS: IQ4_NL's scale per sub-block, then 6-bit signed scales relative to f16 d = -max / 32 (the
// largest magnitude on -32), and the indices for each rounded scale.
void quantize_iq4_xs(const float* x, uint8_t* b) {
  float scales[8], max_scale = 0.0f, amax_scale = 0.0f;
  for (int g = 0; g < 8; ++g) {
    scales[g] = fit_iq4_scale(x + 32 * g);
    if (std::fabs(scales[g]) > amax_scale) {
      amax_scale = std::fabs(scales[g]);
      max_scale = scales[g];
    }
  }
  const float d = -max_scale / 32.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  write_f16(b + iq4_xs::d, d);
  uint16_t scales_h = 0;
  std::memset(b + iq4_xs::scales_l, 0, 4);
  for (int g = 0; g < 8; ++g) {
    const int l = std::clamp(nearest_int(id * scales[g]), -32, 31);
    const float dl = d * float(l);
    pack_grid_indices(x + 32 * g, dl != 0.0f ? 1.0f / dl : 0.0f, b + iq4_xs::qs + 16 * g);
    b[iq4_xs::scales_l + g / 2] |= uint8_t(((l + 32) & 0xF) << (4 * (g % 2)));
    scales_h = uint16_t(scales_h | (((l + 32) >> 4) << (2 * g)));
  }
  std::memcpy(b + iq4_xs::scales_h, &scales_h, 2);
}

// MXFP4 as gguf's numpy quantizer: the E8M0 exponent floor(log2(amax)) - 2 + 127 puts amax within
// the top E2M1 value (6, doubled 12) times the scale, then each weight takes the grid value of least
// |d q - x| (the first on a tie). An exponent below 0 (amax < 2^-125) is clamped to 0.
void quantize_mxfp4(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const int e = amax > 0.0f ? std::max(0, int(std::floor(std::log2(amax))) - 2 + 127) : 0;
  b[mxfp4::e] = uint8_t(e);
  const float d = e8m0_half(uint8_t(e));
  uint8_t L[32];
  for (int i = 0; i < 32; ++i) {
    float best_error = std::fabs(d * float(kMxfp4Grid[0]) - x[i]);
    L[i] = 0;
    for (int k = 1; k < 16; ++k) {
      const float error = std::fabs(d * float(kMxfp4Grid[k]) - x[i]);
      if (error < best_error) {
        best_error = error;
        L[i] = uint8_t(k);
      }
    }
  }
  for (int j = 0; j < 16; ++j) b[mxfp4::qs + j] = uint8_t(L[j] | (L[j + 16] << 4));
}

// K types, second pass: each weight's level for the sub-block's stored (f16, 4/6-bit) scale and min.
void requantize_group(const float* x, int n, float d, float dm, int nmax, uint8_t* L) {
  for (int i = 0; i < n; ++i) L[i] = uint8_t(std::clamp(nearest_int((x[i] + dm) / d), 0, nmax));
}

void quantize_q2_k(const float* x, uint8_t* b) {
  uint8_t L[256];
  float scales[16], mins[16], weights[16];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
    scales[j] = fit_scale_min(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  // 4-bit scale in the low nibble, 4-bit min in the high one, both relative to f16 d and dmin.
  uint8_t* packed = b + q2_k::scales;
  const float iscale = max_scale > 0.0f ? 15.0f / max_scale : 0.0f;
  const float imin = max_min > 0.0f ? 15.0f / max_min : 0.0f;
  for (int j = 0; j < 16; ++j)
    packed[j] = uint8_t(std::clamp(nearest_int(iscale * scales[j]), 0, 15) |
                        (std::clamp(nearest_int(imin * mins[j]), 0, 15) << 4));
  write_f16(b + q2_k::d, max_scale > 0.0f ? max_scale / 15.0f : 0.0f);
  write_f16(b + q2_k::dmin, max_min > 0.0f ? max_min / 15.0f : 0.0f);
  const float d = read_f16(b + q2_k::d), dmin = read_f16(b + q2_k::dmin);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * float(packed[j] & 0xF);
    if (dl == 0.0f) {
      std::fill(L + 16 * j, L + 16 * j + 16, uint8_t(0));
      continue;
    }
    requantize_group(x + 16 * j, 16, dl, dmin * float(packed[j] >> 4), 3, L + 16 * j);
  }
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* level = L + h * 128 + l;
      b[q2_k::qs + h * 32 + l] = uint8_t(level[0] | (level[32] << 2) | (level[64] << 4) | (level[96] << 6));
    }
}

void quantize_q3_k(const float* x, uint8_t* b) {
  uint8_t L[256];
  float scales[16];
  float max_scale = 0.0f, amax = 0.0f;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_scale_q3(16, 4, x + 16 * j, L + 16 * j);
    if (std::fabs(scales[j]) > amax) {
      amax = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  uint8_t* packed = b + q3_k::scales;
  std::memset(packed, 0, 12);
  if (max_scale != 0.0f) {
    const float iscale = -32.0f / max_scale;
    for (int j = 0; j < 16; ++j) {
      const int l = std::clamp(nearest_int(iscale * scales[j]), -32, 31) + 32;
      packed[j % 8] |= uint8_t((l & 0xF) << (j < 8 ? 0 : 4));
      packed[8 + j % 4] |= uint8_t((l >> 4) << (2 * (j / 4)));
    }
    write_f16(b + q3_k::d, 1.0f / iscale);
  } else {
    write_f16(b + q3_k::d, 0.0f);
  }
  const float d = read_f16(b + q3_k::d);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * float(q3_k_scale(packed, j));
    for (int i = 0; i < 16; ++i)
      L[16 * j + i] = dl == 0.0f ? uint8_t(4) : uint8_t(std::clamp(nearest_int(x[16 * j + i] / dl), -4, 3) + 4);
  }
  // Levels 4..7 set their bit in hmask (weight i: byte i % 32, bit i / 32) and keep two low bits.
  std::memset(b + q3_k::hmask, 0, 32);
  for (int i = 0; i < 256; ++i)
    if (L[i] > 3) {
      b[q3_k::hmask + i % 32] |= uint8_t(1u << (i / 32));
      L[i] = uint8_t(L[i] - 4);
    }
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* level = L + h * 128 + l;
      b[q3_k::qs + h * 32 + l] = uint8_t(level[0] | (level[32] << 2) | (level[64] << 4) | (level[96] << 6));
    }
}

// Q4_K and Q5_K: 8 sub-blocks of 32 with a 6-bit scale and min each, levels 0..n_max (15 or 31)
// in L; d, dmin and the packed scales written (the same fields of both types).
void quantize_scale_min_k(const float* x, uint8_t* b, int n_max, float rmin, int n_step, uint8_t* L) {
  float scales[8], mins[8], weights[32];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    // Weights favour the larger elements of the sub-block, around its RMS.
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float rms = std::sqrt(sum_x2 / 32.0f);
    for (int l = 0; l < 32; ++l) weights[l] = rms + std::fabs(x[32 * j + l]);
    scales[j] = fit_scale_min(32, n_max, x + 32 * j, weights, L + 32 * j, &mins[j], rmin, 0.1f, n_step, false);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  // 6-bit scales and mins relative to f16 d and dmin, packed as q4_k_scale_min reads them.
  uint8_t* packed = b + q4_k::scales;
  std::memset(packed, 0, 12);
  const float iscale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
  const float imin = max_min > 0.0f ? 63.0f / max_min : 0.0f;
  for (int j = 0; j < 8; ++j) {
    const int ls = std::clamp(nearest_int(iscale * scales[j]), 0, 63);
    const int lm = std::clamp(nearest_int(imin * mins[j]), 0, 63);
    if (j < 4) {
      packed[j] = uint8_t(ls);
      packed[j + 4] = uint8_t(lm);
    } else {
      packed[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
      packed[j - 4] |= uint8_t((ls >> 4) << 6);
      packed[j] |= uint8_t((lm >> 4) << 6);
    }
  }
  write_f16(b + q4_k::d, max_scale / 63.0f);
  write_f16(b + q4_k::dmin, max_min / 63.0f);
  const float d = read_f16(b + q4_k::d), dmin = read_f16(b + q4_k::dmin);
  for (int j = 0; j < 8; ++j) {
    int scale, min;
    q4_k_scale_min(packed, j, &scale, &min);
    const float dl = d * float(scale);
    if (dl == 0.0f) {
      std::fill(L + 32 * j, L + 32 * j + 32, uint8_t(0));
      continue;
    }
    requantize_group(x + 32 * j, 32, dl, dmin * float(min), n_max, L + 32 * j);
  }
}

void quantize_q4_k(const float* x, uint8_t* b) {
  uint8_t L[256];
  quantize_scale_min_k(x, b, 15, -1.0f, 20, L);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) b[q4_k::qs + c * 32 + l] = uint8_t(L[c * 64 + l] | (L[c * 64 + 32 + l] << 4));
}

// The search of llama.cpp's reference Q5_K quantizer: a narrower start (rmin -0.5), 15 steps.
void quantize_q5_k(const float* x, uint8_t* b) {
  uint8_t L[256];
  quantize_scale_min_k(x, b, 31, -0.5f, 15, L);
  std::memset(b + q5_k::qh, 0, 32);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const uint8_t low = L[c * 64 + l], high = L[c * 64 + 32 + l];
      b[q5_k::qs + c * 32 + l] = uint8_t((low & 0xF) | ((high & 0xF) << 4));
      b[q5_k::qh + l] |= uint8_t(((low >> 4) << (2 * c)) | ((high >> 4) << (2 * c + 1)));
    }
}

void quantize_q6_k(const float* x, uint8_t* b) {
  uint8_t L[256];
  float scales[16];
  float max_scale = 0.0f, amax = 0.0f;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_scale_symmetric(16, 32, x + 16 * j, L + 16 * j);
    if (std::fabs(scales[j]) > amax) {
      amax = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  if (amax < kGroupMaxEps) {
    std::memset(b, 0, 210);
    return;
  }
  // Signed 8-bit scales relative to f16 d; the largest magnitude maps to -128.
  const float iscale = -128.0f / max_scale;
  for (int j = 0; j < 16; ++j) b[q6_k::scales + j] = uint8_t(int8_t(std::min(127, nearest_int(iscale * scales[j]))));
  write_f16(b + q6_k::d, 1.0f / iscale);
  const float d = read_f16(b + q6_k::d);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * float(int8_t(b[q6_k::scales + j]));
    for (int i = 0; i < 16; ++i)
      L[16 * j + i] = dl == 0.0f ? uint8_t(32) : uint8_t(std::clamp(nearest_int(x[16 * j + i] / dl), -32, 31) + 32);
  }
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* level = L + h * 128 + l;
      b[q6_k::ql + h * 64 + l] = uint8_t((level[0] & 0xF) | ((level[64] & 0xF) << 4));
      b[q6_k::ql + h * 64 + 32 + l] = uint8_t((level[32] & 0xF) | ((level[96] & 0xF) << 4));
      b[q6_k::qh + h * 32 + l] =
          uint8_t((level[0] >> 4) | ((level[32] >> 4) << 2) | ((level[64] >> 4) << 4) | ((level[96] >> 4) << 6));
    }
}

}  // namespace

void quantize_row_scalar(void* out, const float* x, DType dtype, int64_t n) {
  CHRONOS_CHECK_MSG(dtype_is_block(dtype), "quantize_row: {} is not a block type", dtype_name(dtype));
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) throw_error("quantize_row: element {} of the row is {}", i, x[i]);
  const int64_t block = dtype_block_elements(dtype), block_bytes = dtype_block_bytes(dtype);
  const int64_t n_blocks = dtype_row_bytes(dtype, n) / block_bytes;
  auto* bytes = static_cast<uint8_t*>(out);
  for (int64_t k = 0; k < n_blocks; ++k) {
    const float* xb = x + k * block;
    uint8_t* b = bytes + k * block_bytes;
    switch (dtype) {
      case DType::kQ8_0: quantize_q8_0(xb, b); break;
      case DType::kQ4_0: quantize_q4_0(xb, b); break;
      case DType::kQ5_0: quantize_q5_0(xb, b); break;
      case DType::kQ2_K: quantize_q2_k(xb, b); break;
      case DType::kQ3_K: quantize_q3_k(xb, b); break;
      case DType::kQ4_K: quantize_q4_k(xb, b); break;
      case DType::kQ5_K: quantize_q5_k(xb, b); break;
      case DType::kQ6_K: quantize_q6_k(xb, b); break;
      case DType::kQ4_1: quantize_q4_1(xb, b); break;
      case DType::kQ5_1: quantize_q5_1(xb, b); break;
      case DType::kIQ4_NL: quantize_iq4_nl(xb, b); break;
      case DType::kIQ4_XS: quantize_iq4_xs(xb, b); break;
      case DType::kMXFP4: quantize_mxfp4(xb, b); break;
      default: CHRONOS_CHECK_MSG(false, "quantize_row: no quantizer for {}", dtype_name(dtype));
    }
  }
}

}  // namespace kernels

void quantize_row(DType dtype, const float* x, void* out, int64_t n) { kernels::quantize_row_scalar(out, x, dtype, n); }

void quantize_rows(DType dtype, const float* x, void* out, int64_t rows, int64_t cols) {
  const int64_t row_bytes = dtype_row_bytes(dtype, cols);
  for (int64_t r = 0; r < rows; ++r)
    kernels::quantize_row_scalar(static_cast<uint8_t*>(out) + r * row_bytes, x + r * cols, dtype, cols);
}

}  // namespace chronos
