// Pieces shared by the IoRing backends: per-request progress, syscall lengths, a reusable FIFO.
#pragma once

#include <fcntl.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <vector>

#include "chronos/error.h"
#include "chronos/io_ring.h"

namespace chronos::io_detail {

// One read syscall never asks for more: the kernel caps a transfer at 2 GiB - 4 KiB anyway, and
// an io_uring SQE length is 32 bits.
constexpr int64_t kMaxSyscallBytes = int64_t(1) << 30;

// A request and how far it has got. `direct` is looked up (one fcntl) only when an unaligned
// length or end forces the question, which happens at EOF only: aligned reads never ask.
struct ReadState {
  ReadRequest request;
  int64_t done = 0;
  int8_t direct = -1;  // -1 unknown, 0 buffered, 1 O_DIRECT

  bool is_direct() {
    if (direct < 0) {
      const int flags = ::fcntl(request.fd, F_GETFL);
      // A bad fd reads as buffered; the read itself then reports EBADF.
      direct = flags >= 0 && (flags & O_DIRECT) != 0 ? 1 : 0;
    }
    return direct == 1;
  }
  int64_t remaining() const { return request.bytes - done; }
  int64_t file_offset() const { return request.offset + done; }
};

inline void check_request(const ReadRequest& r) {
  CHRONOS_CHECK_MSG(r.bytes >= 0 && r.offset >= 0, "bad read request: fd {} offset {} bytes {}", r.fd, r.offset,
                    r.bytes);
  if (r.n_segments == 0) {
    CHRONOS_CHECK_MSG(r.dst != nullptr || r.bytes == 0, "read request without a buffer: fd {} offset {} bytes {}", r.fd,
                      r.offset, r.bytes);
    return;
  }
  CHRONOS_CHECK_MSG(r.n_segments <= ReadRequest::kMaxSegments && r.dst == nullptr,
                    "bad vectored read request: {} segments, dst {}", r.n_segments, r.dst);
  int64_t sum = 0;
  for (int i = 0; i < r.n_segments; ++i) {
    const ReadSegment& segment = r.segments[size_t(i)];
    CHRONOS_CHECK_MSG(segment.dst != nullptr && segment.bytes > 0, "bad read segment {}: dst {} bytes {}", i,
                      segment.dst, segment.bytes);
    sum += segment.bytes;
  }
  CHRONOS_CHECK_MSG(sum == r.bytes, "vectored read request: segments hold {} bytes, the request {}", sum, r.bytes);
}

// The memory the next read syscall of `length` bytes fills, from state.done on: one iovec for a
// single-buffer request, up to kMaxSegments for a vectored one (starting inside the segment where
// the last short read stopped). A length past the request's end (an O_DIRECT read rounded up to
// its last block at EOF) goes into the last piece, which the contract says has room for it.
// Returns the number of iovecs written to `out`.
inline int next_iovecs(const ReadState& state, int64_t length, iovec* out) {
  const ReadRequest& r = state.request;
  if (r.n_segments == 0) {
    out[0] = {static_cast<char*>(r.dst) + state.done, size_t(length)};
    return 1;
  }
  int n = 0;
  int64_t skip = state.done;  // bytes of the segments already filled
  int64_t left = length;
  for (int i = 0; i < r.n_segments && left > 0; ++i) {
    const ReadSegment& segment = r.segments[size_t(i)];
    if (skip >= segment.bytes) {
      skip -= segment.bytes;
      continue;
    }
    const int64_t piece = std::min(segment.bytes - skip, left);
    out[n++] = {static_cast<char*>(segment.dst) + skip, size_t(piece)};
    left -= piece;
    skip = 0;
  }
  CHRONOS_CHECK_MSG(n > 0, "read of {} bytes past the end of its segments", length);
  out[n - 1].iov_len += size_t(left);
  return n;
}

// Length of the next read syscall for `state`. An O_DIRECT read that ends at EOF with an unaligned
// length asks for the whole last block (the kernel refuses unaligned lengths with EINVAL).
inline int64_t next_read_length(ReadState& state, int64_t max_bytes_per_read) {
  int64_t length = std::min(state.remaining(), kMaxSyscallBytes);
  if (max_bytes_per_read > 0) length = std::min(length, max_bytes_per_read);
  if (length % DirectFile::kAlignment != 0 && state.is_direct()) length = DirectFile::align_up(length);
  return length;
}

// Records a successful syscall result (>= 0 bytes) and says whether the request is finished:
// full, or EOF (0 bytes; or an O_DIRECT read that stopped at an unaligned offset, which only EOF
// does, and whose rest could not be asked for anyway).
inline bool advance(ReadState& state, int64_t result) {
  if (result == 0) return true;
  state.done += std::min(result, state.remaining());
  if (state.remaining() == 0) return true;
  return state.file_offset() % DirectFile::kAlignment != 0 && state.is_direct();
}

// Errors worth retrying as they are.
inline bool is_transient(int error) { return error == EINTR || error == EAGAIN; }

// A FIFO over one vector whose storage is reused: no allocation per element once it has grown.
template <typename T>
class Fifo {
 public:
  void push(const T& item) { items_.push_back(item); }
  bool empty() const { return head_ == items_.size(); }
  size_t size() const { return items_.size() - head_; }
  const T& front() const { return items_[head_]; }
  void pop() {
    ++head_;
    if (head_ == items_.size()) {
      items_.clear();
      head_ = 0;
    } else if (head_ >= 1024 && head_ * 2 >= items_.size()) {  // keep the dead prefix bounded
      items_.erase(items_.begin(), items_.begin() + std::ptrdiff_t(head_));
      head_ = 0;
    }
  }
  void clear() {
    items_.clear();
    head_ = 0;
  }

 private:
  std::vector<T> items_;
  size_t head_ = 0;
};

// Runs the fault injector, if any: a non-zero errno means the request completes with it unread.
inline int injected_error(const IoRing::Options& options, const ReadRequest& request) {
  return options.fault_injector ? options.fault_injector(request) : 0;
}

void check_options(const IoRing::Options& options);

}  // namespace chronos::io_detail
