// StagingPool: the page-locked buffers that reads land in before their copy to a device-tier slot.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "chronos/backend.h"

namespace chronos {

// Used by the prefetcher's I/O thread only (not thread-safe). Each buffer holds one slot's bytes
// and is busy from the read landing in it until its H2D copy has completed (its own event): a
// buffer is reused only once the copy stream is done with it.
class StagingPool {
 public:
  // Empty when the backend's staging memory is the device tier (CPU): reads land in the slots
  // themselves. Otherwise budget_bytes / slot_bytes buffers (budget 0: one per queue_depth), at
  // most 4 x queue_depth, since a buffer is held by one read and then one copy and no more can be
  // kept busy. Throws BudgetTooSmall for a budget below one slot (--pinned-budget).
  StagingPool(Backend& backend, int64_t slot_bytes, int64_t budget_bytes, unsigned queue_depth);
  // The copies out of the buffers must have completed (the owner synchronizes its copy stream).
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  bool empty() const { return buffers_.empty(); }
  size_t size() const { return buffers_.size(); }
  // Buffers that no read holds and whose last copy has completed.
  size_t n_free() const;
  // Marks a free buffer busy and returns its index; -1 when none is free.
  int acquire();
  void* data(int buffer) { return buffers_[size_t(buffer)].buffer.data; }
  // Record it on the copy stream after the buffer's copy: acquire waits for it.
  Event& copied(int buffer) { return *buffers_[size_t(buffer)].copied; }
  // The buffer's read failed, or its copy is queued with `copied` recorded after it.
  void release(int buffer) { buffers_[size_t(buffer)].used = false; }

 private:
  struct Staging {
    Buffer buffer;
    std::unique_ptr<Event> copied;  // signalled when its last H2D copy has completed
    bool used = false;              // a read is landing in it, or its copy is not yet queued
  };

  Backend& backend_;
  std::vector<Staging> buffers_;
};

}  // namespace chronos
