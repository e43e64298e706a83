// convert_f32: f32 -> f16/bf16 with the round-to-nearest-even of device_math.h (bit for bit the
// host's chronos/dtype.h), producing cuBLAS inputs.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

template <DType D>
__global__ void convert_kernel(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = D == DType::kF16 ? dm::f32_to_f16(src[i]) : dm::f32_to_bf16(src[i]);
}

template <DType D>
__global__ void split_kernel(uint16_t* hi, uint16_t* lo, const float* src, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dm::split_f32(src[i], D == DType::kF16, hi[i], lo[i]);
}

}  // namespace

void split_f32(void* hi, void* lo, DType dtype, const float* src, int64_t n, cudaStream_t stream) {
  if (dtype != DType::kF16 && dtype != DType::kBF16)
    throw_cuda_error("CUDA split_f32: target dtype {} is not F16 or BF16", dtype_name(dtype));
  if (n <= 0) return;
  auto* h = static_cast<uint16_t*>(hi);
  auto* l = static_cast<uint16_t*>(lo);
  if (dtype == DType::kF16)
    split_kernel<DType::kF16><<<grid_for(n, 256), 256, 0, stream>>>(h, l, src, n);
  else
    split_kernel<DType::kBF16><<<grid_for(n, 256), 256, 0, stream>>>(h, l, src, n);
  CHRONOS_CUDA_CHECK_LAUNCH("split_f32");
}

void convert_f32(void* dst, DType dtype, const float* src, int64_t n, cudaStream_t stream) {
  if (dtype != DType::kF16 && dtype != DType::kBF16)
    throw_cuda_error("CUDA convert_f32: target dtype {} is not F16 or BF16", dtype_name(dtype));
  if (n <= 0) return;
  auto* out = static_cast<uint16_t*>(dst);
  if (dtype == DType::kF16)
    convert_kernel<DType::kF16><<<grid_for(n, 256), 256, 0, stream>>>(out, src, n);
  else
    convert_kernel<DType::kBF16><<<grid_for(n, 256), 256, 0, stream>>>(out, src, n);
  CHRONOS_CUDA_CHECK_LAUNCH("convert_f32");
}

}  // namespace chronos::cuda
