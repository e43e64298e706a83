// Per-element logic of the CUDA kernels that must match the CPU forward exactly, written once for
// both compilers: nvcc builds it into the kernels (__host__ __device__), g++ builds it into the
// host tests (tests/kernels/test_cuda_device_math.cpp), so what is tested without a GPU is what
// runs on one. Nothing here allocates, loops over more than one token, or touches CUDA APIs.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "chronos/dtype.h"
#include "kernels/host_device.h"
#include "kernels/moe_combine.h"

namespace chronos::cuda::dm {

// ---- Bits <-> float -------------------------------------------------------------------------------

CHRONOS_HD inline uint32_t float_bits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  return std::bit_cast<uint32_t>(value);
#endif
}

CHRONOS_HD inline float bits_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  return std::bit_cast<float>(bits);
#endif
}

// The exp of the CPU ops (std::exp on float) and of the kernels (expf, within 2 ulp of it).
CHRONOS_HD inline float exp_f32(float value) {
#if defined(__CUDA_ARCH__)
  return expf(value);
#else
  return std::exp(value);
#endif
}

CHRONOS_HD inline float sqrt_f32(float value) {
#if defined(__CUDA_ARCH__)
  return sqrtf(value);  // IEEE-rounded unless built with -use_fast_math (it is not)
#else
  return std::sqrt(value);
#endif
}

// ---- bf16 / f16 <-> f32 (the conversions of chronos/dtype.h, bit for bit) ---------------------------

CHRONOS_HD inline float bf16_to_f32(uint16_t bits) { return bits_float(uint32_t(bits) << 16); }

// Round to nearest even; NaN stays NaN (quiet bit set).
CHRONOS_HD inline uint16_t f32_to_bf16(float value) {
  uint32_t bits = float_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

CHRONOS_HD inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    if (mantissa == 0) return bits_float(sign);
    exponent = 127 - 15 + 1;  // subnormal: shift the mantissa up until its leading bit is the implicit one
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    return bits_float(sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13));
  }
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  return bits_float(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

// Round to nearest even, overflow (>= 65520) to inf, NaN to a quiet NaN. Integer-only so that the
// result does not depend on a floating-point rounding mode or on the device's rint.
CHRONOS_HD inline uint16_t f32_to_f16(float value) {
  const uint32_t bits = float_bits(value);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);
  if (abs < 0x38800000u) {
    // Below 2^-14 the result is the f16 subnormal round(|value| * 2^24). With |value| =
    // m * 2^(e - 150) (m the 24-bit significand), that is m / 2^(126 - e).
    const uint32_t exponent = abs >> 23;
    const uint32_t shift = 126u - exponent;  // >= 14 here
    if (shift >= 25) return sign;            // below 2^-25 (or its tie, which goes to even 0)
    const uint32_t significand = (abs & 0x7fffffu) | (exponent != 0 ? 0x800000u : 0u);
    uint32_t quotient = significand >> shift;
    const uint32_t remainder = significand & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (remainder > half || (remainder == half && (quotient & 1u))) ++quotient;  // may carry into 0x400: fine
    return uint16_t(sign | quotient);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  rounded -= (127u - 15u) << 23;
  return uint16_t(sign | uint16_t(rounded >> 13));
}

// value ~= hi + lo with hi, lo in f16 or bf16 (round to nearest even each): two half-precision
// operands carry about twice the significant bits of one, so a product summed from both keeps f32
// activations' accuracy on half-precision tensor-core paths. lo is 0 when hi is not finite.
CHRONOS_HD inline void split_f32(float value, bool f16, uint16_t& hi, uint16_t& lo) {
  hi = f16 ? f32_to_f16(value) : f32_to_bf16(value);
  const float hi_value = f16 ? f16_to_f32(hi) : bf16_to_f32(hi);
  const float rest = value - hi_value;
  const bool finite = rest == rest && rest - rest == 0.0f;  // not NaN, not inf
  lo = finite ? (f16 ? f32_to_f16(rest) : f32_to_bf16(rest)) : uint16_t(0);
}

// Element i of a weight array stored in `dtype` (kF32, kF16 or kBF16), as f32.
CHRONOS_HD inline float weight_to_f32(const void* data, DType dtype, int64_t i) {
  if (dtype == DType::kF32) return static_cast<const float*>(data)[i];
  const uint16_t bits = static_cast<const uint16_t*>(data)[i];
  return dtype == DType::kF16 ? f16_to_f32(bits) : bf16_to_f32(bits);
}

// ---- Element-wise ops (the formulas of kernels/cpu/vector_ops.cpp and src/model) --------------------

// std::clamp(value, -limit, limit), NaN passing through as std::clamp lets it.
CHRONOS_HD inline float clamp_value(float value, float limit) {
  return value < -limit ? -limit : (limit < value ? limit : value);
}

// silu(gate) * up, as silu_mul_scalar writes it.
CHRONOS_HD inline float silu_mul_value(float gate, float up) { return gate / (1.0f + exp_f32(-gate)) * up; }

CHRONOS_HD inline float sigmoid(float value) { return 1.0f / (1.0f + exp_f32(-value)); }

// gpt-oss's clamped SwiGLU, as the CPU's clamped_swiglu writes it (std::min and std::clamp's NaN
// behaviour): min(gate, limit) * sigmoid(alpha * that) * (clamp(up, -limit, limit) + 1).
CHRONOS_HD inline float clamped_swiglu_value(float gate, float up, float limit, float alpha) {
  const float g = limit < gate ? limit : gate;
  const float u = up < -limit ? -limit : (limit < up ? limit : up);
  return g / (1.0f + exp_f32(-alpha * g)) * (u + 1.0f);
}

// rmsnorm's 1 / sqrt(mean(x^2) + eps) from the row's sum of squares; the element is then
// rmsnorm_value(x, scale, weight) = x * scale * weight, multiplied in that order as the CPU does.
CHRONOS_HD inline float rms_scale(float sum_sq, int64_t n, float eps) {
  return 1.0f / sqrt_f32(sum_sq / float(n) + eps);
}
CHRONOS_HD inline float rmsnorm_value(float value, float scale, float weight) { return value * scale * weight; }

// ---- RoPE ----------------------------------------------------------------------------------------

// The flat index of one rotated pair, ordered (token, head, pair): the RoPE kernel runs one
// thread per pair.
struct RopePair {
  int64_t token, head, pair;
};
CHRONOS_HD inline RopePair rope_pair_index(int64_t flat, int64_t n_heads, int64_t half) {
  const int64_t per_token = n_heads * half;
  return {flat / per_token, (flat % per_token) / half, flat % half};
}

// Rotate-half (GPT-NeoX) on pair (i, i + half) of one head: `head` points at the head's first
// element, cos/sin at the position's row of the [n_ctx, half] tables.
CHRONOS_HD inline void rope_rotate_pair(float* head, const float* cos, const float* sin, int64_t half, int64_t i) {
  const float a = head[i], b = head[i + half];
  head[i] = a * cos[i] - b * sin[i];
  head[i + half] = b * cos[i] + a * sin[i];
}

// The same rotation on adjacent channels (2i, 2i + 1) (DeepSeek's interleaved RoPE).
CHRONOS_HD inline void rope_rotate_adjacent(float* head, const float* cos, const float* sin, int64_t i) {
  const float a = head[2 * i], b = head[2 * i + 1];
  head[2 * i] = a * cos[i] - b * sin[i];
  head[2 * i + 1] = b * cos[i] + a * sin[i];
}

// ---- Attention -------------------------------------------------------------------------------------

// Keys [first, last] that query t of a batch starting at position pos0 sees: causal, and only the
// last `window` positions when window > 0.
struct KeyRange {
  int64_t first, last;
};
CHRONOS_HD inline KeyRange attention_key_range(int64_t pos0, int64_t t, int64_t window) {
  const int64_t last = pos0 + t;
  const int64_t first = window > 0 && last - window + 1 > 0 ? last - window + 1 : 0;
  return {first, last};
}

// ---- Router top-k ----------------------------------------------------------------------------------

// True when expert a (probability pa) is ranked before expert b: higher probability first, ties to
// the lower index. A strict total order for non-NaN probabilities, as the CPU's repeated argmax uses.
// Unordered pairs (a NaN on either side) count as ties too: a NaN logit makes the router's softmax
// all NaN, and then the ranks are the expert indices (the CPU's argmax picks 0, 1, ... k-1 as well)
// instead of all colliding at 0, which would leave slots unwritten and their ids undefined.
CHRONOS_HD inline bool ranks_before(float pa, int64_t a, float pb, int64_t b) {
  return pa > pb || (!(pa < pb) && a < b);
}

// Position of expert e in the descending order of probs[0, n): the number of experts ranked before
// it. The kernel gives each expert a thread; the experts of rank < k are the selection, slot = rank.
CHRONOS_HD inline int64_t top_k_rank(const float* probs, int64_t n, int64_t e) {
  int64_t rank = 0;
  for (int64_t other = 0; other < n; ++other) rank += ranks_before(probs[other], other, probs[e], e) ? 1 : 0;
  return rank;
}

// weights[0, k) /= their sum, summed in slot order as the CPU model does.
CHRONOS_HD inline void renormalize_top_k(float* weights, int64_t k) {
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) sum += weights[j];
  for (int64_t j = 0; j < k; ++j) weights[j] /= sum;
}

// Top-k of one token by ranks (what the kernel computes, one rank per thread); k <= n.
CHRONOS_HD inline void top_k_select(int32_t* ids, float* weights, const float* probs, int64_t n, int64_t k,
                                    bool norm_topk) {
  for (int64_t e = 0; e < n; ++e) {
    const int64_t rank = top_k_rank(probs, n, e);
    if (rank < k) {
      ids[rank] = int32_t(e);
      weights[rank] = probs[e];
    }
  }
  if (norm_topk) renormalize_top_k(weights, k);
}

// ---- MoE combine (soft-gated fallback, DESIGN.md §4): kernels/moe_combine.h, shared with the CPU -----

using chronos::combine_plan;
using chronos::combine_value;
using chronos::CombinePlan;

}  // namespace chronos::cuda::dm
