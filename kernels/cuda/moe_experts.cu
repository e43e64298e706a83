// moe_gate_up and moe_down: every expert of one wave in one launch. grid.y is the task (expert),
// grid.x a block of 8 output rows; each warp computes one output row for all the task's grouped
// rows, 8 at a time, as matvec does, with the expert's weight pointer read from the task. Block
// types are dequantized in registers; gate/up and down may differ (a K type falls back to a 32-weight
// type on rows it does not fit), so each launcher takes its own matrices' dtype.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;  // output rows per block

// h[r, f] = silu(x[r] · Wg[f] + bg[f]) * (x[r] · Wu[f] + bu[f]) for the task's rows r (biases when
// the task has them; the clamped SwiGLU when limit > 0).
template <DType D>
__global__ void moe_gate_up_kernel(float* h, const float* x, const ExpertTask* tasks, int64_t n_embd, int64_t n_ff,
                                   float limit, float alpha) {
  const ExpertTask task = tasks[blockIdx.y];
  const int lane = int(threadIdx.x) % kWarpSize;
  const int64_t f = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (f >= n_ff) return;
  // Expert pointers come from wherever the expert cache put them: check alignment per task.
  const bool vec = can_vectorize(task.gate, D, x, n_embd) && can_vectorize(task.up, D, x, n_embd);
  for (int64_t r0 = task.row_begin; r0 < task.row_end; r0 += kTokenGroup) {
    const int n_rows = int(task.row_end - r0 < kTokenGroup ? task.row_end - r0 : kTokenGroup);
    float gate[kTokenGroup] = {}, up[kTokenGroup] = {};
    row_dot_partial<D>(gate, task.gate, f, n_embd, x + r0 * n_embd, n_embd, n_rows, vec);
    row_dot_partial<D>(up, task.up, f, n_embd, x + r0 * n_embd, n_embd, n_rows, vec);
#pragma unroll
    for (int t = 0; t < kTokenGroup; ++t) {
      float g = warp_sum(gate[t]), u = warp_sum(up[t]);
      if (task.gate_bias != nullptr) g += task.gate_bias[f];
      if (task.up_bias != nullptr) u += task.up_bias[f];
      if (lane == 0 && t < n_rows)
        h[(r0 + t) * n_ff + f] = limit > 0.0f ? dm::clamped_swiglu_value(g, u, limit, alpha) : dm::silu_mul_value(g, u);
    }
  }
}

// y[r, e] = h[r] · Wd[e] for the task's rows r.
template <DType D>
__global__ void moe_down_kernel(float* y, const float* h, const ExpertTask* tasks, int64_t n_embd, int64_t n_ff) {
  const ExpertTask task = tasks[blockIdx.y];
  const int lane = int(threadIdx.x) % kWarpSize;
  const int64_t e = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (e >= n_embd) return;
  const bool vec = can_vectorize(task.down, D, h, n_ff);
  for (int64_t r0 = task.row_begin; r0 < task.row_end; r0 += kTokenGroup) {
    const int n_rows = int(task.row_end - r0 < kTokenGroup ? task.row_end - r0 : kTokenGroup);
    float acc[kTokenGroup] = {};
    row_dot_partial<D>(acc, task.down, e, n_ff, h + r0 * n_ff, n_ff, n_rows, vec);
#pragma unroll
    for (int t = 0; t < kTokenGroup; ++t) {
      float sum = warp_sum(acc[t]);
      if (task.down_bias != nullptr) sum += task.down_bias[e];
      if (lane == 0 && t < n_rows) y[(r0 + t) * n_embd + e] = sum;
    }
  }
}

dim3 expert_grid(int64_t out_rows, int32_t n_tasks) {
  return dim3(unsigned((out_rows + kWarpsPerBlock - 1) / kWarpsPerBlock), unsigned(n_tasks));
}

}  // namespace

void moe_gate_up(float* h, const float* x, const ExpertTask* tasks, int32_t n_tasks, DType dtype, int64_t n_embd,
                 int64_t n_ff, cudaStream_t stream, float swiglu_limit, float swiglu_alpha) {
  if (n_tasks <= 0 || n_ff <= 0) return;
  require_whole_blocks(dtype, n_embd, "moe_gate_up", "gate/up");
  with_weight_dtype(dtype, "moe_gate_up", [&](auto d) {
    moe_gate_up_kernel<decltype(d)::value><<<expert_grid(n_ff, n_tasks), kWarpsPerBlock * kWarpSize, 0, stream>>>(
        h, x, tasks, n_embd, n_ff, swiglu_limit, swiglu_alpha);
  });
  CHRONOS_CUDA_CHECK_LAUNCH("moe_gate_up");
}

void moe_down(float* y, const float* h, const ExpertTask* tasks, int32_t n_tasks, DType dtype, int64_t n_embd,
              int64_t n_ff, cudaStream_t stream) {
  if (n_tasks <= 0 || n_embd <= 0) return;
  require_whole_blocks(dtype, n_ff, "moe_down", "down");
  with_weight_dtype(dtype, "moe_down", [&](auto d) {
    moe_down_kernel<decltype(d)::value>
        <<<expert_grid(n_embd, n_tasks), kWarpsPerBlock * kWarpSize, 0, stream>>>(y, h, tasks, n_embd, n_ff);
  });
  CHRONOS_CUDA_CHECK_LAUNCH("moe_down");
}

}  // namespace chronos::cuda
