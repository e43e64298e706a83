// AsyncPrefetcher on a packed fixture: coalesced reads of file-adjacent experts land every byte in
// the right slot, with one IoRing request per run, and a corrupt expert fails alone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "chronos/backend.h"
#include "chronos/error.h"
#include "chronos/expert_cache.h"
#include "chronos/pack.h"
#include "chronos/pack_format.h"
#include "chronos/prefetcher.h"
#include "chronos/shared_expert_cache.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

// A packed fixture (one cluster file per 256 MiB, experts in (layer, expert) order), a cache that
// holds all of it, and a prefetcher over both.
class PrefetcherTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("chronos_prefetch_") + info->name() + "_" + std::to_string(::getpid());
    for (char& c : name)
      if (c == '/') c = '_';
    work_ = fs::temp_directory_path() / name;
    fs::remove_all(work_);
    fs::create_directories(work_);
    const fs::path model_dir = fs::path(CHRONOS_TEST_DATA_DIR) / "models" / "mixtral-f32";
    PackOptions options;
    options.method = ClusterMethod::kNone;
    write_pack(*Model::load(model_dir), model_dir, work_ / "pack", options, [](int64_t, int64_t) {});
    manifest_ = PackManifest::load(work_ / "pack");
    backend_ = make_cpu_backend();
  }
  void TearDown() override { fs::remove_all(work_); }

  bool coalesce() const { return std::get<0>(GetParam()); }
  bool force_pread() const { return std::get<1>(GetParam()); }

  void start(AsyncPrefetcher::Options options) {
    int64_t slot_bytes = 0;
    for (const auto& [key, e] : manifest_.experts) slot_bytes = std::max(slot_bytes, e.bytes);
    cache_ = std::make_unique<SharedExpertCache>(
        *backend_, ExpertCache::Options{slot_bytes * std::ssize(manifest_.experts), slot_bytes});
    options.coalesce = coalesce();
    options.force_pread = force_pread();
    prefetcher_ = std::make_unique<AsyncPrefetcher>(manifest_, work_ / "pack", *cache_, *backend_, options);
  }

  // The experts of the largest cluster, in file order.
  const PackCluster& cluster() const {
    const PackCluster* best = &manifest_.clusters.front();
    for (const PackCluster& c : manifest_.clusters)
      if (c.experts.size() > best->experts.size()) best = &c;
    return *best;
  }

  // Waits until `n_ready` experts have been read and an error has (or has not) been seen. The
  // prefetcher notifies the cache after counting each read and after an error, so the wait needs no
  // polling; a missed notification runs into the deadline and fails the test.
  void wait_for(int64_t n_ready, bool failed) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    const auto done = [&] {
      return prefetcher_->stats().reads == n_ready && (prefetcher_->error() != nullptr) == failed;
    };
    const bool reached = cache_->lock().wait_until(deadline, done);
    ASSERT_TRUE(reached) << prefetcher_->stats().reads << " of " << n_ready << " read";
  }

  // The slot's bytes against the cluster file's bytes of the expert's extent.
  void expect_slot_matches_file(const PackedExpert& expert, const std::string& file_bytes) {
    const ExpertCache::Lookup slot = cache_->lock()->find(expert.key);
    ASSERT_EQ(slot.state, SlotState::kReady) << "layer " << expert.key.layer << " expert " << expert.key.expert;
    ASSERT_EQ(std::memcmp(slot.data, file_bytes.data() + expert.offset, size_t(expert.bytes)), 0)
        << "layer " << expert.key.layer << " expert " << expert.key.expert;
  }

  std::string file_bytes(const PackCluster& c) const {
    std::ifstream in(work_ / "pack" / c.file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  fs::path work_;
  PackManifest manifest_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<SharedExpertCache> cache_;
  std::unique_ptr<AsyncPrefetcher> prefetcher_;  // last: stops before the cache goes
};

TEST_P(PrefetcherTest, AClusterReadIsCoalescedAndEveryByteLandsInItsSlot) {
  start({});
  const PackCluster& c = cluster();
  ASSERT_GE(c.experts.size(), 16u) << "the fixture should give one cluster of every expert";
  std::vector<FetchRequest> requests;
  for (const ExpertKey& key : c.experts) requests.push_back({key, FetchPriority::kLater, 0});
  prefetcher_->enqueue(requests);
  wait_for(std::ssize(requests), false);
  const PrefetchStats stats = prefetcher_->stats();
  EXPECT_EQ(stats.reads, std::ssize(requests));
  if (coalesce()) {
    // queue_depth 16 experts at a time, 8 per run: a handful of requests for the whole cluster.
    EXPECT_LT(stats.io_requests, stats.reads);
    EXPECT_GE(stats.io_requests, (stats.reads + 7) / 8);
  } else {
    EXPECT_EQ(stats.io_requests, stats.reads);
  }
  const std::string bytes = file_bytes(c);
  for (const ExpertKey& key : c.experts) expect_slot_matches_file(manifest_.experts.at(key), bytes);
}

TEST_P(PrefetcherTest, ADemandReadTakesItsQueuedFileNeighboursAlong) {
  AsyncPrefetcher::Options options;
  options.queue_depth = 4;
  start(options);
  const PackCluster& c = cluster();
  ASSERT_GE(c.experts.size(), 15u);
  // One pick holds 4 experts. The demand for expert 4 comes first; 10, 12 and 14 (not adjacent to
  // anything queued) outrank 5..7. With neighbours taken along, the first pick is the run 4..7 (one
  // request) and then 10, 12, 14 (three): 4 requests. Without, the first pick is 4, 10, 12, 14
  // (four requests) and 5..7 follow in at least one more.
  std::vector<FetchRequest> requests = {
      {c.experts[5], FetchPriority::kIntent, 0},     {c.experts[6], FetchPriority::kIntent, 0},
      {c.experts[7], FetchPriority::kIntent, 0},     {c.experts[10], FetchPriority::kSameToken, 0},
      {c.experts[12], FetchPriority::kSameToken, 0}, {c.experts[14], FetchPriority::kSameToken, 0},
      {c.experts[4], FetchPriority::kDemand, 0}};
  prefetcher_->enqueue(requests);
  wait_for(std::ssize(requests), false);
  EXPECT_EQ(prefetcher_->stats().io_requests, coalesce() ? 4 : 7);
  const std::string bytes = file_bytes(c);
  for (const FetchRequest& r : requests) expect_slot_matches_file(manifest_.experts.at(r.key), bytes);
}

TEST_P(PrefetcherTest, AFlippedByteFailsOnlyItsExpertInACoalescedRun) {
  const PackCluster& c = cluster();
  ASSERT_GE(c.experts.size(), 8u);
  const PackedExpert& victim = manifest_.experts.at(c.experts[3]);  // inside the first run of 8
  {
    std::fstream f(work_ / "pack" / c.file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(victim.down.offset + 7);
    char byte = 0;
    f.read(&byte, 1);
    byte = char(byte ^ 0x01);
    f.seekp(victim.down.offset + 7);
    f.write(&byte, 1);
  }
  start({});
  std::vector<FetchRequest> requests;
  for (size_t i = 0; i < 8; ++i) requests.push_back({c.experts[i], FetchPriority::kNextToken, 0});
  prefetcher_->enqueue(requests);
  wait_for(7, true);
  const PrefetchStats stats = prefetcher_->stats();
  EXPECT_EQ(stats.io_requests, coalesce() ? 1 : 8);
  try {
    std::rethrow_exception(prefetcher_->error());
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(c.file), std::string::npos) << message;
    EXPECT_NE(message.find(fmt::format("layer {} expert {}:", victim.key.layer, victim.key.expert)), std::string::npos)
        << message;
    EXPECT_NE(message.find("checksum"), std::string::npos) << message;
  }
  const std::string bytes = file_bytes(c);
  for (size_t i = 0; i < 8; ++i) {
    const PackedExpert& expert = manifest_.experts.at(c.experts[i]);
    if (i == 3) {
      EXPECT_EQ(cache_->lock()->find(expert.key).state, SlotState::kEmpty);
    } else {
      expect_slot_matches_file(expert, bytes);
    }
  }
}

TEST_P(PrefetcherTest, AReadErrorFailsEveryExpertOfItsRunAndNoOther) {
  const PackCluster& c = cluster();
  ASSERT_GE(c.experts.size(), 12u);
  const int64_t bad_offset = manifest_.experts.at(c.experts[9]).offset;
  AsyncPrefetcher::Options options;
  // EIO for the request that covers expert 9's first byte: with coalescing, the run 8..11.
  options.fault_injector = [bad_offset](const ReadRequest& r) {
    return r.offset <= bad_offset && bad_offset < r.offset + r.bytes ? EIO : 0;
  };
  start(options);
  std::vector<FetchRequest> requests;
  for (size_t i = 0; i < 4; ++i) requests.push_back({c.experts[i], FetchPriority::kLater, 0});
  for (size_t i = 8; i < 12; ++i) requests.push_back({c.experts[i], FetchPriority::kLater, 0});
  prefetcher_->enqueue(requests);
  const int64_t n_failed = coalesce() ? 4 : 1;
  wait_for(8 - n_failed, true);
  try {
    std::rethrow_exception(prefetcher_->error());
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Input/output error"), std::string::npos) << e.what();
  }
  const auto cache = cache_->lock();
  for (size_t i = 0; i < requests.size(); ++i) {
    const ExpertKey key = requests[i].key;
    const bool in_bad_run = coalesce() ? i >= 4 : key == c.experts[9];
    EXPECT_EQ(cache->find(key).state, in_bad_run ? SlotState::kEmpty : SlotState::kReady)
        << "layer " << key.layer << " expert " << key.expert;
  }
  EXPECT_EQ(prefetcher_->stats().io_requests, coalesce() ? 2 : 8);
}

INSTANTIATE_TEST_SUITE_P(CoalesceAndBackend, PrefetcherTest, ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "Coalesced" : "OnePerExpert") +
                                  (std::get<1>(info.param) ? "Pread" : "Default");
                         });

}  // namespace
}  // namespace chronos
