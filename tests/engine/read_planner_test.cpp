// ReadPlanner on manifests built in memory: priority then arrival order, the more urgent of repeated
// requests, stale cancellation, demand reads taking their file neighbours, runs of adjacent extents,
// and random operations against a linear-scan reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "chronos/read_planner.h"

namespace chronos {
namespace {

constexpr int64_t kExtent = 4096;

// One cluster file per entry of `files` (cluster id = its index), its experts back to back in the
// given order, except that a key in `hole_before` starts one extent after the previous one ends.
PackManifest make_manifest(const std::vector<std::vector<ExpertKey>>& files,
                           const std::set<ExpertKey>& hole_before = {},
                           const std::map<ExpertKey, int64_t>& bytes = {}) {
  PackManifest m;
  for (size_t c = 0; c < files.size(); ++c) {
    PackCluster cluster;
    cluster.id = int32_t(c);
    cluster.file = "cluster_" + std::to_string(c) + ".ctsr";
    int64_t offset = 0;
    for (const ExpertKey& key : files[c]) {
      if (hole_before.contains(key)) offset += kExtent;
      PackedExpert e;
      e.key = key;
      e.cluster = cluster.id;
      e.offset = offset;
      e.bytes = bytes.contains(key) ? bytes.at(key) : kExtent;
      offset += e.bytes;
      m.experts[key] = e;
      cluster.experts.push_back(key);
    }
    cluster.bytes = offset;
    m.clusters.push_back(cluster);
  }
  return m;
}

// Layer 0, experts first..first+n-1.
std::vector<ExpertKey> layer0(int32_t first, int32_t n) {
  std::vector<ExpertKey> keys;
  for (int32_t e = first; e < first + n; ++e) keys.push_back({0, e});
  return keys;
}

std::vector<ExpertKey> keys_of(const std::vector<PlannedRead>& reads) {
  std::vector<ExpertKey> keys;
  for (const PlannedRead& r : reads) keys.push_back(r.key);
  return keys;
}

ReadPlanner::Options coalescing(int max_run_experts, int64_t max_run_bytes = int64_t(1) << 30) {
  return ReadPlanner::Options{max_run_experts, max_run_bytes};
}

TEST(ReadPlanner, TakesTheMostUrgentFirstAndEqualsInArrivalOrder) {
  const PackManifest m = make_manifest({layer0(0, 8)});
  ReadPlanner planner(m, {});
  const std::vector<FetchRequest> requests = {
      {{0, 0}, FetchPriority::kIntent, 0},    {{0, 1}, FetchPriority::kNextToken, 0},
      {{0, 2}, FetchPriority::kDemand, 0},    {{0, 3}, FetchPriority::kNextToken, 0},
      {{0, 4}, FetchPriority::kSameToken, 0}, {{0, 5}, FetchPriority::kDemand, 0},
      {{0, 6}, FetchPriority::kLater, 0}};
  for (const FetchRequest& r : requests) EXPECT_TRUE(planner.enqueue(r));
  EXPECT_EQ(planner.size(), requests.size());
  EXPECT_EQ(keys_of(planner.take(3)), (std::vector<ExpertKey>{{0, 2}, {0, 5}, {0, 4}}));
  EXPECT_EQ(planner.size(), 4u);
  EXPECT_EQ(keys_of(planner.take(10)), (std::vector<ExpertKey>{{0, 1}, {0, 3}, {0, 6}, {0, 0}}));
  EXPECT_TRUE(planner.empty());
  EXPECT_TRUE(planner.take(10).empty());
}

TEST(ReadPlanner, ARepeatedKeyKeepsItsPlaceAndTheMoreUrgentPriorityWithItsStep) {
  const PackManifest m = make_manifest({layer0(0, 4)});
  ReadPlanner planner(m, {});
  EXPECT_TRUE(planner.enqueue({{0, 0}, FetchPriority::kLater, 3}));
  EXPECT_TRUE(planner.enqueue({{0, 1}, FetchPriority::kSameToken, 4}));
  EXPECT_FALSE(planner.enqueue({{0, 0}, FetchPriority::kSameToken, 5}));  // raised: now ties with (0, 1), came first
  EXPECT_FALSE(planner.enqueue({{0, 1}, FetchPriority::kIntent, 9}));     // less urgent: changes nothing
  EXPECT_EQ(planner.size(), 2u);
  const std::vector<PlannedRead> taken = planner.take(2);
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].key, (ExpertKey{0, 0}));
  EXPECT_EQ(taken[0].priority, FetchPriority::kSameToken);
  EXPECT_EQ(taken[0].step, 5);
  EXPECT_EQ(taken[1].key, (ExpertKey{0, 1}));
  EXPECT_EQ(taken[1].priority, FetchPriority::kSameToken);
  EXPECT_EQ(taken[1].step, 4);
  EXPECT_LT(taken[0].sequence, taken[1].sequence);
}

TEST(ReadPlanner, CancelStaleDropsOnlyNonDemandRequestsOfPastSteps) {
  const PackManifest m = make_manifest({layer0(0, 8)});
  ReadPlanner planner(m, {});
  const std::vector<FetchRequest> requests = {
      {{0, 0}, FetchPriority::kSameToken, 1}, {{0, 1}, FetchPriority::kNextToken, 1},
      {{0, 2}, FetchPriority::kIntent, 0},    {{0, 3}, FetchPriority::kDemand, 1},  // never stale
      {{0, 4}, FetchPriority::kLater, 2},     {{0, 5}, FetchPriority::kLater, 3}};
  for (const FetchRequest& r : requests) planner.enqueue(r);
  EXPECT_EQ(planner.cancel_stale(2), 3);
  EXPECT_EQ(planner.cancel_stale(2), 0);
  EXPECT_FALSE(planner.contains({0, 0}));
  EXPECT_FALSE(planner.contains({0, 2}));
  EXPECT_EQ(keys_of(planner.take(10)), (std::vector<ExpertKey>{{0, 3}, {0, 4}, {0, 5}}));
  // A cancelled key asked for again is a new request, at the back of its priority.
  planner.enqueue({{0, 6}, FetchPriority::kLater, 5});
  planner.enqueue({{0, 0}, FetchPriority::kLater, 5});
  EXPECT_EQ(keys_of(planner.take(10)), (std::vector<ExpertKey>{{0, 6}, {0, 0}}));
}

TEST(ReadPlanner, ADemandPickTakesItsPendingFileNeighboursAlongWithinTheCaps) {
  // File 0: experts 0..9 back to back, except a hole before 8. File 1: experts 10..13.
  const PackManifest m = make_manifest({layer0(0, 10), layer0(10, 4)}, {{0, 8}});
  const auto enqueue_all = [](ReadPlanner& planner, const std::vector<int32_t>& experts, FetchPriority priority) {
    for (const int32_t e : experts) planner.enqueue({{0, e}, priority, 0});
  };
  {  // Both directions, any priority, right after the demand; it stops at a key that is not pending.
    ReadPlanner planner(m, coalescing(8));
    enqueue_all(planner, {1, 3, 4, 6, 12}, FetchPriority::kIntent);
    enqueue_all(planner, {0}, FetchPriority::kSameToken);
    enqueue_all(planner, {5}, FetchPriority::kDemand);
    EXPECT_EQ(keys_of(planner.take(10)),
              (std::vector<ExpertKey>{{0, 5}, {0, 6}, {0, 4}, {0, 3}, {0, 0}, {0, 1}, {0, 12}}));
  }
  {  // A hole in the file ends the run, and so does the file's end (10 starts the next file).
    ReadPlanner planner(m, coalescing(8));
    enqueue_all(planner, {6, 8, 10}, FetchPriority::kLater);
    enqueue_all(planner, {7, 9}, FetchPriority::kDemand);
    EXPECT_EQ(keys_of(planner.take(10)), (std::vector<ExpertKey>{{0, 7}, {0, 6}, {0, 9}, {0, 8}, {0, 10}}));
  }
  {  // The run caps: experts (the demand counts), bytes, and the room of the pick.
    ReadPlanner by_count(m, coalescing(3));
    enqueue_all(by_count, {2, 3, 5, 6}, FetchPriority::kLater);
    enqueue_all(by_count, {4}, FetchPriority::kDemand);
    EXPECT_EQ(keys_of(by_count.take(1)), (std::vector<ExpertKey>{{0, 4}}));  // room 1: the demand alone
    by_count.enqueue({{0, 4}, FetchPriority::kDemand, 0});
    EXPECT_EQ(keys_of(by_count.take(10)), (std::vector<ExpertKey>{{0, 4}, {0, 5}, {0, 6}, {0, 2}, {0, 3}}));

    ReadPlanner by_bytes(m, coalescing(8, 2 * kExtent));
    enqueue_all(by_bytes, {3, 5}, FetchPriority::kLater);
    enqueue_all(by_bytes, {0}, FetchPriority::kSameToken);
    enqueue_all(by_bytes, {4}, FetchPriority::kDemand);
    EXPECT_EQ(keys_of(by_bytes.take(10)), (std::vector<ExpertKey>{{0, 4}, {0, 5}, {0, 0}, {0, 3}}));
  }
  {  // Only a demand brings neighbours; without coalescing nothing does.
    ReadPlanner planner(m, coalescing(8));
    enqueue_all(planner, {5}, FetchPriority::kIntent);
    enqueue_all(planner, {4}, FetchPriority::kSameToken);
    enqueue_all(planner, {9}, FetchPriority::kLater);
    EXPECT_EQ(keys_of(planner.take(10)), (std::vector<ExpertKey>{{0, 4}, {0, 9}, {0, 5}}));
    ReadPlanner single(m, coalescing(1));
    enqueue_all(single, {3, 5}, FetchPriority::kIntent);
    enqueue_all(single, {9}, FetchPriority::kLater);
    enqueue_all(single, {4}, FetchPriority::kDemand);
    EXPECT_EQ(keys_of(single.take(10)), (std::vector<ExpertKey>{{0, 4}, {0, 9}, {0, 3}, {0, 5}}));
  }
}

TEST(ReadPlanner, RequeueKeepsTheOldPlaceUnlessTheKeyWasAskedForAgain) {
  const PackManifest m = make_manifest({layer0(0, 4)});
  ReadPlanner planner(m, {});
  planner.enqueue({{0, 0}, FetchPriority::kDemand, 1});
  planner.enqueue({{0, 1}, FetchPriority::kDemand, 1});
  const std::vector<PlannedRead> first = planner.take(1);
  ASSERT_EQ(keys_of(first), (std::vector<ExpertKey>{{0, 0}}));
  planner.enqueue({{0, 2}, FetchPriority::kDemand, 2});
  planner.requeue(first[0]);  // no slot: it goes back ahead of (0, 1), which came later
  EXPECT_EQ(keys_of(planner.take(3)), (std::vector<ExpertKey>{{0, 0}, {0, 1}, {0, 2}}));

  planner.enqueue({{0, 3}, FetchPriority::kLater, 1});
  const std::vector<PlannedRead> taken = planner.take(1);
  planner.enqueue({{0, 3}, FetchPriority::kIntent, 7});  // asked for again meanwhile: that request stands
  planner.requeue(taken[0]);
  const std::vector<PlannedRead> again = planner.take(1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].priority, FetchPriority::kIntent);
  EXPECT_EQ(again[0].step, 7);
  EXPECT_TRUE(planner.empty());
}

TEST(ReadPlanner, GroupRunsJoinsAdjacentExtentsOfOneFileWithinTheCaps) {
  // File 0: experts 0..5 back to back, a hole before 6, then 6..7. File 1: 8..9.
  const PackManifest m = make_manifest({layer0(0, 8), layer0(8, 2)}, {{0, 6}}, {{{0, 2}, 3 * kExtent}});
  const auto expert = [&](int32_t e) { return &m.experts.at(ExpertKey{0, e}); };
  // Most urgent first: 9, 3, 0, 6, 1, 8, 2, 7, 5.
  const std::vector<const PackedExpert*> started = {expert(9), expert(3), expert(0), expert(6), expert(1),
                                                    expert(8), expert(2), expert(7), expert(5)};
  using Runs = std::vector<std::vector<size_t>>;
  // In file order: 0 1 2 3 | 5 (4 missing) | 6 7 (hole before 6) | 8 9 (other file), each run led
  // by its most urgent member: 8 9 (position 0), then 0..3 (1), then 6 7 (3), then 5 (8).
  EXPECT_EQ(ReadPlanner(m, coalescing(8)).group_runs(started), (Runs{{5, 0}, {2, 4, 6, 1}, {3, 7}, {8}}));
  // At most 3 experts a run: 0 1 2 | 3.
  EXPECT_EQ(ReadPlanner(m, coalescing(3)).group_runs(started), (Runs{{5, 0}, {1}, {2, 4, 6}, {3, 7}, {8}}));
  // At most 4 extents of bytes (expert 2 is 3 long): 0 1 | 2 3.
  EXPECT_EQ(ReadPlanner(m, coalescing(8, 4 * kExtent)).group_runs(started),
            (Runs{{5, 0}, {6, 1}, {2, 4}, {3, 7}, {8}}));
  // Without coalescing: one run per expert, in the given order.
  EXPECT_EQ(ReadPlanner(m, coalescing(1)).group_runs(started), (Runs{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}}));
}

// The planner before the heap: a std::map scanned for the most urgent request, and the same
// neighbour rule. The heap with lazy deletion must pick exactly what it picks.
class LinearScanReference {
 public:
  LinearScanReference(const PackManifest& m, int max_run_experts) : m_(m), max_run_experts_(max_run_experts) {}

  void enqueue(const FetchRequest& r) {
    auto [it, inserted] = queue_.try_emplace(r.key, Queued{r.priority, r.step, next_sequence_});
    if (inserted) {
      ++next_sequence_;
    } else if (r.priority < it->second.priority) {
      it->second.priority = r.priority;
      it->second.step = r.step;
    }
  }
  void requeue(const PlannedRead& r) { queue_.emplace(r.key, Queued{r.priority, r.step, r.sequence}); }
  int64_t cancel_stale(int64_t step) {
    return int64_t(std::erase_if(
        queue_, [step](const auto& e) { return e.second.priority != FetchPriority::kDemand && e.second.step < step; }));
  }
  std::vector<PlannedRead> take(size_t room) {
    std::vector<PlannedRead> picked;
    while (picked.size() < room && !queue_.empty()) {
      auto best = queue_.begin();
      for (auto it = queue_.begin(); it != queue_.end(); ++it)
        if (std::tie(it->second.priority, it->second.sequence) < std::tie(best->second.priority, best->second.sequence))
          best = it;
      const ExpertKey key = best->first;
      picked.push_back(read_of(best));
      queue_.erase(best);
      if (max_run_experts_ > 1 && picked.back().priority == FetchPriority::kDemand) neighbours(key, room, picked);
    }
    return picked;
  }
  size_t size() const { return queue_.size(); }

 private:
  struct Queued {
    FetchPriority priority;
    int64_t step;
    uint64_t sequence;
  };
  PlannedRead read_of(std::map<ExpertKey, Queued>::const_iterator it) const {
    return PlannedRead{it->first, it->second.priority, it->second.step, it->second.sequence};
  }
  void neighbours(ExpertKey key, size_t room, std::vector<PlannedRead>& picked) {
    const PackedExpert* first = &m_.experts.at(key);
    const PackCluster& cluster = m_.clusters[size_t(first->cluster)];
    const auto at = std::find(cluster.experts.begin(), cluster.experts.end(), key) - cluster.experts.begin();
    const PackedExpert* last = first;
    int n_run = 1;
    for (const int direction : {+1, -1}) {
      for (auto position = at + direction; position >= 0 && position < std::ssize(cluster.experts);
           position += direction) {
        if (picked.size() >= room || n_run >= max_run_experts_) return;
        const PackedExpert& candidate = m_.experts.at(cluster.experts[size_t(position)]);
        const bool adjacent = direction > 0 ? candidate.offset == last->offset + last->bytes
                                            : candidate.offset + candidate.bytes == first->offset;
        const auto queued = queue_.find(candidate.key);
        if (!adjacent || queued == queue_.end()) break;
        picked.push_back(read_of(queued));
        queue_.erase(queued);
        (direction > 0 ? last : first) = &candidate;
        ++n_run;
      }
    }
  }

  const PackManifest& m_;
  int max_run_experts_;
  std::map<ExpertKey, Queued> queue_;
  uint64_t next_sequence_ = 0;
};

void expect_same_reads(const std::vector<PlannedRead>& got, const std::vector<PlannedRead>& want, int op) {
  ASSERT_EQ(got.size(), want.size()) << "operation " << op;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].key, want[i].key) << "operation " << op << ", read " << i;
    EXPECT_EQ(got[i].priority, want[i].priority) << "operation " << op << ", read " << i;
    EXPECT_EQ(got[i].step, want[i].step) << "operation " << op << ", read " << i;
    EXPECT_EQ(got[i].sequence, want[i].sequence) << "operation " << op << ", read " << i;
  }
}

// Many requests raised, cancelled and taken as neighbours leave many stale heap entries behind
// (and force rebuilds); none of them may ever be served.
TEST(ReadPlanner, RandomOperationsPickExactlyWhatALinearScanPicks) {
  std::vector<std::vector<ExpertKey>> files(3);
  for (int32_t layer = 0; layer < 4; ++layer)
    for (int32_t e = 0; e < 16; ++e) files[size_t((layer * 16 + e) % 3)].push_back({layer, e});
  const PackManifest m = make_manifest(files, {{1, 5}, {2, 9}, {3, 0}});
  std::vector<ExpertKey> keys;
  for (const auto& [key, e] : m.experts) keys.push_back(key);
  for (const int max_run_experts : {1, 4, 8}) {
    SCOPED_TRACE(max_run_experts);
    ReadPlanner planner(m, coalescing(max_run_experts));
    LinearScanReference reference(m, max_run_experts);
    std::mt19937 rng(uint32_t(17 + max_run_experts));
    std::vector<PlannedRead> held;  // taken, not yet started: requeued later or dropped
    int64_t step = 0;
    for (int op = 0; op < 20000; ++op) {
      const uint32_t choice = rng() % 100;
      if (choice < 60) {
        const FetchRequest r{keys[rng() % keys.size()], FetchPriority(rng() % 5), step + int64_t(rng() % 3)};
        planner.enqueue(r);
        reference.enqueue(r);
      } else if (choice < 75) {
        const size_t room = 1 + rng() % 6;
        const std::vector<PlannedRead> got = planner.take(room);
        expect_same_reads(got, reference.take(room), op);
        if (rng() % 2 == 0) held.insert(held.end(), got.begin(), got.end());
      } else if (choice < 85) {
        if (!held.empty()) {
          const size_t i = rng() % held.size();
          planner.requeue(held[i]);
          reference.requeue(held[i]);
          held.erase(held.begin() + std::ptrdiff_t(i));
        }
      } else if (choice < 90) {
        step += 1;
        EXPECT_EQ(planner.cancel_stale(step), reference.cancel_stale(step)) << "operation " << op;
      } else {
        held.clear();
      }
      ASSERT_EQ(planner.size(), reference.size()) << "operation " << op;
      if (HasFailure()) return;
    }
    expect_same_reads(planner.take(keys.size()), reference.take(keys.size()), -1);
    EXPECT_TRUE(planner.empty());
  }
}

}  // namespace
}  // namespace chronos
