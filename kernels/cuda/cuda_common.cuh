// Shared pieces of the CUDA kernels: the launch check (cuda_check.h), grid sizing, warp and block reductions, the
// dtype dispatch of weight loads (f32/f16/bf16 and GGUF's block types), and the warp-per-row dot
// product that matvec and the MoE expert kernels share (each weight row is read once for up to
// kTokenGroup activation rows; block rows are dequantized in registers as they are read).
#pragma once

// fmt switches its constexpr support off when it sees nvcc, which leaves fmt 9's headers
// ill-formed for the host compiler in C++20; the host pass is plain g++, so turn it back on.
// Must precede every include of fmt (this header is the first include of each .cu file).
#if !defined(FMT_USE_CONSTEXPR)
#define FMT_USE_CONSTEXPR 1
#endif

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "chronos/error.h"
#include "chronos/ops.h"
#include "kernels/cuda/block_decode.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.h"

namespace chronos::cuda {

constexpr int kWarpSize = 32;
constexpr int kTokenGroup = 8;  // activation rows per pass over a weight row

// throw_error for nvcc: fmt's compile-time format-string check does not compile under nvcc, so the
// format is checked at run time instead.
template <typename... Args>
[[noreturn]] void throw_cuda_error(const char* format, Args&&... args) {
  throw Error(fmt::format(fmt::runtime(format), std::forward<Args>(args)...));
}

// Blocks for a grid-stride loop over n items: enough to fill any current GPU, never more than the
// items need. n > 0.
inline unsigned grid_for(int64_t n, int threads) {
  constexpr int64_t kMaxBlocks = int64_t(1) << 16;
  const int64_t blocks = (n + threads - 1) / threads;
  return unsigned(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

inline void require_weight_dtype(DType dtype, const char* op) {
  if (is_block_type(dtype) && !dm::is_block_dtype(dtype))  // a row of block_types.h with cuda_kernels false
    throw_cuda_error("CUDA {}: {} weights have no CUDA kernels (Chronos reads them on the CPU only)", op,
                     dtype_name(dtype));
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16 && !dm::is_block_dtype(dtype))
    throw_cuda_error("CUDA {}: unsupported weight dtype {} (F32, F16, BF16 or a block type)", op, dtype_name(dtype));
}

// A block-quantized row must hold whole blocks (a K type on a 128-wide row is stored as its
// 32-weight fallback instead; dtype.h's block_dtype_for_row).
inline void require_whole_blocks(DType dtype, int64_t cols, const char* op, const char* what) {
  if (dm::is_block_dtype(dtype) && cols % dm::block_elements(dtype) != 0)
    throw_cuda_error("CUDA {}: {} rows of {} weights are not whole {} blocks ({} weights each)", op, what, cols,
                     dtype_name(dtype), dm::block_elements(dtype));
}

// Calls f(std::integral_constant<DType, D>{}) for the weight dtype, so kernels are instantiated per
// dtype and their loads carry no run-time branch.
template <typename F>
void with_weight_dtype(DType dtype, const char* op, F&& f) {
  require_weight_dtype(dtype, op);
  switch (dtype) {
    case DType::kF32: return f(std::integral_constant<DType, DType::kF32>{});
    case DType::kF16: return f(std::integral_constant<DType, DType::kF16>{});
    case DType::kBF16: return f(std::integral_constant<DType, DType::kBF16>{});
    default:  // a block type (require_weight_dtype refused the others): one instantiation per table row
      return with_block_type(dtype, [&]<DType D>() {
        if constexpr (dm::kIsBlock<D>) f(std::integral_constant<DType, D>{});
      });
  }
}

CHRONOS_HD inline bool is_aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Whether rows of `cols` weights at `w` can be read 4 elements at a time (16 bytes for f32, 8 for
// f16/bf16) next to 16-byte float4 reads of activation rows at x with the same column count. Block
// rows are read byte by byte whatever their alignment (block_decode.h), so for them only x counts
// (cols is a multiple of 32, require_whole_blocks).
CHRONOS_HD inline bool can_vectorize(const void* w, DType dtype, const float* x, int64_t cols) {
  if (dm::is_block_dtype(dtype)) return cols % 4 == 0 && is_aligned(x, 16);
  const uintptr_t w_bytes = dtype == DType::kF32 ? 16 : 8;
  return cols % 4 == 0 && is_aligned(w, w_bytes) && is_aligned(x, 16);
}

// ---- Reductions (every lane of the warp / thread of the block gets the result) ----------------------

__device__ inline float warp_sum(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__device__ inline float warp_max(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// blockDim.x a multiple of 32; scratch: __shared__ float[32]. Starts with a barrier so scratch may be
// reused by consecutive calls.
__device__ inline float block_sum(float value, float* scratch) {
  const int lane = int(threadIdx.x) % kWarpSize, warp = int(threadIdx.x) / kWarpSize;
  const int n_warps = int(blockDim.x) / kWarpSize;
  value = warp_sum(value);
  __syncthreads();
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  return warp_sum(lane < n_warps ? scratch[lane] : 0.0f);
}

__device__ inline float block_max(float value, float* scratch) {
  const int lane = int(threadIdx.x) % kWarpSize, warp = int(threadIdx.x) / kWarpSize;
  const int n_warps = int(blockDim.x) / kWarpSize;
  value = warp_max(value);
  __syncthreads();
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  return warp_max(lane < n_warps ? scratch[lane] : -INFINITY);
}

// ---- Weight loads ----------------------------------------------------------------------------------

template <DType D>
__device__ inline float load_weight(const void* data, int64_t i) {
  return dm::weight_to_f32(data, D, i);
}

// Elements i .. i+3 (i a multiple of 4, data aligned as can_vectorize checks).
template <DType D>
__device__ inline void load_weight4(const void* data, int64_t i, float (&w)[4]) {
  if constexpr (D == DType::kF32) {
    const float4 v = *reinterpret_cast<const float4*>(static_cast<const float*>(data) + i);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  } else {
    const uint2 v = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(data) + i);
    const uint16_t h[4] = {uint16_t(v.x & 0xffffu), uint16_t(v.x >> 16), uint16_t(v.y & 0xffffu), uint16_t(v.y >> 16)};
    for (int j = 0; j < 4; ++j) w[j] = D == DType::kF16 ? dm::f16_to_f32(h[j]) : dm::bf16_to_f32(h[j]);
  }
}

// row_dot_partial for a block-quantized row: lane l dequantizes weights 8 l .. 8 l + 7 of each
// 256-weight step in registers (block_decode.h) and multiplies them by 8 activations (two float4
// reads with `vec`). The warp reads the step's bytes contiguously.
template <DType D>
__device__ inline void block_row_dot_partial(float (&acc)[kTokenGroup], const void* w, int64_t row, int64_t cols,
                                             const float* x, int64_t x_stride, int n_rows, bool vec) {
  constexpr int kPiece = dm::kBlockPiece;
  const int lane = int(threadIdx.x) % kWarpSize;
  const uint8_t* row_bytes = dm::block_row<D>(w, row, cols);
  for (int64_t c = int64_t(lane) * kPiece; c < cols; c += kWarpSize * kPiece) {
    float wv[kPiece];
    dm::row_weights8<D>(row_bytes, c, wv);
#pragma unroll
    for (int t = 0; t < kTokenGroup; ++t) {
      if (t >= n_rows) continue;
      const float* xt = x + t * x_stride + c;
      if (vec) {
        const float4 a = __ldg(reinterpret_cast<const float4*>(xt));
        const float4 b = __ldg(reinterpret_cast<const float4*>(xt) + 1);
        acc[t] += wv[0] * a.x + wv[1] * a.y + wv[2] * a.z + wv[3] * a.w + wv[4] * b.x + wv[5] * b.y + wv[6] * b.z +
                  wv[7] * b.w;
      } else {
        float sum = 0.0f;
        for (int j = 0; j < kPiece; ++j) sum += wv[j] * __ldg(xt + j);
        acc[t] += sum;
      }
    }
  }
}

// row_dot_partial for an f32/f16/bf16 row: lanes take consecutive columns (or groups of 4 with
// `vec`), so the warp's weight reads are coalesced.
template <DType D>
__device__ inline void float_row_dot_partial(float (&acc)[kTokenGroup], const void* w, int64_t row, int64_t cols,
                                             const float* x, int64_t x_stride, int n_rows, bool vec) {
  const int lane = int(threadIdx.x) % kWarpSize;
  const int64_t base = row * cols;
  if (vec) {
    for (int64_t c = int64_t(lane) * 4; c < cols; c += kWarpSize * 4) {
      float wv[4];
      load_weight4<D>(w, base + c, wv);
#pragma unroll
      for (int t = 0; t < kTokenGroup; ++t) {
        if (t < n_rows) {
          const float4 xv = __ldg(reinterpret_cast<const float4*>(x + t * x_stride + c));
          acc[t] += wv[0] * xv.x + wv[1] * xv.y + wv[2] * xv.z + wv[3] * xv.w;
        }
      }
    }
  } else {
    for (int64_t c = lane; c < cols; c += kWarpSize) {
      const float wv = load_weight<D>(w, base + c);
#pragma unroll
      for (int t = 0; t < kTokenGroup; ++t)
        if (t < n_rows) acc[t] += wv * __ldg(x + t * x_stride + c);
    }
  }
}

// This lane's share of W[row, :] · x[t, :] for t < n_rows (<= kTokenGroup), added to acc[t]; x rows
// are x_stride floats apart. The caller reduces each acc[t] over the warp.
template <DType D>
__device__ inline void row_dot_partial(float (&acc)[kTokenGroup], const void* w, int64_t row, int64_t cols,
                                       const float* x, int64_t x_stride, int n_rows, bool vec) {
  if constexpr (dm::is_block_dtype(D))
    block_row_dot_partial<D>(acc, w, row, cols, x, x_stride, n_rows, vec);
  else
    float_row_dot_partial<D>(acc, w, row, cols, x, x_stride, n_rows, vec);
}

}  // namespace chronos::cuda
