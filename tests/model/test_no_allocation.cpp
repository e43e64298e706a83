// The forward pass allocates nothing: after a warm-up, prefill and decode steps make no heap
// allocation at all (counted through a replaced global operator new).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <new>

#include "chronos/model.h"
#include "chronos/ops.h"
#include "chronos/thread_pool.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};

void* counted_alloc(std::size_t size) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
}  // namespace

// Every replaceable form the library may call, so new/delete always pair with malloc/free
// (std::stable_sort's temporary buffer uses the nothrow form, for instance).
void* operator new(std::size_t size) { return counted_alloc(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept { return operator new(size, tag); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void* operator new[](std::size_t size) { return counted_alloc(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace chronos {
namespace {

class NoAllocation : public ::testing::TestWithParam<const char*> {};

// The heap allocations of a second run. Every worker's kernel buffers are reserved first, not only
// those of the workers the warm-up happens to use; then the warm-up (the first run) brings the
// remaining per-thread state to its size.
int64_t allocations_after_warm_up(ThreadPool& pool, const std::function<void()>& run) {
  ops::reserve_thread_buffers(pool);
  run();
  g_allocations = 0;
  g_counting = true;
  run();
  g_counting = false;
  return g_allocations.load();
}

TEST_P(NoAllocation, PrefillAndDecodeAllocateNothing) {
  const auto dir = std::filesystem::path(CHRONOS_TEST_DATA_DIR) / "models" / GetParam();
  const auto model = Model::load(dir);
  ThreadPool pool(2);
  KvCache kv(model->config(), 64);
  auto scratch = model->make_scratch(8, kv.n_ctx());
  std::vector<float> logits(size_t(model->config().n_vocab) * 16);
  const std::vector<int32_t> prompt = {5, 9, 14, 3, 30, 31, 7, 8, 11, 12, 40, 41, 42};
  auto run = [&] {
    model->forward(prompt, 0, kv, *scratch, pool, logits.data(), false);  // chunks of 8 + 5
    int32_t token = 17;
    for (int64_t pos = std::ssize(prompt); pos < std::ssize(prompt) + 10; ++pos) {
      model->forward(std::span<const int32_t>(&token, 1), pos, kv, *scratch, pool, logits.data(), false);
      token = int32_t(std::max_element(logits.begin(), logits.begin() + model->config().n_vocab) - logits.begin());
    }
  };
  EXPECT_EQ(allocations_after_warm_up(pool, run), 0);
}

TEST_P(NoAllocation, BatchesOfSeveralSequencesAllocateNothing) {
  const auto dir = std::filesystem::path(CHRONOS_TEST_DATA_DIR) / "models" / GetParam();
  const auto model = Model::load(dir);
  const int64_t n_vocab = model->config().n_vocab;
  ThreadPool pool(2);
  KvStore store(model->config(), 64, 3);
  auto scratch = model->make_scratch(8, store.n_ctx());
  std::vector<float> logits(size_t(n_vocab) * 16);
  Batch batch;
  // Two sequences prefill (one in chunks), then three decode together; the slots are freed after.
  auto run = [&] {
    const int32_t a = store.allocate(), b = store.allocate(), c = store.allocate();
    batch.clear();
    for (int32_t i = 0; i < 11; ++i) batch.add(a, i, 5 + i, i == 10);
    for (int32_t i = 0; i < 3; ++i) batch.add(b, i, 40 + i, i == 2);
    model->forward(batch, store, *scratch, pool, logits.data());
    for (int64_t step = 0; step < 6; ++step) {
      batch.clear();
      batch.add(a, 11 + step, 17, true);
      batch.add(b, 3 + step, 18, true);
      batch.add(c, step, 19, true);
      model->forward(batch, store, *scratch, pool, logits.data());
    }
    store.free(a);
    store.free(b);
    store.free(c);
  };
  EXPECT_EQ(allocations_after_warm_up(pool, run), 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, NoAllocation, ::testing::Values("qwen2_moe-f32", "mixtral-bf16", "qwen3_moe-bf16"));

TEST(NoAllocation, CounterSeesAllocations) {  // the hook itself works
  g_allocations = 0;
  g_counting = true;
  auto* p = new std::vector<int>(100);
  g_counting = false;
  delete p;
  EXPECT_GE(g_allocations.load(), 2);
}

}  // namespace
}  // namespace chronos
