// Scalar reference matmul and weight-row conversion: the numerics every SIMD version is tested against.
#include <cstring>
#include <vector>

#include "chronos/error.h"
#include "kernels/cpu/cpu_kernels.h"

namespace chronos::kernels {
namespace {

inline float load_f32(const float* p, int64_t i) { return p[i]; }
inline float load_f16(const uint16_t* p, int64_t i) { return f16_to_f32(p[i]); }
inline float load_bf16(const uint16_t* p, int64_t i) { return bf16_to_f32(p[i]); }

template <typename T, float (*load)(const T*, int64_t)>
void matmul_rows_typed(float* y, const float* x, const T* w, int64_t rows, int64_t cols, int64_t n_tokens,
                       int64_t row_begin, int64_t row_end) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* w_row = w + r * cols;  // [cols]
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* x_row = x + t * cols;  // [cols]
      float acc = 0.0f;
      for (int64_t c = 0; c < cols; ++c) acc += load(w_row, c) * x_row[c];
      y[t * rows + r] = acc;
    }
  }
}

// Block types: each row dequantized (exactly, dequantize_row_scalar), then the f32 product.
void matmul_rows_block(float* y, const float* x, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                       int64_t row_end) {
  const int64_t row_bytes = dtype_row_bytes(w.dtype, w.cols);
  float* w_row = thread_scratch(w.cols);  // [cols]
  for (int64_t r = row_begin; r < row_end; ++r) {
    dequantize_row_scalar(w_row, static_cast<const uint8_t*>(w.data) + r * row_bytes, w.dtype, w.cols);
    matmul_rows_typed<float, load_f32>(y + r, x, w_row, w.rows, w.cols, n_tokens, 0, 1);
  }
}

}  // namespace

float* thread_scratch(int64_t n_floats) {
  thread_local std::vector<float> scratch;
  if (int64_t(scratch.size()) < n_floats) scratch.resize(size_t(n_floats));
  return scratch.data();
}

void matmul_rows_scalar(float* y, const float* x, const WeightView& w, int64_t n_tokens, int64_t row_begin,
                        int64_t row_end) {
  switch (w.dtype) {
    case DType::kF32:
      matmul_rows_typed<float, load_f32>(y, x, static_cast<const float*>(w.data), w.rows, w.cols, n_tokens, row_begin,
                                         row_end);
      return;
    case DType::kF16:
      matmul_rows_typed<uint16_t, load_f16>(y, x, static_cast<const uint16_t*>(w.data), w.rows, w.cols, n_tokens,
                                            row_begin, row_end);
      return;
    case DType::kBF16:
      matmul_rows_typed<uint16_t, load_bf16>(y, x, static_cast<const uint16_t*>(w.data), w.rows, w.cols, n_tokens,
                                             row_begin, row_end);
      return;
    default:
      CHRONOS_CHECK_MSG(dtype_is_block(w.dtype), "matmul kernel: unsupported weight dtype {}", dtype_name(w.dtype));
      matmul_rows_block(y, x, w, n_tokens, row_begin, row_end);
      return;
  }
}

void row_to_f32_scalar(float* out, const void* row, DType dtype, int64_t n) {
  switch (dtype) {
    case DType::kF32: std::memcpy(out, row, size_t(n) * sizeof(float)); return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(static_cast<const uint16_t*>(row)[i]);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(static_cast<const uint16_t*>(row)[i]);
      return;
    default:
      CHRONOS_CHECK_MSG(dtype_is_block(dtype), "row_to_f32 kernel: unsupported dtype {}", dtype_name(dtype));
      dequantize_row_scalar(out, row, dtype, n);
      return;
  }
}

}  // namespace chronos::kernels
