// ReadPlanner: pending expert reads in a lazily pruned heap, stale-request cancellation, and runs of
// file-adjacent extents.
#include "chronos/read_planner.h"

#include <algorithm>
#include <numeric>
#include <tuple>

namespace chronos {

ReadPlanner::ReadPlanner(const PackManifest& manifest, const Options& options)
    : manifest_(manifest), options_(options) {
  options_.max_run_experts = std::max(1, options_.max_run_experts);
  for (size_t i = 0; i < manifest_.clusters.size(); ++i) {
    cluster_index_[manifest_.clusters[i].id] = i;
    for (size_t j = 0; j < manifest_.clusters[i].experts.size(); ++j) place_[manifest_.clusters[i].experts[j]] = {i, j};
  }
}

bool ReadPlanner::HeapEntry::operator<(const HeapEntry& other) const {
  return std::tie(priority, sequence) > std::tie(other.priority, other.sequence);
}

bool ReadPlanner::live(const HeapEntry& entry) const {
  const auto it = pending_.find(entry.key);
  return it != pending_.end() && it->second.priority == entry.priority && it->second.sequence == entry.sequence;
}

void ReadPlanner::push(ExpertKey key, const Pending& pending) {
  heap_.push(HeapEntry{pending.priority, pending.sequence, key});
  compact_if_sparse();
}

// Entries go stale when a key is taken as a neighbour, cancelled or raised to a more urgent
// priority; once they outnumber the live ones the heap is rebuilt, so it stays O(pending).
void ReadPlanner::compact_if_sparse() {
  if (heap_.size() <= 2 * pending_.size() + 64) return;
  std::vector<HeapEntry> entries;
  entries.reserve(pending_.size());
  for (const auto& [key, p] : pending_) entries.push_back(HeapEntry{p.priority, p.sequence, key});
  heap_ = std::priority_queue<HeapEntry>(std::less<HeapEntry>(), std::move(entries));
}

bool ReadPlanner::enqueue(const FetchRequest& request) {
  auto [it, inserted] = pending_.try_emplace(request.key, Pending{request.priority, request.step, next_sequence_});
  if (inserted) {
    ++next_sequence_;
    push(request.key, it->second);
  } else if (request.priority < it->second.priority) {
    it->second.priority = request.priority;
    it->second.step = request.step;
    push(request.key, it->second);  // the entry under the old priority is now stale
  }
  return inserted;
}

void ReadPlanner::requeue(const PlannedRead& read) {
  const auto [it, inserted] = pending_.try_emplace(read.key, Pending{read.priority, read.step, read.sequence});
  if (inserted) push(read.key, it->second);
}

int64_t ReadPlanner::cancel_stale(int64_t step) {
  const auto dropped = std::erase_if(pending_, [step](const auto& entry) {
    return entry.second.priority != FetchPriority::kDemand && entry.second.step < step;
  });
  compact_if_sparse();
  return int64_t(dropped);
}

std::vector<PlannedRead> ReadPlanner::take(size_t room) {
  std::vector<PlannedRead> picked;
  while (picked.size() < room && !pending_.empty()) {
    const HeapEntry top = heap_.top();
    heap_.pop();
    if (!live(top)) continue;
    const Pending chosen = pending_.at(top.key);
    pending_.erase(top.key);
    picked.push_back(PlannedRead{top.key, chosen.priority, chosen.step, chosen.sequence});
    if (options_.max_run_experts > 1 && chosen.priority == FetchPriority::kDemand)
      take_neighbours(top.key, room, picked);
  }
  return picked;
}

// It stops at the first neighbour that is not pending or not adjacent, or at the run caps.
void ReadPlanner::take_neighbours(ExpertKey key, size_t room, std::vector<PlannedRead>& picked) {
  const auto where = place_.find(key);
  if (where == place_.end()) return;  // not in the pack: the prefetcher reports it
  const PackCluster& cluster = manifest_.clusters[where->second.cluster];
  const PackedExpert* first = &manifest_.experts.at(key);
  if (first->scattered()) return;  // read piece by piece, never in a run
  const PackedExpert* last = first;
  int n_run = 1;
  int64_t run_bytes = first->bytes;
  for (const int direction : {+1, -1}) {
    for (auto position = int64_t(where->second.position) + direction;
         position >= 0 && position < std::ssize(cluster.experts); position += direction) {
      if (picked.size() >= room || n_run >= options_.max_run_experts) return;
      const auto next = manifest_.experts.find(cluster.experts[size_t(position)]);
      if (next == manifest_.experts.end() || next->second.scattered()) break;
      const PackedExpert& candidate = next->second;
      const bool adjacent = direction > 0 ? candidate.offset == last->offset + last->bytes
                                          : candidate.offset + candidate.bytes == first->offset;
      if (!adjacent || run_bytes + candidate.bytes > options_.max_run_bytes) break;
      const auto queued = pending_.find(candidate.key);
      if (queued == pending_.end()) break;
      const Pending& p = queued->second;
      picked.push_back(PlannedRead{candidate.key, p.priority, p.step, p.sequence});
      pending_.erase(queued);  // its heap entry is now stale
      (direction > 0 ? last : first) = &candidate;
      ++n_run;
      run_bytes += candidate.bytes;
    }
  }
}

std::vector<std::vector<size_t>> ReadPlanner::group_runs(std::span<const PackedExpert* const> experts) const {
  std::vector<size_t> by_file(experts.size());  // positions in `experts`
  std::iota(by_file.begin(), by_file.end(), size_t(0));
  const auto file_position = [&](size_t i) {
    return std::pair(cluster_index_.at(experts[i]->cluster), experts[i]->offset);
  };
  if (options_.max_run_experts > 1)
    std::sort(by_file.begin(), by_file.end(), [&](size_t a, size_t b) { return file_position(a) < file_position(b); });

  std::vector<std::pair<size_t, std::vector<size_t>>> runs;  // (most urgent position, positions in file order)
  int64_t run_bytes = 0;
  for (const size_t i : by_file) {
    const PackedExpert& expert = *experts[i];
    bool extends = false;
    if (!runs.empty()) {
      const PackedExpert& previous = *experts[runs.back().second.back()];
      extends = !previous.scattered() && !expert.scattered() && previous.cluster == expert.cluster &&
                previous.offset + previous.bytes == expert.offset &&
                std::ssize(runs.back().second) < options_.max_run_experts &&
                run_bytes + expert.bytes <= options_.max_run_bytes;
    }
    if (extends) {
      runs.back().first = std::min(runs.back().first, i);
      runs.back().second.push_back(i);
      run_bytes += expert.bytes;
    } else {
      runs.push_back({i, {i}});
      run_bytes = expert.bytes;
    }
  }
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::vector<size_t>> out;
  out.reserve(runs.size());
  for (auto& run : runs) out.push_back(std::move(run.second));
  return out;
}

}  // namespace chronos
