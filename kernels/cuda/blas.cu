// Blas: cuBLAS for the large products of prefill and the LM head, f32 accumulation and output.
//
// Layout. Chronos is row-major, cuBLAS column-major, and a row-major [a, b] matrix is the same
// memory as a column-major [b, a] one (its transpose). With R = w.rows, C = w.cols:
//   y row-major [n, R]  = column-major Y' = y^T, [R, n], ld R
//   W row-major [R, C]  = column-major W' = W^T, [C, R], ld C
//   x row-major [n, C]  = column-major X' = x^T, [C, n], ld C
// We want y = x W^T, i.e. y^T = W x^T, i.e. Y' = (W')^T X'. So the column-major call is
// C(m = R, n = n) = op(A) B with A = W' (transposed: CUBLAS_OP_T, lda = C), B = X' (CUBLAS_OP_N,
// ldb = C), k = C, ldc = R.
#include <cublas_v2.h>

#include <limits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cuda_error("cuBLAS {}: {}", what, cublasGetStatusString(status));
}

cublasHandle_t as_handle(void* handle) { return static_cast<cublasHandle_t>(handle); }

int to_int(int64_t value, const char* what) {
  if (value < 0 || value > std::numeric_limits<int>::max())
    throw_cuda_error("cuBLAS gemm: {} = {} does not fit a cuBLAS int", what, value);
  return int(value);
}

}  // namespace

Blas::Blas() : handle_(nullptr) {
  cublasHandle_t handle = nullptr;
  check_cublas(cublasCreate(&handle), "cublasCreate");
  // Default math: no TF32 for the f32 products, so they are true f32 SGEMMs.
  const cublasStatus_t status = cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH);
  if (status != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(handle);
    check_cublas(status, "cublasSetMathMode");
  }
  handle_ = handle;
}

Blas::~Blas() {
  if (handle_ != nullptr) cublasDestroy(as_handle(handle_));
}

void Blas::gemm(float* y, const float* x, const WeightView& w, int64_t n, void* x_converted, cudaStream_t stream) {
  if (n <= 0 || w.rows <= 0) return;
  const int m = to_int(w.rows, "rows"), k = to_int(w.cols, "cols"), cols_n = to_int(n, "n");
  cublasHandle_t handle = as_handle(handle_);
  check_cublas(cublasSetStream(handle, stream), "cublasSetStream");
  const float alpha = 1.0f, beta = 0.0f;
  if (w.dtype == DType::kF32) {
    // CUBLAS_COMPUTE_32F_PEDANTIC: f32 arithmetic throughout, whatever the math mode or environment.
    check_cublas(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, cols_n, k, &alpha, w.data, CUDA_R_32F, k, x,
                              CUDA_R_32F, k, &beta, y, CUDA_R_32F, m, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
                 "gemm (F32)");
    return;
  }
  if (w.dtype != DType::kF16 && w.dtype != DType::kBF16)
    throw_cuda_error("cuBLAS gemm: unsupported weight dtype {} (F32, F16 or BF16)", dtype_name(w.dtype));
  if (x_converted == nullptr)
    throw_cuda_error("cuBLAS gemm: {} weights need an x_converted buffer", dtype_name(w.dtype));
  // x = hi + lo in the weight dtype, y = W hi + W lo: the activations keep about 16 significant
  // bits instead of bf16's 8, so prefill logits stay as close to the f32 CPU path as decode's.
  void* hi = x_converted;
  void* lo = static_cast<uint16_t*>(x_converted) + n * w.cols;
  split_f32(hi, lo, w.dtype, x, n * w.cols, stream);
  const cudaDataType_t type = w.dtype == DType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
  const char* what = w.dtype == DType::kF16 ? "gemm (F16)" : "gemm (BF16)";
  const float accumulate = 1.0f;
  check_cublas(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, cols_n, k, &alpha, w.data, type, k, hi, type, k,
                            &beta, y, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               what);
  check_cublas(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, cols_n, k, &alpha, w.data, type, k, lo, type, k,
                            &accumulate, y, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               what);
}

}  // namespace chronos::cuda
