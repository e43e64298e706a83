// --expert-cache auto: the available memory read from /proc and the memory cgroups (v1 and v2) of
// a fake root, and the budget left beside the resident weights.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "chronos/budget.h"
#include "chronos/error.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kGiB = int64_t(1) << 30;

class MemoryProbe : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("chronos_memory_probe_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    write("proc/meminfo", "MemTotal:       25165824 kB\nMemFree:         1048576 kB\nMemAvailable:   16777216 kB\n");
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& path, const std::string& text) {
    fs::create_directories((root_ / path).parent_path());
    std::ofstream(root_ / path) << text;
  }
  fs::path root_;
};

TEST_F(MemoryProbe, MemAvailableWithoutALimitingCgroup) {
  write("proc/self/cgroup", "0::/user.slice/session-1.scope\n");
  write("sys/fs/cgroup/user.slice/session-1.scope/memory.max", "max\n");
  write("sys/fs/cgroup/user.slice/session-1.scope/memory.current", "1000\n");
  const AvailableMemory m = available_memory(root_);
  EXPECT_EQ(m.bytes, 16 * kGiB);
  EXPECT_EQ(m.source, "MemAvailable");
}

TEST_F(MemoryProbe, TheTightestCgroupV2AncestorBounds) {
  write("proc/self/cgroup", "0::/a/b\n");
  write("sys/fs/cgroup/a/b/memory.max", std::to_string(12 * kGiB) + "\n");
  write("sys/fs/cgroup/a/b/memory.current", std::to_string(1 * kGiB) + "\n");
  write("sys/fs/cgroup/a/memory.max", std::to_string(8 * kGiB) + "\n");  // the parent's limit is tighter
  write("sys/fs/cgroup/a/memory.current", std::to_string(2 * kGiB) + "\n");
  const AvailableMemory m = available_memory(root_);
  EXPECT_EQ(m.bytes, 6 * kGiB);
  EXPECT_NE(m.source.find("a/memory.max (8.00 GiB limit, 2.00 GiB in use)"), std::string::npos) << m.source;
}

TEST_F(MemoryProbe, CgroupV1MemoryController) {
  write("proc/self/cgroup", "5:cpu:/\n4:memory:/docker/abc\n0::/\n");
  write("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", std::to_string(4 * kGiB) + "\n");
  write("sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", std::to_string(kGiB / 2) + "\n");
  write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "no limit"
  write("sys/fs/cgroup/memory/memory.usage_in_bytes", std::to_string(20 * kGiB) + "\n");
  const AvailableMemory m = available_memory(root_);
  EXPECT_EQ(m.bytes, 4 * kGiB - kGiB / 2);
}

TEST_F(MemoryProbe, NoMeminfoIsAnError) {
  fs::remove(root_ / "proc/meminfo");
  EXPECT_THROW(available_memory(root_), Error);
}

TEST(AutoBudget, WhatIsLeftBesideTheResidentBytesAndTheMargin) {
  const AvailableMemory m{10 * kGiB, "test"};
  // 10 GiB less 3 GiB resident less a 1 GiB margin (10%): 6 GiB of 20.
  const AutoBudget half = auto_expert_budget(m, 20 * kGiB, 3 * kGiB);
  EXPECT_EQ(half.bytes, 6 * kGiB);
  EXPECT_NE(half.explanation.find("6.00 GiB of 20.00 GiB of experts (30%)"), std::string::npos) << half.explanation;
  EXPECT_EQ(auto_expert_budget(m, 4 * kGiB, 3 * kGiB).bytes, 4 * kGiB);  // everything fits
  EXPECT_EQ(auto_expert_budget(m, 20 * kGiB, 12 * kGiB).bytes, 0);       // nothing left
  const AvailableMemory small{kGiB, "test"};
  EXPECT_EQ(auto_expert_budget(small, 20 * kGiB, 0).bytes, kGiB - (int64_t(256) << 20));  // the 256 MiB floor
}

// Without a budget asked for, a pack runs whole when it fits and streams when it does not.
TEST(AutoBudget, TheDefaultIsEveryExpertUnlessTheyDoNotFit) {
  const AvailableMemory m{10 * kGiB, "test"};
  const AutoBudget fits = default_expert_budget(m, 4 * kGiB, 3 * kGiB);
  EXPECT_EQ(fits.bytes, 4 * kGiB);
  EXPECT_EQ(fits.explanation, "");
  const AutoBudget streams = default_expert_budget(m, 20 * kGiB, 3 * kGiB);
  EXPECT_EQ(streams.bytes, 6 * kGiB);
  EXPECT_NE(streams.explanation.find("do not fit beside the rest, so they stream"), std::string::npos);
}

}  // namespace
}  // namespace chronos
