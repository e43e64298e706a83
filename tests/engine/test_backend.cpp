// CPU backend: streams run in order, events signal after recorded work, cross-stream waits hold.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "chronos/backend.h"

namespace chronos {
namespace {

TEST(CpuBackend, StreamRunsTasksInOrder) {
  auto backend = make_cpu_backend();
  auto stream = backend->create_stream();
  std::vector<int> order;
  for (int i = 0; i < 100; ++i) stream->enqueue([&order, i] { order.push_back(i); });
  stream->synchronize();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[size_t(i)], i);
}

TEST(CpuBackend, EventSignalsOnlyAfterRecordedWork) {
  auto backend = make_cpu_backend();
  auto stream = backend->create_stream();
  auto event = backend->create_event();
  EXPECT_TRUE(event->query());  // created signalled
  std::atomic<bool> release{false}, done{false};
  stream->enqueue([&] {
    while (!release) std::this_thread::yield();
    done = true;
  });
  stream->record(*event);
  EXPECT_FALSE(event->query());
  release = true;
  event->wait();
  EXPECT_TRUE(done);
  EXPECT_TRUE(event->query());
}

TEST(CpuBackend, WaitEventOrdersTwoStreams) {
  auto backend = make_cpu_backend();
  auto copy = backend->create_stream();
  auto compute = backend->create_stream();
  auto ready = backend->create_event();
  std::atomic<bool> release{false};
  std::atomic<int> value{0};
  copy->enqueue([&] {
    while (!release) std::this_thread::yield();
    value = 1;
  });
  copy->record(*ready);
  compute->wait_event(*ready);
  std::atomic<int> seen{-1};
  compute->enqueue([&] { seen = value.load(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(seen.load(), -1);  // still blocked behind the event
  release = true;
  compute->synchronize();
  EXPECT_EQ(seen.load(), 1);
}

TEST(CpuBackend, BuffersArePageAlignedAndCopyRuns) {
  auto backend = make_cpu_backend();
  Buffer staging = backend->alloc_staging(10000);
  Buffer device = backend->alloc_device(10000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(staging.data) % 4096, 0u);
  auto* src = static_cast<unsigned char*>(staging.data);
  for (int i = 0; i < 10000; ++i) src[i] = static_cast<unsigned char>(i * 7);
  auto stream = backend->create_stream();
  backend->copy_to_device(*stream, device.data, staging.data, 10000);
  stream->synchronize();
  EXPECT_EQ(std::memcmp(device.data, staging.data, 10000), 0);
  backend->free_staging(staging);
  backend->free_device(device);
  EXPECT_EQ(staging.data, nullptr);
}

// Buffers of 2 MiB or more start on a huge-page boundary (transparent huge pages can back them),
// hold every byte asked for, and leave the neighbouring allocations untouched when freed.
TEST(CpuBackend, LargeBuffersAreHugePageAligned) {
  auto backend = make_cpu_backend();
  constexpr size_t kHuge = size_t(2) << 20;
  for (const size_t bytes : {kHuge, 3 * kHuge + 12345, size_t(7) << 20}) {
    SCOPED_TRACE(bytes);
    Buffer a = backend->alloc_device(bytes), b = backend->alloc_device(bytes);
    ASSERT_NE(a.data, nullptr);
    EXPECT_EQ(a.bytes, bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % kHuge, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % kHuge, 0u);
    std::memset(a.data, 0x5a, bytes);
    std::memset(b.data, 0xa5, bytes);
    backend->free_device(a);
    const auto* q = static_cast<const unsigned char*>(b.data);
    EXPECT_EQ(q[0], 0xa5);
    EXPECT_EQ(q[bytes - 1], 0xa5);
    backend->free_device(b);
  }
}

}  // namespace
}  // namespace chronos
