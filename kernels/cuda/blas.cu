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
//
// Block-quantized weights: cuBLAS has no GGUF types, so rows of W are dequantized into an f32 tile
// and each tile is multiplied with the f32 SGEMM. A tile of rows r0 .. r0 + m - 1 produces columns
// r0 .. r0 + m - 1 of y: the same call with m rows, A = the tile, C = y + r0 and ldc still R.
// Why f32 and not an f16 tile for the tensor cores: d * q of a block is not an f16 value in
// general (an f16 scale times an 8-bit level needs up to 19 significant bits), and f32 keeps
// prefill's products those of the CPU forward and of the matvec (decode) path; the tile's extra
// traffic is paid once per tile per chunk, not per token.
//
// cuBLAS is opened with dlopen when the first Blas is made, that is by a --device cuda run, and
// never linked: a CPU run of the chronos binary maps none of the CUDA libraries (cuBLAS and
// cuBLASLt are about 600 MB of code; loading them cost every CPU run resident memory, see
// docs/cuda.md). The CUDA runtime is linked statically and opens the driver on its first call.
#include <cublas_v2.h>

#include <algorithm>
#include <limits>
#include <string>
#include <type_traits>
#if !CHRONOS_CUDA_EMULATED
#include <dlfcn.h>
#endif

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace chronos::cuda {
namespace {

// The six cuBLAS entry points Chronos calls (cublas_v2.h maps some names to their _v2 symbols:
// decltype and the symbol strings below go through the same macros).
struct CublasApi {
  decltype(&cublasCreate) create;
  decltype(&cublasDestroy) destroy;
  decltype(&cublasSetStream) set_stream;
  decltype(&cublasSetMathMode) set_math_mode;
  decltype(&cublasGetStatusString) status_string;
  // The C entry point (cuBLAS's C++ overload with a cudaDataType compute type is an inline wrapper).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType_t, int, const void*, cudaDataType_t, int, const void*, void*,
                            cudaDataType_t, int, cublasComputeType_t, cublasGemmAlgo_t);
};

#define CHRONOS_SYMBOL_NAME(name) CHRONOS_SYMBOL_NAME_(name)
#define CHRONOS_SYMBOL_NAME_(name) #name

#if CHRONOS_CUDA_EMULATED
CublasApi open_cublas() {
  return {&cublasCreate, &cublasDestroy, &cublasSetStream, &cublasSetMathMode, &cublasGetStatusString, &cublasGemmEx};
}
#else
// The library of the major version the kernels were compiled against (its ABI), opened once and
// kept for the life of the process.
CublasApi open_cublas() {
  const std::string library = fmt::format("libcublas.so.{}", CUBLAS_VER_MAJOR);
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr)
    throw_cuda_error(
        "cannot load {} (cuBLAS {}, which the CUDA backend needs): {}; install the CUDA {} "
        "runtime libraries or add their folder to LD_LIBRARY_PATH",
        library, CUBLAS_VER_MAJOR, dlerror(), CUBLAS_VER_MAJOR);
  const auto symbol = [&](auto& out, const char* name) {
    void* address = dlsym(handle, name);
    if (address == nullptr)
      throw_cuda_error("{} has no symbol {}: not a cuBLAS {} library", library, name, CUBLAS_VER_MAJOR);
    out = reinterpret_cast<std::remove_reference_t<decltype(out)> >(address);
  };
  CublasApi api{};
  symbol(api.create, CHRONOS_SYMBOL_NAME(cublasCreate));
  symbol(api.destroy, CHRONOS_SYMBOL_NAME(cublasDestroy));
  symbol(api.set_stream, CHRONOS_SYMBOL_NAME(cublasSetStream));
  symbol(api.set_math_mode, CHRONOS_SYMBOL_NAME(cublasSetMathMode));
  symbol(api.status_string, CHRONOS_SYMBOL_NAME(cublasGetStatusString));
  symbol(api.gemm_ex, CHRONOS_SYMBOL_NAME(cublasGemmEx));
  return api;
}
#endif

const CublasApi& cublas() {
  static const CublasApi api = open_cublas();  // a failed open throws and is tried again next time
  return api;
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cuda_error("cuBLAS {}: {}", what, cublas().status_string(status));
}

cublasHandle_t as_handle(void* handle) { return static_cast<cublasHandle_t>(handle); }

int to_int(int64_t value, const char* what) {
  if (value < 0 || value > std::numeric_limits<int>::max())
    throw_cuda_error("cuBLAS gemm: {} = {} does not fit a cuBLAS int", what, value);
  return int(value);
}

// C[m, n] (column-major, ldc) = A^T B with A [k, m] (lda = k) and B [k, n] (ldb = k), all f32.
void sgemm_f32(cublasHandle_t handle, int m, int n, int k, const void* a, const float* b, float* c, int ldc,
               const char* what) {
  const float alpha = 1.0f, beta = 0.0f;
  // CUBLAS_COMPUTE_32F_PEDANTIC: f32 arithmetic throughout, whatever the math mode or environment.
  check_cublas(cublas().gemm_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a, CUDA_R_32F, k, b, CUDA_R_32F, k,
                                &beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
               what);
}

}  // namespace

Blas::Blas() : handle_(nullptr) {
  cublasHandle_t handle = nullptr;
  check_cublas(cublas().create(&handle), "cublasCreate");
  // Default math: no TF32 for the f32 products, so they are true f32 SGEMMs.
  const cublasStatus_t status = cublas().set_math_mode(handle, CUBLAS_DEFAULT_MATH);
  if (status != CUBLAS_STATUS_SUCCESS) {
    cublas().destroy(handle);
    check_cublas(status, "cublasSetMathMode");
  }
  handle_ = handle;
}

Blas::~Blas() {
  if (handle_ != nullptr) cublas().destroy(as_handle(handle_));
}

void Blas::gemm(float* y, const float* x, const WeightView& w, int64_t n, void* x_converted, cudaStream_t stream) {
  if (n <= 0 || w.rows <= 0) return;
  const int m = to_int(w.rows, "rows"), k = to_int(w.cols, "cols"), cols_n = to_int(n, "n");
  cublasHandle_t handle = as_handle(handle_);
  check_cublas(cublas().set_stream(handle, stream), "cublasSetStream");
  const float alpha = 1.0f, beta = 0.0f;
  if (w.dtype == DType::kF32) {
    sgemm_f32(handle, m, cols_n, k, w.data, x, y, m, "gemm (F32)");
    return;
  }
  if (dm::is_block_dtype(w.dtype))
    throw_cuda_error("cuBLAS gemm: {} weights need a weight tile (the gemm overload that takes one)",
                     dtype_name(w.dtype));
  if (w.dtype != DType::kF16 && w.dtype != DType::kBF16)
    throw_cuda_error("cuBLAS gemm: unsupported weight dtype {} (F32, F16, BF16 or a block type)", dtype_name(w.dtype));
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
  check_cublas(cublas().gemm_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, cols_n, k, &alpha, w.data, type, k, hi, type, k,
                                &beta, y, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               what);
  check_cublas(cublas().gemm_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, cols_n, k, &alpha, w.data, type, k, lo, type, k,
                                &accumulate, y, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               what);
}

void Blas::gemm(float* y, const float* x, const WeightView& w, int64_t n, void* x_converted, float* weight_tile,
                int64_t tile_floats, cudaStream_t stream) {
  if (!dm::is_block_dtype(w.dtype)) return gemm(y, x, w, n, x_converted, stream);
  if (n <= 0 || w.rows <= 0) return;
  require_whole_blocks(w.dtype, w.cols, "gemm", "weight");
  if (weight_tile == nullptr || tile_floats < w.cols)
    throw_cuda_error("cuBLAS gemm: {} weights need a weight tile of at least one row ({} floats, got {})",
                     dtype_name(w.dtype), w.cols, weight_tile == nullptr ? 0 : tile_floats);
  const int m_total = to_int(w.rows, "rows"), k = to_int(w.cols, "cols"), cols_n = to_int(n, "n");
  const int64_t tile_rows = std::min<int64_t>(w.rows, tile_floats / w.cols);
  cublasHandle_t handle = as_handle(handle_);
  check_cublas(cublas().set_stream(handle, stream), "cublasSetStream");
  for (int64_t r0 = 0; r0 < w.rows; r0 += tile_rows) {
    const int64_t rows = std::min(tile_rows, w.rows - r0);
    dequantize_rows(weight_tile, w, r0, rows, stream);
    sgemm_f32(handle, int(rows), cols_n, k, weight_tile, x, y + r0, m_total, "gemm (block weight tile)");
  }
}

}  // namespace chronos::cuda
