// Kernel benchmarks: memory read/copy bandwidth as the ceiling, matvec GB/s against it, matmul
// GFLOP/s for prefill-sized batches, thread-pool dispatch cost. Numbers only, never pass/fail.
//
//   chronos_bench_kernels --benchmark_counters_tabular=true
//
// Counters: "bytes_per_second" (read bandwidth, or weight bytes streamed by matvec) and
// "FLOPS" (2 * rows * cols * n_tokens per matmul). Args are (dtype, threads) or (n_tokens, threads).
// Block types (Q8_0 ... Q6_K) stream their quantized bytes, so their matvec GB/s compares with the
// read limit directly; their benchmarks take an "int8" argument: 0 runs the exact f32-activation
// path, 1 the 8-bit-activation integer dot (ops::set_block_activation_mode). BM_QuantDotError
// gives both paths' error against the exact product (docs/quantization.md). The matvec benchmarks'
// "of_limit" is their rate over the read limit of the same run (read_limit: the best of the word
// sum and the BF16 and Q8_0 matvecs over one buffer, per thread count).
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "chronos/dtype.h"
#include "chronos/ops.h"
#include "chronos/quant.h"
#include "chronos/thread_pool.h"

namespace chronos {
namespace {

constexpr int64_t kReadBufferBytes = int64_t(1) << 30;  // 1 GiB: far beyond any cache
constexpr int64_t kMatvecBytes = int64_t(256) << 20;    // ~256 MB of weights per matvec

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t[], FreeDeleter>;

// Page-aligned and touched, so page faults stay out of the timed loop.
Buffer make_buffer(int64_t bytes, uint8_t fill) {
  Buffer buffer(static_cast<uint8_t*>(std::aligned_alloc(4096, size_t(bytes))));
  std::memset(buffer.get(), fill, size_t(bytes));
  return buffer;
}

const DType kDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
const DType kBlockTypes[] = {DType::kQ8_0,   DType::kQ4_0,    DType::kQ5_0,  DType::kQ2_K,    DType::kQ3_K,
                             DType::kQ4_K,   DType::kQ6_K,    DType::kQ5_K,  DType::kQ4_1,    DType::kQ5_1,
                             DType::kIQ4_NL, DType::kIQ4_XS,  DType::kMXFP4, DType::kIQ2_XXS, DType::kIQ2_XS,
                             DType::kIQ2_S,  DType::kIQ3_XXS, DType::kIQ3_S, DType::kIQ1_S,   DType::kIQ1_M};

int threads_arg(const benchmark::State& state, int index) {
  const int wanted = int(state.range(index));
  return wanted == 0 ? available_cpus() : wanted;
}

// Sums words[begin, end) with 256-bit loads and four accumulators, so that the loop is limited
// by memory, not by the adds (a scalar loop tops out near 8 bytes per cycle).
__attribute__((target("avx2"))) uint64_t sum_words_avx2(const uint64_t* words, int64_t begin, int64_t end) {
  __m256i acc0 = _mm256_setzero_si256(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    acc0 = _mm256_add_epi64(acc0, _mm256_load_si256(reinterpret_cast<const __m256i*>(words + i)));
    acc1 = _mm256_add_epi64(acc1, _mm256_load_si256(reinterpret_cast<const __m256i*>(words + i + 4)));
    acc2 = _mm256_add_epi64(acc2, _mm256_load_si256(reinterpret_cast<const __m256i*>(words + i + 8)));
    acc3 = _mm256_add_epi64(acc3, _mm256_load_si256(reinterpret_cast<const __m256i*>(words + i + 12)));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(acc0, acc1), _mm256_add_epi64(acc2, acc3)));
  uint64_t sum = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < end; ++i) sum += words[i];
  return sum;
}

uint64_t sum_words(const uint64_t* words, int64_t begin, int64_t end) {
  if (__builtin_cpu_supports("avx2")) return sum_words_avx2(words, begin, end);
  uint64_t sum = 0;
  for (int64_t i = begin; i < end; ++i) sum += words[i];
  return sum;
}

// The read limit of this run for a thread count: the best rate at which any read kernel here
// streams a 512 MiB buffer (the word sum, the BF16 and the Q8_0 integer matvec), measured once per
// thread count and cached. The matvec benchmarks report "of_limit", their rate over it.
double read_limit(int threads) {
  static std::vector<double> cache(256, 0.0);
  double& best = cache[size_t(std::min(threads, 255))];
  if (best > 0.0) return best;
  constexpr int64_t kBytes = int64_t(512) << 20, kCols = 1024;
  const Buffer buffer = make_buffer(kBytes, 0x3c);
  ThreadPool pool(threads);
  const auto* words = reinterpret_cast<const uint64_t*>(buffer.get());
  std::vector<uint64_t> partial(size_t(pool.size()) * 8);
  const auto now = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  for (int r = 0; r < 4; ++r) {
    const double start = now();
    pool.run(pool.size(), [&](int64_t chunk) {
      const int64_t n = kBytes / 8 / 8;
      partial[size_t(chunk) * 8] = sum_words(words, n * chunk / pool.size() * 8, n * (chunk + 1) / pool.size() * 8);
    });
    best = std::max(best, double(kBytes) / (now() - start));
  }
  benchmark::DoNotOptimize(partial.data());
  const auto mode = ops::block_activation_mode();
  ops::set_block_activation_mode(ops::BlockActivationMode::kInt8);
  std::vector<float> x(size_t(kCols), 0.5f), y(size_t(kBytes / kCols));
  for (DType dtype : {DType::kBF16, DType::kQ8_0}) {
    const int64_t rows = kBytes / dtype_row_bytes(dtype, kCols);
    const WeightView w{buffer.get(), dtype, rows, kCols};
    for (int r = 0; r < 4; ++r) {
      const double start = now();
      ops::matmul(y.data(), x.data(), w, 1, pool);
      best = std::max(best, double(rows * dtype_row_bytes(dtype, kCols)) / (now() - start));
    }
  }
  ops::set_block_activation_mode(mode);
  return best;
}

// Rate / read limit as a counter (a rate counter of bytes / limit).
void report_of_limit(benchmark::State& state, int64_t bytes_per_iteration, int threads) {
  state.counters["of_limit"] = benchmark::Counter(
      double(bytes_per_iteration) * double(state.iterations()) / read_limit(threads), benchmark::Counter::kIsRate);
}

void BM_MemoryReadSum(benchmark::State& state) {
  const Buffer buffer = make_buffer(kReadBufferBytes, 1);
  ThreadPool pool(threads_arg(state, 0));
  const auto* words = reinterpret_cast<const uint64_t*>(buffer.get());
  const int64_t n_words = kReadBufferBytes / 8;
  std::vector<uint64_t> partial(size_t(pool.size()) * 8);  // one cache line per chunk
  for (auto _ : state) {
    pool.run(pool.size(), [&](int64_t chunk) {
      // Chunk bounds on 64-byte lines keep the aligned loads aligned.
      const int64_t begin = n_words / 8 * chunk / pool.size() * 8;
      const int64_t end = n_words / 8 * (chunk + 1) / pool.size() * 8;
      partial[size_t(chunk) * 8] = sum_words(words, begin, end);
    });
    benchmark::DoNotOptimize(partial.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * kReadBufferBytes);
  state.SetLabel(std::to_string(pool.size()) + " threads");
}
BENCHMARK(BM_MemoryReadSum)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

// Bytes processed counts the bytes copied (each one is read once and written once).
void BM_MemoryCopy(benchmark::State& state) {
  const int64_t bytes = kReadBufferBytes / 2;
  const Buffer source = make_buffer(bytes, 1), target = make_buffer(bytes, 2);
  ThreadPool pool(threads_arg(state, 0));
  for (auto _ : state) {
    pool.run(pool.size(), [&](int64_t chunk) {
      const int64_t begin = bytes * chunk / pool.size(), end = bytes * (chunk + 1) / pool.size();
      std::memcpy(target.get() + begin, source.get() + begin, size_t(end - begin));
    });
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * bytes);
  state.SetLabel(std::to_string(pool.size()) + " threads");
}
BENCHMARK(BM_MemoryCopy)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

// n_tokens == 1 over ~256 MB of weights: bytes_per_second is the weight streaming rate.
void BM_Matvec(benchmark::State& state) {
  const DType dtype = kDTypes[state.range(0)];
  const int64_t cols = 8192, rows = kMatvecBytes / (cols * dtype_size(dtype));
  const Buffer weights = make_buffer(rows * cols * dtype_size(dtype), 0x3c);  // finite in every dtype
  std::vector<float> x(static_cast<size_t>(cols), 0.5f), y(static_cast<size_t>(rows));
  ThreadPool pool(threads_arg(state, 1));
  const WeightView w{weights.get(), dtype, rows, cols};
  for (auto _ : state) {
    ops::matmul(y.data(), x.data(), w, 1, pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * rows * cols * dtype_size(dtype));
  report_of_limit(state, rows * cols * int64_t(dtype_size(dtype)), pool.size());
  state.SetLabel(std::string(dtype_name(dtype)) + " " + isa_name(active_isa()) + " " + std::to_string(pool.size()) +
                 " threads");
}
BENCHMARK(BM_Matvec)
    ->ArgsProduct({{0, 1, 2}, {1, 0}})
    ->ArgNames({"dtype", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Batched prefill: [n_tokens, 4096] x [4096, 4096]^T, BF16 weights (the usual checkpoint dtype).
void BM_Matmul(benchmark::State& state) {
  const int64_t n_tokens = state.range(0), rows = 4096, cols = 4096;
  const DType dtype = kDTypes[state.range(2)];
  const Buffer weights = make_buffer(rows * cols * dtype_size(dtype), 0x3c);
  std::vector<float> x(size_t(n_tokens * cols), 0.25f), y(size_t(n_tokens * rows));
  ThreadPool pool(threads_arg(state, 1));
  const WeightView w{weights.get(), dtype, rows, cols};
  for (auto _ : state) {
    ops::matmul(y.data(), x.data(), w, n_tokens, pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["FLOPS"] =
      benchmark::Counter(double(2 * rows * cols * n_tokens) * double(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(std::string(dtype_name(dtype)) + " " + isa_name(active_isa()) + " " + std::to_string(pool.size()) +
                 " threads");
}
BENCHMARK(BM_Matmul)
    ->ArgsProduct({{16, 128}, {1, 0}, {0, 2}})
    ->ArgNames({"tokens", "threads", "dtype"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// n_tokens == 1 over ~256 MB of block-quantized weights (every byte pattern is a valid block;
// 0x3c gives finite scales): bytes_per_second counts the quantized bytes read.
// Sets the block-activation mode from a benchmark argument (0: f32, 1: int8) and names it.
std::string set_block_mode(const benchmark::State& state, int index) {
  const auto mode = state.range(index) != 0 ? ops::BlockActivationMode::kInt8 : ops::BlockActivationMode::kF32;
  ops::set_block_activation_mode(mode);
  return ops::block_activation_mode_name(mode);
}

void BM_MatvecBlock(benchmark::State& state) {
  const DType dtype = kBlockTypes[state.range(0)];
  const std::string mode = set_block_mode(state, 2);
  const int64_t cols = 8192, row_bytes = dtype_row_bytes(dtype, cols), rows = kMatvecBytes / row_bytes;
  const Buffer weights = make_buffer(rows * row_bytes, 0x3c);
  std::vector<float> x(static_cast<size_t>(cols), 0.5f), y(static_cast<size_t>(rows));
  ThreadPool pool(threads_arg(state, 1));
  const WeightView w{weights.get(), dtype, rows, cols};
  for (auto _ : state) {
    ops::matmul(y.data(), x.data(), w, 1, pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * rows * row_bytes);
  report_of_limit(state, rows * row_bytes, pool.size());
  state.SetLabel(std::string(dtype_name(dtype)) + " " + mode + " " + isa_name(active_isa()) + " " +
                 std::to_string(pool.size()) + " threads");
}
BENCHMARK(BM_MatvecBlock)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 11, 12, 13, 14, 15, 16, 17, 18, 19}, {1, 0}, {0, 1}})
    ->ArgNames({"dtype", "threads", "int8"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Batched prefill over block-quantized weights: [n_tokens, 4096] x [4096, 4096]^T.
void BM_MatmulBlock(benchmark::State& state) {
  const int64_t n_tokens = state.range(0), rows = 4096, cols = 4096;
  const DType dtype = kBlockTypes[state.range(2)];
  const std::string mode = set_block_mode(state, 3);
  const Buffer weights = make_buffer(rows * dtype_row_bytes(dtype, cols), 0x3c);
  std::vector<float> x(size_t(n_tokens * cols), 0.25f), y(size_t(n_tokens * rows));
  ThreadPool pool(threads_arg(state, 1));
  const WeightView w{weights.get(), dtype, rows, cols};
  for (auto _ : state) {
    ops::matmul(y.data(), x.data(), w, n_tokens, pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["FLOPS"] =
      benchmark::Counter(double(2 * rows * cols * n_tokens) * double(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(std::string(dtype_name(dtype)) + " " + mode + " " + isa_name(active_isa()) + " " +
                 std::to_string(pool.size()) + " threads");
}
BENCHMARK(BM_MatmulBlock)
    ->ArgsProduct({{2, 3, 4, 5, 6, 8, 10, 12, 14}, {1}, {0, 5, 6, 7, 3, 1}, {1}})
    ->ArgNames({"tokens", "threads", "dtype", "int8"})
    ->UseRealTime();
BENCHMARK(BM_MatmulBlock)
    ->ArgsProduct({{16, 17, 19, 32, 128}, {1, 0}, {0, 1, 5, 6, 11, 12, 13, 15, 17}, {0, 1}})
    ->ArgNames({"tokens", "threads", "dtype", "int8"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The int8 path at the Mixtral-shaped sizes of the synthetic decode model, one thread: gate/up
// (3584 x 1024) and down (1024 x 3584) weights, n_tokens 1 (matvec) or 32 (prefill batch). "cached:1"
// keeps the weights in L2 (128 x 1024 and 32 x 3584, the same matrix every iteration): the kernel's
// compute ceiling; "cached:0" cycles over ~200 MB (1 token) or ~30 MB (32 tokens) of copies.
void BM_BlockModelShapes(benchmark::State& state) {
  const DType dtype = kBlockTypes[state.range(0)];
  const int64_t n_tokens = state.range(1);
  const bool cached = state.range(3) != 0;
  const int64_t rows = state.range(2) == 0 ? (cached ? 128 : 3584) : (cached ? 32 : 1024);
  const int64_t cols = state.range(2) == 0 ? 1024 : 3584;
  ops::set_block_activation_mode(ops::BlockActivationMode::kInt8);
  const int64_t matrix_bytes = rows * dtype_row_bytes(dtype, cols);
  const int64_t copies = cached ? 1 : (n_tokens == 1 ? int64_t(200) << 20 : int64_t(30) << 20) / matrix_bytes + 1;
  const Buffer weights = make_buffer(matrix_bytes * copies, 0x3c);
  std::vector<float> x(size_t(n_tokens * cols), 0.25f), y(size_t(n_tokens * rows));
  ThreadPool pool(1);
  int64_t copy = 0;
  for (auto _ : state) {
    const WeightView w{weights.get() + copy * matrix_bytes, dtype, rows, cols};
    ops::matmul(y.data(), x.data(), w, n_tokens, pool);
    benchmark::DoNotOptimize(y.data());
    copy = copy + 1 == copies ? 0 : copy + 1;
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * matrix_bytes);
  state.counters["OPS"] =
      benchmark::Counter(double(2 * rows * cols * n_tokens) * double(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(std::string(dtype_name(dtype)) + " " + std::to_string(rows) + "x" + std::to_string(cols) + " " +
                 isa_name(active_isa()));
}
BENCHMARK(BM_BlockModelShapes)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6}, {1, 32}, {0, 1}, {0, 1}})
    ->ArgNames({"dtype", "tokens", "down", "cached"})
    ->Unit(benchmark::kMicrosecond);

// Error of y = W x on block-type weights against the exact (double) product of the same dequantized
// weights, as relative RMS over 512 rows of 4096 with normal weights and activations: the f32 path
// ("f32_path") and the 8-bit-activation integer dot ("int8_path"); "weights" is the error of the
// quantized weights themselves (against the product of the unquantized f32 weights), for scale.
void BM_QuantDotError(benchmark::State& state) {
  const DType dtype = kBlockTypes[state.range(0)];
  const int64_t rows = 512, cols = 4096, row_bytes = dtype_row_bytes(dtype, cols);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(rows * cols)), x(static_cast<size_t>(cols));
  std::vector<float> w_deq(w.size()), y_f32(static_cast<size_t>(rows)), y_int(y_f32.size());
  for (auto& v : w) v = normal(rng);
  for (auto& v : x) v = normal(rng);
  std::vector<uint8_t> bytes(size_t(rows * row_bytes));
  quantize_rows(dtype, w.data(), bytes.data(), rows, cols);
  for (int64_t r = 0; r < rows; ++r) dequantize_row(dtype, bytes.data() + r * row_bytes, w_deq.data() + r * cols, cols);
  ThreadPool pool(1);
  const WeightView view{bytes.data(), dtype, rows, cols};
  double err_f32 = 0, err_int = 0, err_weights = 0, energy = 0;
  for (auto _ : state) {
    ops::set_block_activation_mode(ops::BlockActivationMode::kF32);
    ops::matmul(y_f32.data(), x.data(), view, 1, pool);
    ops::set_block_activation_mode(ops::BlockActivationMode::kInt8);
    ops::matmul(y_int.data(), x.data(), view, 1, pool);
    err_f32 = err_int = err_weights = energy = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double exact = 0, original = 0;
      for (int64_t c = 0; c < cols; ++c) {
        exact += double(w_deq[size_t(r * cols + c)]) * double(x[size_t(c)]);
        original += double(w[size_t(r * cols + c)]) * double(x[size_t(c)]);
      }
      err_f32 += (y_f32[size_t(r)] - exact) * (y_f32[size_t(r)] - exact);
      err_int += (y_int[size_t(r)] - exact) * (y_int[size_t(r)] - exact);
      err_weights += (exact - original) * (exact - original);
      energy += exact * exact;
    }
  }
  state.counters["f32_path"] = std::sqrt(err_f32 / energy);
  state.counters["int8_path"] = std::sqrt(err_int / energy);
  state.counters["weights"] = std::sqrt(err_weights / energy);
  state.SetLabel(std::string(dtype_name(dtype)));
}
BENCHMARK(BM_QuantDotError)->DenseRange(0, 6)->ArgNames({"dtype"})->Iterations(1);

// One empty dispatch to all threads: the fixed cost each threaded op pays.
void BM_PoolDispatch(benchmark::State& state) {
  ThreadPool pool(threads_arg(state, 0));
  for (auto _ : state) pool.run(pool.size(), [](int64_t task) { benchmark::DoNotOptimize(task); });
  state.SetLabel(std::to_string(pool.size()) + " threads");
}
BENCHMARK(BM_PoolDispatch)->Arg(0)->UseRealTime();

}  // namespace
}  // namespace chronos

BENCHMARK_MAIN();
