// ops::matmul (rows split over the thread pool), ops::matmul_rows and ops::weight_row_to_f32.
#include "chronos/error.h"
#include "chronos/ops.h"
#include "chronos/thread_pool.h"
#include "kernels/cpu/cpu_kernels.h"

namespace chronos::ops {
namespace {

// Thread chunks start on multiples of this many rows: enough for every row block of the kernels
// (4 rows) and large enough that two threads never write the same cache line of y.
constexpr int64_t kRowGrain = 16;

// Below this many multiply-adds a pool dispatch (a few microseconds) costs more than it saves.
constexpr int64_t kMinParallelWork = int64_t(1) << 16;

void check_weight(const WeightView& w, const char* op) {
  if (w.dtype != DType::kF32 && w.dtype != DType::kF16 && w.dtype != DType::kBF16 && !dtype_is_block(w.dtype))
    throw_error("{}: weight dtype {} is not supported (F32, F16, BF16 or a block type)", op, dtype_name(w.dtype));
  if (w.rows < 0 || w.cols < 0) throw_error("{}: weight shape [{}, {}] is negative", op, w.rows, w.cols);
  if (w.cols % dtype_block_elements(w.dtype) != 0)
    throw_error("{}: a {} weight row of {} elements is not a whole number of {}-element blocks", op,
                dtype_name(w.dtype), w.cols, dtype_block_elements(w.dtype));
  CHRONOS_CHECK(w.data != nullptr || w.rows * w.cols == 0);
}

}  // namespace

void matmul(float* y, const float* x, const WeightView& w, int64_t n_tokens, ThreadPool& pool) {
  check_weight(w, "matmul");
  CHRONOS_CHECK(n_tokens >= 0);
  if (n_tokens == 0 || w.rows == 0) return;
  const auto& kernels = kernels::active_kernels();
  const int64_t work = w.rows * w.cols * n_tokens;
  if (pool.size() == 1 || work < kMinParallelWork || w.rows <= kRowGrain) {
    kernels.matmul_rows(y, x, w, n_tokens, 0, w.rows);
    return;
  }
  pool.parallel_for(w.rows, kRowGrain, [&](int64_t begin, int64_t end) {
    kernels.matmul_rows(y, x, w, n_tokens, begin, end);
  });
}

void matmul_rows(float* y, const float* x, const WeightView& w, int64_t n_tokens,
                 int64_t row_begin, int64_t row_end) {
  check_weight(w, "matmul_rows");
  CHRONOS_CHECK(n_tokens >= 0 && 0 <= row_begin && row_begin <= row_end && row_end <= w.rows);
  if (n_tokens == 0 || row_begin == row_end) return;
  kernels::active_kernels().matmul_rows(y, x, w, n_tokens, row_begin, row_end);
}

void weight_row_to_f32(float* out, const WeightView& w, int64_t row) {
  check_weight(w, "weight_row_to_f32");
  if (row < 0 || row >= w.rows) throw_error("weight_row_to_f32: row {} is outside [0, {})", row, w.rows);
  const auto* bytes = static_cast<const uint8_t*>(w.data) + row * dtype_row_bytes(w.dtype, w.cols);
  kernels::active_kernels().row_to_f32(out, bytes, w.dtype, w.cols);
}

}  // namespace chronos::ops
