// The pread backend of IoRing: a FIFO served by a few worker threads, for kernels without io_uring.
#include <sys/uio.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "io/io_ring_internal.h"

namespace chronos {
namespace {

using namespace io_detail;

class PreadRing final : public IoRing {
 public:
  explicit PreadRing(const Options& options) : options_(options) {
    check_options(options);
    const unsigned n_threads = std::clamp(options.pread_threads, 1u, 16u);
    workers_.reserve(n_threads);
    for (unsigned i = 0; i < n_threads; ++i) workers_.emplace_back([this] { work(); });
  }

  ~PreadRing() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      queue_.clear();  // reads not started are dropped; the ones running finish first
    }
    work_ready_.notify_all();
    for (auto& worker : workers_) worker.join();
  }

  const char* backend_name() const override { return "pread"; }

  bool register_buffers(std::span<const Buffer>) override { return false; }

  void submit(std::span<const ReadRequest> requests) override {
    size_t queued = 0;
    for (const ReadRequest& request : requests) {
      check_request(request);
      const int error = injected_error(options_, request);  // caller code: run outside the lock
      std::lock_guard lock(mutex_);
      ++in_flight_;
      if (error != 0) {
        finished_.push_back({request.user_data, 0, error});
      } else {
        queue_.push(request);
        ++queued;
      }
    }
    if (queued == 1) work_ready_.notify_one();
    if (queued > 1) work_ready_.notify_all();
  }

  size_t reap(std::vector<ReadCompletion>& out, size_t min_complete, std::chrono::microseconds timeout) override {
    min_complete = std::min(min_complete, in_flight_);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    size_t got = 0;
    std::unique_lock lock(mutex_);
    while (true) {
      out.insert(out.end(), finished_.begin(), finished_.end());
      got += finished_.size();
      in_flight_ -= finished_.size();
      finished_.clear();
      if (got >= min_complete || timeout.count() == 0) return got;
      if (timeout.count() < 0) {
        reads_done_.wait(lock, [&] { return !finished_.empty(); });
      } else if (!reads_done_.wait_until(lock, deadline, [&] { return !finished_.empty(); })) {
        return got;
      }
    }
  }

  size_t in_flight() const override { return in_flight_; }

 private:
  void work() {
    std::unique_lock lock(mutex_);
    while (true) {
      work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      const ReadRequest request = queue_.front();
      queue_.pop();
      lock.unlock();
      const ReadCompletion completion = read_fully(request);
      lock.lock();
      finished_.push_back(completion);
      reads_done_.notify_one();
    }
  }

  // pread (preadv for several segments) until the request is full, at EOF, or failed; short reads
  // continue where they stopped.
  ReadCompletion read_fully(const ReadRequest& request) const {
    ReadState state{request};
    while (state.remaining() > 0) {
      const int64_t length = next_read_length(state, options_.max_bytes_per_read);
      iovec pieces[ReadRequest::kMaxSegments];
      const int n_pieces = next_iovecs(state, length, pieces);
      const ssize_t n = n_pieces == 1
                            ? ::pread(request.fd, pieces[0].iov_base, pieces[0].iov_len, off_t(state.file_offset()))
                            : ::preadv(request.fd, pieces, n_pieces, off_t(state.file_offset()));
      if (n < 0) {
        if (is_transient(errno)) continue;
        return {request.user_data, state.done, errno};
      }
      if (advance(state, n)) break;
    }
    return {request.user_data, state.done, 0};
  }

  const Options options_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_ready_;  // queue_ has requests, or stopping_
  std::condition_variable reads_done_;  // finished_ has completions
  Fifo<ReadRequest> queue_;
  std::vector<ReadCompletion> finished_;
  bool stopping_ = false;
  size_t in_flight_ = 0;  // touched by the submitting thread only (under the lock anyway)
};

}  // namespace

std::unique_ptr<IoRing> IoRing::make_pread_ring(const Options& options) { return std::make_unique<PreadRing>(options); }

}  // namespace chronos
