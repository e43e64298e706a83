// StagingPool: page-locked buffers between the disk and the device tier, reused once copied.
#include "expert/staging_pool.h"

#include <fmt/format.h>

#include <algorithm>

#include "chronos/expert_cache.h"

namespace chronos {

StagingPool::StagingPool(Backend& backend, int64_t slot_bytes, int64_t budget_bytes, unsigned queue_depth)
    : backend_(backend) {
  if (backend.staging_is_device()) return;
  if (budget_bytes > 0 && budget_bytes < slot_bytes)
    throw BudgetTooSmall(BudgetTooSmall::Budget::kStaging,
                         fmt::format("page-locked staging budget {} bytes is smaller than one expert slot ({} bytes)",
                                     budget_bytes, slot_bytes));
  const int64_t wanted = budget_bytes > 0 ? budget_bytes / slot_bytes : int64_t(queue_depth);
  buffers_.resize(size_t(std::clamp<int64_t>(wanted, 1, 4 * int64_t(queue_depth))));
  for (Staging& staging : buffers_) {
    staging.buffer = backend.alloc_staging(size_t(slot_bytes));
    staging.copied = backend.create_event();
  }
}

StagingPool::~StagingPool() {
  for (Staging& staging : buffers_) backend_.free_staging(staging.buffer);
}

size_t StagingPool::n_free() const {
  size_t n = 0;
  for (const Staging& staging : buffers_) n += !staging.used && staging.copied->query();
  return n;
}

int StagingPool::acquire() {
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (!buffers_[i].used && buffers_[i].copied->query()) {
      buffers_[i].used = true;
      return int(i);
    }
  }
  return -1;
}

}  // namespace chronos
