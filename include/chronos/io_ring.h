// DirectFile (O_DIRECT file handle) and IoRing (batched asynchronous reads: io_uring, pread fallback).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "chronos/backend.h"  // Buffer (a plain struct; no link dependency on the backend module)

namespace chronos {

// A file opened for reading with O_DIRECT when the filesystem allows it. When open with O_DIRECT
// fails with EINVAL (procfs, some FUSE and network filesystems) it falls back to buffered reads and
// says so in a debug log line. Any other failure throws Error naming the path.
class DirectFile {
 public:
  static DirectFile open(const std::filesystem::path& path);

  DirectFile(DirectFile&& other) noexcept;
  DirectFile& operator=(DirectFile&& other) noexcept;
  DirectFile(const DirectFile&) = delete;
  DirectFile& operator=(const DirectFile&) = delete;
  ~DirectFile();

  int fd() const { return fd_; }
  int64_t size() const { return size_; }
  bool direct() const { return direct_; }
  const std::filesystem::path& path() const { return path_; }

  // Offsets, sizes and buffers of direct reads are multiples of this.
  static constexpr int64_t kAlignment = 4096;
  static constexpr int64_t align_up(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }
  static constexpr int64_t align_down(int64_t bytes) { return bytes / kAlignment * kAlignment; }

 private:
  DirectFile(std::filesystem::path path, int fd, int64_t size, bool direct)
      : path_(std::move(path)), fd_(fd), size_(size), direct_(direct) {}

  std::filesystem::path path_;
  int fd_ = -1;
  int64_t size_ = 0;
  bool direct_ = false;
};

// One destination piece of a vectored read.
struct ReadSegment {
  void* dst = nullptr;  // 4096-aligned for O_DIRECT
  int64_t bytes = 0;    // > 0; a multiple of 4096 for O_DIRECT files, except the last at EOF
};

struct ReadRequest {
  int fd = -1;          // from DirectFile
  int64_t offset = 0;   // file offset; multiple of 4096 for O_DIRECT files
  int64_t bytes = 0;    // multiple of 4096 for O_DIRECT files, except a read that ends at EOF
  void* dst = nullptr;  // 4096-aligned for O_DIRECT; nullptr when the request has segments
  uint64_t user_data = 0;

  // Vectored read (preadv / IORING_OP_READV): when n_segments > 0, the file bytes
  // [offset, offset + bytes) land in segments[0], then segments[1], ..., and `bytes` is the sum of
  // their lengths (add_segment keeps it so). The segments live inside the request, so the ring
  // copies them with it and the caller has nothing else to keep alive. n_segments == 0 is the
  // single-buffer read into `dst`.
  static constexpr int kMaxSegments = 8;
  std::array<ReadSegment, kMaxSegments> segments{};
  int n_segments = 0;

  // Appends a segment and grows `bytes` by its length. CHRONOS_CHECKs the segment count and that
  // `dst` is not also set.
  void add_segment(void* segment_dst, int64_t segment_bytes);
};
// A read that ends at EOF of an O_DIRECT file may ask for a length that is not a multiple of 4096:
// the kernel only transfers whole blocks, so the ring asks for DirectFile::align_up(bytes) and `dst`
// (or the last segment) must have room for that many bytes (staging buffers are whole pages
// anyway). The completion still reports at most `bytes`.

struct ReadCompletion {
  uint64_t user_data = 0;
  int64_t bytes = 0;  // bytes read (== request bytes unless EOF came first); for a vectored read,
                      // the segments are filled in order, so this is where the data stopped
  int error = 0;      // 0, or the errno of the failed read (EIO, ...)
};

// Batched asynchronous reads into caller-owned memory.
//
// Not thread-safe: one thread calls submit() and reap() (the prefetcher's I/O thread). The pread
// backend's worker threads are internal and never call back into the caller.
//
// Every request completes exactly once, through reap(). The caller keeps `dst` alive and untouched
// until the request's completion has been reaped; destroying the ring waits for the reads still in
// flight (their completions are dropped).
class IoRing {
 public:
  struct Options {
    unsigned queue_depth = 64;  // reads in flight at once (io_uring SQ entries)
    bool force_pread = false;   // use the fallback even when io_uring works
    // Test hook: when set, called for every request before it is issued; a non-zero return is
    // reported as that errno in the completion instead of reading (simulates EIO and friends).
    std::function<int(const ReadRequest&)> fault_injector;
    // Test hook: when > 0, caps the length of every read syscall (a multiple of 4096), so that
    // every larger request takes the short-read resubmission path. 0: no cap.
    int64_t max_bytes_per_read = 0;
    // Worker threads of the pread backend (clamped to 1..16).
    unsigned pread_threads = 4;
  };

  // io_uring if the kernel allows it; otherwise (ENOSYS, EPERM, ENOMEM in containers, ...) the
  // pread backend, with a log line saying why.
  static std::unique_ptr<IoRing> create(const Options& options);
  // The backends by name, for tests and benchmarks. make_uring_ring returns nullptr (and logs why)
  // when the kernel refuses io_uring.
  static std::unique_ptr<IoRing> make_uring_ring(const Options& options);
  static std::unique_ptr<IoRing> make_pread_ring(const Options& options);

  virtual ~IoRing();

  virtual const char* backend_name() const = 0;  // "io_uring" or "pread"

  // Optional: registers buffers for IORING_OP_READ_FIXED; requests whose dst lies inside a
  // registered buffer use it. Returns false if not supported (pread, or the kernel refused, e.g.
  // RLIMIT_MEMLOCK). Replaces any earlier registration; call it with nothing in flight.
  virtual bool register_buffers(std::span<const Buffer> buffers) = 0;

  // Queues reads and submits them in one batch (no syscall per request). More requests than free
  // queue entries wait in an internal queue and are issued as entries free up (during reap()).
  // Short reads are resubmitted for the rest automatically (a vectored read resumes inside the
  // segment where it stopped); only a full read, EOF or an error completes, once per request.
  virtual void submit(std::span<const ReadRequest> requests) = 0;

  // Appends finished reads to `out`. Blocks until at least min_complete have finished or the
  // timeout passes (a negative timeout waits forever; 0 polls). Returns how many were appended.
  // min_complete is clamped to in_flight(), so waiting for more than was submitted cannot hang.
  virtual size_t reap(std::vector<ReadCompletion>& out, size_t min_complete,
                      std::chrono::microseconds timeout = std::chrono::microseconds(-1)) = 0;

  virtual size_t in_flight() const = 0;  // submitted or queued, not yet reaped
};

}  // namespace chronos
