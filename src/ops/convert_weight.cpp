// convert_weight: a weight matrix in another type, row by row through f32.
#include <cstring>
#include <vector>

#include "chronos/error.h"
#include "chronos/ops.h"
#include "chronos/quant.h"
#include "chronos/thread_pool.h"

namespace chronos::ops {

WeightView convert_weight(const WeightView& w, DType target, std::vector<std::byte>& storage, ThreadPool* pool) {
  const DType dtype = dtype_is_block(target) ? block_dtype_for_row(target, w.cols) : target;
  if (dtype == w.dtype) return w;
  if (!dtype_is_block(dtype) && dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16)
    throw_error("cannot convert weights to {}", dtype_name(dtype));
  const int64_t row_bytes = dtype_row_bytes(dtype, w.cols);
  storage.resize(size_t(w.rows * row_bytes));
  const auto convert_rows = [&](int64_t begin, int64_t end) {
    std::vector<float> row(size_t(w.cols));
    for (int64_t r = begin; r < end; ++r) {
      weight_row_to_f32(row.data(), w, r);
      std::byte* out = storage.data() + r * row_bytes;
      if (dtype_is_block(dtype)) {
        quantize_row(dtype, row.data(), out, w.cols);
      } else if (dtype == DType::kF32) {
        std::memcpy(out, row.data(), size_t(row_bytes));
      } else {
        for (int64_t i = 0; i < w.cols; ++i) {
          const uint16_t bits = dtype == DType::kF16 ? f32_to_f16(row[size_t(i)]) : f32_to_bf16(row[size_t(i)]);
          std::memcpy(out + i * 2, &bits, 2);
        }
      }
    }
  };
  // Each row is quantized on its own, so the bytes are the same whatever the split.
  if (pool != nullptr && pool->size() > 1)
    pool->parallel_for(w.rows, 16, convert_rows);
  else
    convert_rows(0, w.rows);
  return WeightView{storage.data(), dtype, w.rows, w.cols};
}

}  // namespace chronos::ops
