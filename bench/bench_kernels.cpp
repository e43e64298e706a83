// Kernel benchmarks: memory read/copy bandwidth as the ceiling, matvec GB/s against it, matmul
// GFLOP/s for prefill-sized batches, thread-pool dispatch cost. Numbers only, never pass/fail.
//
//   chronos_bench_kernels --benchmark_counters_tabular=true
//
// Counters: "bytes_per_second" (read bandwidth, or weight bytes streamed by matvec) and
// "FLOPS" (2 * rows * cols * n_tokens per matmul). Args are (dtype, threads) or (n_tokens, threads).
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "chronos/dtype.h"
#include "chronos/ops.h"
#include "chronos/thread_pool.h"

namespace chronos {
namespace {

constexpr int64_t kReadBufferBytes = int64_t(1) << 30;   // 1 GiB: far beyond any cache
constexpr int64_t kMatvecBytes = int64_t(256) << 20;     // ~256 MB of weights per matvec

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
  state.SetLabel(std::string(dtype_name(dtype)) + " " + isa_name(active_isa()) + " " +
                 std::to_string(pool.size()) + " threads");
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
  state.counters["FLOPS"] = benchmark::Counter(double(2 * rows * cols * n_tokens) * double(state.iterations()),
                                               benchmark::Counter::kIsRate);
  state.SetLabel(std::string(dtype_name(dtype)) + " " + isa_name(active_isa()) + " " +
                 std::to_string(pool.size()) + " threads");
}
BENCHMARK(BM_Matmul)
    ->ArgsProduct({{16, 128}, {1, 0}, {0, 2}})
    ->ArgNames({"tokens", "threads", "dtype"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

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
