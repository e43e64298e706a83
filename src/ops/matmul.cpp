// ops::matmul (rows split over the thread pool), ops::matmul_rows, ops::weight_row_to_f32 and the
// block-activation mode.
#include <atomic>
#include <cstdlib>
#include <string_view>

#include "chronos/block_types.h"
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

// The process-wide mode; -1 until first used (then read from the environment).
std::atomic<int> g_block_activations{-1};

BlockActivationMode initial_block_activation_mode() {
  // int8 by default: on the demo model's Q4_K pack its perplexity is within 0.01% of the exact f32
  // path, and it decodes 2.3x faster (docs/quantization.md). Tests that compare a packed model with
  // the f32 forward over its dequantized weights select kF32 themselves.
  const char* env = std::getenv("CHRONOS_BLOCK_ACTIVATIONS");
  if (env == nullptr) return BlockActivationMode::kInt8;
  const std::string_view value(env);
  if (value == "f32") return BlockActivationMode::kF32;
  if (value == "int8") return BlockActivationMode::kInt8;
  throw_error("CHRONOS_BLOCK_ACTIVATIONS is \"{}\": expected \"f32\" or \"int8\"", value);
}

// The types without 8-bit-activation kernels (block_types.h) always take the f32 path.
bool use_int8(DType dtype) {
  const BlockType* block = find_block_type(dtype);
  return block != nullptr && block->int8_kernels && block_activation_mode() == BlockActivationMode::kInt8;
}

// x[n_tokens, w.cols] as activation blocks in this thread's buffer.
const void* quantize_activations(const kernels::CpuKernels& kernels, const float* x, const WeightView& w,
                                 int64_t n_tokens) {
  void* xq = kernels::thread_activation_scratch(n_tokens * kernels::activation_row_bytes(w.dtype, w.cols));
  kernels.quantize_activations(xq, x, w.dtype, n_tokens, w.cols);
  return xq;
}

}  // namespace

void set_block_activation_mode(BlockActivationMode mode) {
  g_block_activations.store(int(mode), std::memory_order_relaxed);
}

BlockActivationMode block_activation_mode() {
  int mode = g_block_activations.load(std::memory_order_relaxed);
  if (mode < 0) {
    const int initial = int(initial_block_activation_mode());
    g_block_activations.compare_exchange_strong(mode, initial, std::memory_order_relaxed);
    mode = g_block_activations.load(std::memory_order_relaxed);
  }
  return BlockActivationMode(mode);
}

const char* block_activation_mode_name(BlockActivationMode mode) {
  return mode == BlockActivationMode::kF32 ? "f32" : "int8";
}

void matmul(float* y, const float* x, const WeightView& w, int64_t n_tokens, ThreadPool& pool) {
  check_weight(w, "matmul");
  CHRONOS_CHECK(n_tokens >= 0);
  if (n_tokens == 0 || w.rows == 0) return;
  const auto& kernels = kernels::active_kernels();
  const int64_t work = w.rows * w.cols * n_tokens;
  const bool serial = pool.size() == 1 || work < kMinParallelWork || w.rows <= kRowGrain;
  if (use_int8(w.dtype)) {
    // Quantized once here, before the split, so that every thread reads the same blocks.
    const void* xq = quantize_activations(kernels, x, w, n_tokens);
    if (serial) return kernels.matmul_rows_int8(y, xq, w, n_tokens, 0, w.rows);
    pool.parallel_for(w.rows, kRowGrain,
                      [&](int64_t begin, int64_t end) { kernels.matmul_rows_int8(y, xq, w, n_tokens, begin, end); });
    return;
  }
  if (serial) return kernels.matmul_rows(y, x, w, n_tokens, 0, w.rows);
  pool.parallel_for(w.rows, kRowGrain,
                    [&](int64_t begin, int64_t end) { kernels.matmul_rows(y, x, w, n_tokens, begin, end); });
}

void matmul_rows(float* y, const float* x, const WeightView& w, int64_t n_tokens, int64_t row_begin, int64_t row_end) {
  check_weight(w, "matmul_rows");
  CHRONOS_CHECK(n_tokens >= 0 && 0 <= row_begin && row_begin <= row_end && row_end <= w.rows);
  if (n_tokens == 0 || row_begin == row_end) return;
  const auto& kernels = kernels::active_kernels();
  if (use_int8(w.dtype))  // every call quantizes its own copy: the same blocks whoever calls
    return kernels.matmul_rows_int8(y, quantize_activations(kernels, x, w, n_tokens), w, n_tokens, row_begin, row_end);
  kernels.matmul_rows(y, x, w, n_tokens, row_begin, row_end);
}

int64_t prepared_activation_bytes(const WeightView& w, int64_t n_tokens) {
  check_weight(w, "prepare_activations");
  CHRONOS_CHECK(n_tokens >= 0);
  if (!use_int8(w.dtype)) return 0;
  return (n_tokens * kernels::activation_row_bytes(w.dtype, w.cols) + 7) / 8 * 8;
}

void prepare_activations(void* xq, const float* x, const WeightView& w, int64_t n_tokens) {
  if (prepared_activation_bytes(w, n_tokens) == 0 || n_tokens == 0) return;
  kernels::active_kernels().quantize_activations(xq, x, w.dtype, n_tokens, w.cols);
}

bool same_prepared_activations(const WeightView& a, const WeightView& b) {
  if (a.cols != b.cols || use_int8(a.dtype) != use_int8(b.dtype)) return false;
  // The 32-weight types share one activation block, the K types another.
  return !use_int8(a.dtype) || (dtype_block_elements(a.dtype) == dtype_block_elements(b.dtype));
}

void matmul_rows_prepared(float* y, const float* x, const void* xq, const WeightView& w, int64_t n_tokens,
                          int64_t row_begin, int64_t row_end) {
  check_weight(w, "matmul_rows");
  CHRONOS_CHECK(n_tokens >= 0 && 0 <= row_begin && row_begin <= row_end && row_end <= w.rows);
  if (n_tokens == 0 || row_begin == row_end) return;
  const auto& kernels = kernels::active_kernels();
  if (use_int8(w.dtype)) return kernels.matmul_rows_int8(y, xq, w, n_tokens, row_begin, row_end);
  kernels.matmul_rows(y, x, w, n_tokens, row_begin, row_end);
}

void reserve_thread_buffers(ThreadPool& pool) {
  pool.run_on_each_thread([] {
    kernels::thread_scratch(kernels::kReservedScratchFloats);
    kernels::thread_activation_scratch(kernels::kReservedActivationBytes);
  });
}

void weight_row_to_f32(float* out, const WeightView& w, int64_t row) {
  check_weight(w, "weight_row_to_f32");
  if (row < 0 || row >= w.rows) throw_error("weight_row_to_f32: row {} is outside [0, {})", row, w.rows);
  const auto* bytes = static_cast<const uint8_t*>(w.data) + row * dtype_row_bytes(w.dtype, w.cols);
  kernels::active_kernels().row_to_f32(out, bytes, w.dtype, w.cols);
}

}  // namespace chronos::ops
