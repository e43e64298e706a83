// ops::matmul (rows split over the thread pool), ops::matmul_rows, ops::weight_row_to_f32 and the
// activation modes (block types: f32 or int8; BF16: f32 or bf16).
#include <atomic>
#include <cstdlib>
#include <initializer_list>
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

// The process-wide modes; -1 until first used (then read from the environment).
std::atomic<int> g_block_activations{-1};
std::atomic<int> g_bf16_activations{-1};

// The value of environment variable `name` as one of `names` (its index), or `fallback` when unset.
int mode_from_environment(const char* name, std::initializer_list<std::string_view> names, int fallback) {
  const char* env = std::getenv(name);
  if (env == nullptr) return fallback;
  int index = 0;
  for (const std::string_view option : names) {
    if (option == env) return index;
    ++index;
  }
  throw_error("{} is \"{}\": expected \"{}\" or \"{}\"", name, env, *names.begin(), *(names.begin() + 1));
}

int load_mode(std::atomic<int>& mode, const char* env, std::initializer_list<std::string_view> names, int fallback) {
  int value = mode.load(std::memory_order_relaxed);
  if (value < 0) {
    const int initial = mode_from_environment(env, names, fallback);
    mode.compare_exchange_strong(value, initial, std::memory_order_relaxed);
    value = mode.load(std::memory_order_relaxed);
  }
  return value;
}

// Which kernels multiply a weight of this dtype, and so what its activations are prepared as.
enum class Path { kF32, kInt8, kBf16 };

Path path_for(const kernels::CpuKernels& kernels, DType dtype) {
  if (dtype == DType::kBF16)
    return kernels.matmul_rows_bf16 != nullptr && bf16_activation_mode() == Bf16ActivationMode::kBf16 ? Path::kBf16
                                                                                                      : Path::kF32;
  // The types without 8-bit-activation kernels (block_types.h) always take the f32 path.
  const BlockType* block = find_block_type(dtype);
  const bool int8 = block != nullptr && block->int8_kernels && block_activation_mode() == BlockActivationMode::kInt8;
  return int8 ? Path::kInt8 : Path::kF32;
}

int64_t activation_bytes(Path path, const WeightView& w, int64_t n_tokens) {
  if (path == Path::kF32) return 0;
  return n_tokens * (path == Path::kBf16 ? 2 * w.cols : kernels::activation_row_bytes(w.dtype, w.cols));
}

void prepare(const kernels::CpuKernels& kernels, Path path, void* xq, const float* x, const WeightView& w,
             int64_t n_tokens) {
  if (path == Path::kBf16) return kernels.activations_to_bf16(static_cast<uint16_t*>(xq), x, n_tokens * w.cols);
  kernels.quantize_activations(xq, x, w.dtype, n_tokens, w.cols);
}

// x[n_tokens, w.cols] prepared for `path` in this thread's buffer.
const void* prepare_in_scratch(const kernels::CpuKernels& kernels, Path path, const float* x, const WeightView& w,
                               int64_t n_tokens) {
  void* xq = kernels::thread_activation_scratch(activation_bytes(path, w, n_tokens));
  prepare(kernels, path, xq, x, w, n_tokens);
  return xq;
}

void run_rows(const kernels::CpuKernels& kernels, Path path, float* y, const float* x, const void* xq,
              const WeightView& w, int64_t n_tokens, int64_t row_begin, int64_t row_end) {
  switch (path) {
    case Path::kInt8: return kernels.matmul_rows_int8(y, xq, w, n_tokens, row_begin, row_end);
    case Path::kBf16:
      return kernels.matmul_rows_bf16(y, static_cast<const uint16_t*>(xq), w, n_tokens, row_begin, row_end);
    case Path::kF32: break;
  }
  kernels.matmul_rows(y, x, w, n_tokens, row_begin, row_end);
}

}  // namespace

void set_block_activation_mode(BlockActivationMode mode) {
  g_block_activations.store(int(mode), std::memory_order_relaxed);
}

BlockActivationMode block_activation_mode() {
  // int8 by default: on the demo model's Q4_K pack its perplexity is within 0.01% of the exact f32
  // path, and it decodes 2.3x faster (docs/quantization.md). Tests that compare a packed model with
  // the f32 forward over its dequantized weights select kF32 themselves.
  return BlockActivationMode(
      load_mode(g_block_activations, "CHRONOS_BLOCK_ACTIVATIONS", {"f32", "int8"}, int(BlockActivationMode::kInt8)));
}

const char* block_activation_mode_name(BlockActivationMode mode) {
  return mode == BlockActivationMode::kF32 ? "f32" : "int8";
}

void set_bf16_activation_mode(Bf16ActivationMode mode) {
  g_bf16_activations.store(int(mode), std::memory_order_relaxed);
}

Bf16ActivationMode bf16_activation_mode() {
  // Exact by default: a BF16 model's logits equal transformers' at 1e-3, which the rounding of the
  // activations breaks (docs/prefill.md, "bf16 activations", has what it moves).
  return Bf16ActivationMode(
      load_mode(g_bf16_activations, "CHRONOS_BF16_ACTIVATIONS", {"f32", "bf16"}, int(Bf16ActivationMode::kF32)));
}

void matmul(float* y, const float* x, const WeightView& w, int64_t n_tokens, ThreadPool& pool) {
  check_weight(w, "matmul");
  CHRONOS_CHECK(n_tokens >= 0);
  if (n_tokens == 0 || w.rows == 0) return;
  const auto& kernels = kernels::active_kernels();
  const int64_t work = w.rows * w.cols * n_tokens;
  const bool serial = pool.size() == 1 || work < kMinParallelWork || w.rows <= kRowGrain;
  const Path path = path_for(kernels, w.dtype);
  // Prepared once here, before the split, so that every thread reads the same activations.
  const void* xq = path == Path::kF32 ? nullptr : prepare_in_scratch(kernels, path, x, w, n_tokens);
  if (serial) return run_rows(kernels, path, y, x, xq, w, n_tokens, 0, w.rows);
  pool.parallel_for(w.rows, kRowGrain,
                    [&](int64_t begin, int64_t end) { run_rows(kernels, path, y, x, xq, w, n_tokens, begin, end); });
}

void matmul_rows(float* y, const float* x, const WeightView& w, int64_t n_tokens, int64_t row_begin, int64_t row_end) {
  check_weight(w, "matmul_rows");
  CHRONOS_CHECK(n_tokens >= 0 && 0 <= row_begin && row_begin <= row_end && row_end <= w.rows);
  if (n_tokens == 0 || row_begin == row_end) return;
  const auto& kernels = kernels::active_kernels();
  const Path path = path_for(kernels, w.dtype);
  // Every call prepares its own copy: the same activations whoever calls.
  const void* xq = path == Path::kF32 ? nullptr : prepare_in_scratch(kernels, path, x, w, n_tokens);
  run_rows(kernels, path, y, x, xq, w, n_tokens, row_begin, row_end);
}

int64_t prepared_activation_bytes(const WeightView& w, int64_t n_tokens) {
  check_weight(w, "prepare_activations");
  CHRONOS_CHECK(n_tokens >= 0);
  return (activation_bytes(path_for(kernels::active_kernels(), w.dtype), w, n_tokens) + 7) / 8 * 8;
}

void prepare_activations(void* xq, const float* x, const WeightView& w, int64_t n_tokens) {
  if (prepared_activation_bytes(w, n_tokens) == 0 || n_tokens == 0) return;
  const auto& kernels = kernels::active_kernels();
  prepare(kernels, path_for(kernels, w.dtype), xq, x, w, n_tokens);
}

bool same_prepared_activations(const WeightView& a, const WeightView& b) {
  const auto& kernels = kernels::active_kernels();
  const Path path = path_for(kernels, a.dtype);
  if (a.cols != b.cols || path != path_for(kernels, b.dtype)) return false;
  // The 32-weight types share one activation block, the K types another.
  return path != Path::kInt8 || dtype_block_elements(a.dtype) == dtype_block_elements(b.dtype);
}

void matmul_rows_prepared(float* y, const float* x, const void* xq, const WeightView& w, int64_t n_tokens,
                          int64_t row_begin, int64_t row_end) {
  check_weight(w, "matmul_rows");
  CHRONOS_CHECK(n_tokens >= 0 && 0 <= row_begin && row_begin <= row_end && row_end <= w.rows);
  if (n_tokens == 0 || row_begin == row_end) return;
  const auto& kernels = kernels::active_kernels();
  run_rows(kernels, path_for(kernels, w.dtype), y, x, xq, w, n_tokens, row_begin, row_end);
}

void reserve_thread_buffers(ThreadPool& pool) {
  pool.run_on_each_thread([] {
    kernels::thread_scratch(kernels::kReservedScratchFloats);
    kernels::thread_activation_scratch(kernels::kReservedActivationBytes);
  });
}

void weight_row_to_f32(float* out, const WeightView& w, int64_t row) {
  if (w.dtype == DType::kF8E4M3) {
    if (w.scale == nullptr || w.scale_rows <= 0 || w.scale_cols <= 0)
      throw_error("weight_row_to_f32: an F8_E4M3 weight needs its block scales");
    if (row < 0 || row >= w.rows) throw_error("weight_row_to_f32: row {} is outside [0, {})", row, w.rows);
    const auto* bytes = static_cast<const uint8_t*>(w.data) + row * w.cols;
    const float* scale = w.scale + (row / w.scale_rows) * ((w.cols + w.scale_cols - 1) / w.scale_cols);
    // Rounded to BF16, as transformers dequantizes: a pack converts the very weights it runs.
    for (int64_t c = 0; c < w.cols; ++c)
      out[c] = bf16_to_f32(f32_to_bf16(f8e4m3_to_f32(bytes[c]) * scale[c / w.scale_cols]));
    return;
  }
  check_weight(w, "weight_row_to_f32");
  if (row < 0 || row >= w.rows) throw_error("weight_row_to_f32: row {} is outside [0, {})", row, w.rows);
  const auto* bytes = static_cast<const uint8_t*>(w.data) + row * dtype_row_bytes(w.dtype, w.cols);
  kernels::active_kernels().row_to_f32(out, bytes, w.dtype, w.cols);
}

}  // namespace chronos::ops
