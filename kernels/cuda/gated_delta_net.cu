// gated_delta_net: Qwen3-Next's and Qwen3.5's linear attention over one run of a sequence's
// consecutive rows (the CPU's CpuOps::gated_delta_net, the same order of operations per head):
//   1. conv_kernel, one thread per channel: the causal depthwise convolution over the run's rows in
//      order, continuing the channel's state (its last kernel - 1 inputs), then SiLU;
//   2. delta_rule_kernel, one block per value head, a thread per value column: per row in order,
//      q and k of the head's key head L2-normalized, the state decayed, the delta rule, o = S^T q,
//      and the gated RMSNorm of o. Reductions are serial in thread 0 (heads are at most 1024 wide),
//      so the sums run in the CPU's order.
// Also split_heads and sigmoid_mul, the gated full attention's two ops.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

constexpr int kMaxHeadWidth = 1024;

__global__ void split_heads_kernel(float* a, float* b, const float* src, int64_t n, int64_t width) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t head = i / width, d = i % width;
    a[i] = src[head * 2 * width + d];
    b[i] = src[head * 2 * width + width + d];
  }
}

__global__ void sigmoid_mul_kernel(float* y, const float* gate, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] *= 1.0f / (1.0f + expf(-gate[i]));
}

__global__ void conv_kernel(float* conv_out, const float* qkv, const float* weight, float* state, int64_t n_rows,
                            int64_t pos0, DeltaNetLayout s, int64_t kernel) {
  const int64_t conv_dim = s.conv_dim(), row_width = s.qkv_row_width();
  for (int64_t ch = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; ch < conv_dim;
       ch += int64_t(gridDim.x) * blockDim.x) {
    if (pos0 == 0)
      for (int64_t j = 0; j + 1 < kernel; ++j) state[j * conv_dim + ch] = 0.0f;
    const float* w = weight + ch * kernel;
    const int64_t column = s.qkv_column(ch);
    for (int64_t t = 0; t < n_rows; ++t) {
      const float x = qkv[t * row_width + column];
      float sum = 0.0f;
      for (int64_t j = 0; j + 1 < kernel; ++j) sum += w[j] * state[j * conv_dim + ch];
      sum += w[kernel - 1] * x;
      for (int64_t j = 0; j + 2 < kernel; ++j) state[j * conv_dim + ch] = state[(j + 1) * conv_dim + ch];
      state[(kernel - 2) * conv_dim + ch] = x;
      conv_out[t * conv_dim + ch] = sum / (1.0f + expf(-sum));
    }
  }
}

__global__ void delta_rule_kernel(float* out, const float* conv_out, const float* qkv, const float* z, const float* b,
                                  const float* a, const float* a_log, const float* dt_bias, const float* norm,
                                  float* state, int64_t n_rows, int64_t pos0, DeltaNetLayout s, float eps) {
  __shared__ float q[kMaxHeadWidth], k[kMaxHeadWidth], o[kMaxHeadWidth];
  __shared__ float beta, decay, inv_rms;
  const int64_t h = blockIdx.x, x = threadIdx.x;
  const int64_t dk = s.k_dim, dv = s.v_dim, nv = s.v_heads;
  const int64_t key_width = s.key_width(), conv_dim = s.conv_dim(), row_width = s.qkv_row_width();
  const int64_t ba_width = s.ba_row_width(), g = s.key_head(h);
  const float* a_rows = a != nullptr ? a : b;  // in_proj_a, or in_proj_ba's a columns
  float* S = state + h * dk * dv;              // [dk, dv]; this thread owns column x
  if (pos0 == 0 && x < dv)
    for (int64_t i = 0; i < dk; ++i) S[i * dv + x] = 0.0f;
  for (int64_t t = 0; t < n_rows; ++t) {
    const float* row = conv_out + t * conv_dim;
    for (int64_t i = x; i < dk; i += blockDim.x) {
      q[i] = row[g * dk + i];
      k[i] = row[key_width + g * dk + i];
    }
    __syncthreads();
    if (x == 0) {
      float qq = 0.0f, kk = 0.0f;
      for (int64_t i = 0; i < dk; ++i) qq += q[i] * q[i];
      for (int64_t i = 0; i < dk; ++i) kk += k[i] * k[i];
      const float q_scale = 1.0f / sqrtf(float(dk));
      const float q_inv = q_scale / sqrtf(qq + 1e-6f), k_inv = 1.0f / sqrtf(kk + 1e-6f);
      for (int64_t i = 0; i < dk; ++i) {
        q[i] *= q_inv;
        k[i] *= k_inv;
      }
      const float b_h = b[t * ba_width + s.b_column(h)];
      const float a_h = a_rows[t * ba_width + s.a_column(h)] + dt_bias[h];
      beta = 1.0f / (1.0f + expf(-b_h));
      const float softplus = a_h > 20.0f ? a_h : log1pf(expf(a_h));
      decay = expf(-expf(a_log[h]) * softplus);
    }
    __syncthreads();
    if (x < dv) {
      float kv_mem = 0.0f;
      for (int64_t i = 0; i < dk; ++i) {
        S[i * dv + x] *= decay;
        kv_mem += S[i * dv + x] * k[i];
      }
      const float delta = (row[2 * key_width + h * dv + x] - kv_mem) * beta;
      float acc = 0.0f;
      for (int64_t i = 0; i < dk; ++i) {
        S[i * dv + x] += k[i] * delta;
        acc += S[i * dv + x] * q[i];
      }
      o[x] = acc;
    }
    __syncthreads();
    if (x == 0) {
      float squares = 0.0f;
      for (int64_t i = 0; i < dv; ++i) squares += o[i] * o[i];
      inv_rms = 1.0f / sqrtf(squares / float(dv) + eps);
    }
    __syncthreads();
    if (x < dv) {
      const float gate = z == nullptr ? qkv[t * row_width + s.z_column(h) + x] : z[t * nv * dv + h * dv + x];
      out[t * nv * dv + h * dv + x] = norm[x] * (o[x] * inv_rms) * (gate / (1.0f + expf(-gate)));
    }
    __syncthreads();
  }
}

}  // namespace

void split_heads(float* a, float* b, const float* src, int64_t rows, int64_t heads, int64_t width,
                 cudaStream_t stream) {
  const int64_t n = rows * heads * width;
  if (n <= 0) return;
  split_heads_kernel<<<grid_for(n, 256), 256, 0, stream>>>(a, b, src, n, width);
  CHRONOS_CUDA_CHECK_LAUNCH("split_heads");
}

void sigmoid_mul(float* y, const float* gate, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  sigmoid_mul_kernel<<<grid_for(n, 256), 256, 0, stream>>>(y, gate, n);
  CHRONOS_CUDA_CHECK_LAUNCH("sigmoid_mul");
}

void gated_delta_net(float* out, float* conv_out, const float* qkv, const float* z, const float* b, const float* a,
                     const DeltaNetWeights& w, float* conv_state, float* recurrent_state, int64_t n_rows, int64_t pos0,
                     const DeltaNetLayout& layout, int64_t kernel_width, float eps, cudaStream_t stream) {
  if (n_rows <= 0) return;
  if (layout.k_dim > kMaxHeadWidth || layout.v_dim > kMaxHeadWidth || layout.v_heads % layout.k_heads != 0)
    throw_cuda_error("CUDA gated_delta_net: heads of {} and {} (at most {}), {} value heads for {} key heads",
                     layout.k_dim, layout.v_dim, kMaxHeadWidth, layout.v_heads, layout.k_heads);
  conv_kernel<<<grid_for(layout.conv_dim(), 128), 128, 0, stream>>>(conv_out, qkv, w.conv, conv_state, n_rows, pos0,
                                                                    layout, kernel_width);
  CHRONOS_CUDA_CHECK_LAUNCH("gated_delta_net convolution");
  const int threads = int((layout.v_dim + kWarpSize - 1) / kWarpSize * kWarpSize);
  delta_rule_kernel<<<unsigned(layout.v_heads), threads, 0, stream>>>(
      out, conv_out, qkv, z, b, a, w.a_log, w.dt_bias, w.norm, recurrent_state, n_rows, pos0, layout, eps);
  CHRONOS_CUDA_CHECK_LAUNCH("gated_delta_net");
}

}  // namespace chronos::cuda
