// IoRing::create: io_uring when the kernel allows it, else the pread backend.
#include "chronos/io_ring.h"

#include <spdlog/spdlog.h>

#include "io/io_ring_internal.h"

namespace chronos {

IoRing::~IoRing() = default;

void ReadRequest::add_segment(void* segment_dst, int64_t segment_bytes) {
  CHRONOS_CHECK_MSG(n_segments < kMaxSegments && dst == nullptr, "read request: no room for segment {} (dst {})",
                    n_segments, dst);
  segments[size_t(n_segments++)] = {segment_dst, segment_bytes};
  bytes += segment_bytes;
}

std::unique_ptr<IoRing> IoRing::create(const Options& options) {
  if (!options.force_pread) {
    if (auto ring = make_uring_ring(options)) return ring;
    spdlog::warn("io_uring is not available here; expert reads use the pread fallback");
  }
  return make_pread_ring(options);
}

namespace io_detail {

void check_options(const IoRing::Options& options) {
  CHRONOS_CHECK_MSG(options.queue_depth >= 1 && options.queue_depth <= 4096, "IoRing queue_depth {} not in 1..4096",
                    options.queue_depth);
  CHRONOS_CHECK_MSG(options.max_bytes_per_read >= 0 && options.max_bytes_per_read % DirectFile::kAlignment == 0,
                    "IoRing max_bytes_per_read {} is not a multiple of {}", options.max_bytes_per_read,
                    DirectFile::kAlignment);
}

}  // namespace io_detail
}  // namespace chronos
