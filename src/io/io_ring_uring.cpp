// The io_uring backend of IoRing: a slot per SQ entry, a FIFO for the overflow, fixed buffers, READV.
#include <liburing.h>
#include <spdlog/spdlog.h>
#include <sys/uio.h>

#include <array>
#include <cstring>

#include "io/io_ring_internal.h"

namespace chronos {
namespace {

using namespace io_detail;

class UringRing final : public IoRing {
 public:
  // Takes over a ring that io_uring_queue_init has set up.
  UringRing(const Options& options, const io_uring& ring) : options_(options), ring_(ring) {
    slots_.resize(options.queue_depth);
    slot_iovecs_.resize(options.queue_depth);
    free_slots_.reserve(options.queue_depth);
    for (unsigned i = options.queue_depth; i-- > 0;) free_slots_.push_back(i);
    to_issue_.reserve(options.queue_depth);
  }

  ~UringRing() override {
    // The kernel may still be writing into the caller's buffers: wait for every read it holds.
    while (n_in_kernel_ > 0) {
      io_uring_cqe* cqe = nullptr;
      const int ret = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, nullptr, nullptr);
      if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
        spdlog::error("io_uring: waiting for reads at shutdown failed: {}", std::strerror(-ret));
        break;
      }
      unsigned head;
      unsigned seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) { ++seen; }
      io_uring_cq_advance(&ring_, seen);
      n_in_kernel_ -= std::min<size_t>(n_in_kernel_, seen);
    }
    io_uring_queue_exit(&ring_);
  }

  const char* backend_name() const override { return "io_uring"; }

  bool register_buffers(std::span<const Buffer> buffers) override {
    CHRONOS_CHECK_MSG(n_in_kernel_ == 0 && pending_.empty(), "register_buffers with reads in flight");
    if (!registered_.empty()) {
      const int ret = io_uring_unregister_buffers(&ring_);
      if (ret < 0) spdlog::debug("io_uring: unregister buffers: {}", std::strerror(-ret));
      registered_.clear();
    }
    if (buffers.empty()) return true;
    std::vector<iovec> iovecs;
    iovecs.reserve(buffers.size());
    for (const Buffer& buffer : buffers) iovecs.push_back({buffer.data, buffer.bytes});
    const int ret = io_uring_register_buffers(&ring_, iovecs.data(), unsigned(iovecs.size()));
    if (ret < 0) {
      // Usually RLIMIT_MEMLOCK: plain reads into the same memory work as well, a little slower.
      spdlog::debug("io_uring: cannot register {} buffers: {}", buffers.size(), std::strerror(-ret));
      return false;
    }
    registered_ = std::move(iovecs);
    return true;
  }

  void submit(std::span<const ReadRequest> requests) override {
    for (const ReadRequest& request : requests) {
      check_request(request);
      ++in_flight_;
      if (const int error = injected_error(options_, request)) {
        ready_.push_back({request.user_data, 0, error});
      } else if (request.bytes == 0) {
        ready_.push_back({request.user_data, 0, 0});
      } else {
        pending_.push({request});
      }
    }
    issue_pending();
    flush();
  }

  size_t reap(std::vector<ReadCompletion>& out, size_t min_complete, std::chrono::microseconds timeout) override {
    min_complete = std::min(min_complete, in_flight_);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    size_t got = 0;
    while (true) {
      process_completions();
      issue_pending();
      flush();
      got += take_ready(out);
      if (got >= min_complete || timeout.count() == 0) return got;

      __kernel_timespec wait_time{};
      __kernel_timespec* wait_for = nullptr;
      if (timeout.count() > 0) {
        const auto left =
            std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return got;
        wait_time.tv_sec = left.count() / 1'000'000'000;
        wait_time.tv_nsec = left.count() % 1'000'000'000;
        wait_for = &wait_time;
      }
      CHRONOS_CHECK_MSG(n_in_kernel_ > 0, "io_uring: waiting for {} reads with none issued", in_flight_);
      io_uring_cqe* cqe = nullptr;
      const int ret = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, wait_for, nullptr);
      if (ret == -ETIME) return got + take_after_wait(out);
      CHRONOS_CHECK_MSG(ret >= 0 || ret == -EINTR || ret == -EAGAIN || ret == -EBUSY, "io_uring wait: {}",
                        std::strerror(-ret));
    }
  }

  size_t in_flight() const override { return in_flight_; }

 private:
  // One last look after a timed-out wait, so that a read that finished right at the deadline is
  // not held back until the next call.
  size_t take_after_wait(std::vector<ReadCompletion>& out) {
    process_completions();
    issue_pending();
    flush();
    return take_ready(out);
  }

  size_t take_ready(std::vector<ReadCompletion>& out) {
    const size_t n = ready_.size();
    out.insert(out.end(), ready_.begin(), ready_.end());
    ready_.clear();
    in_flight_ -= n;
    return n;
  }

  // Moves queued requests into free slots.
  void issue_pending() {
    while (!pending_.empty() && !free_slots_.empty()) {
      const unsigned slot = free_slots_.back();
      free_slots_.pop_back();
      slots_[slot] = pending_.front();
      pending_.pop();
      to_issue_.push_back(slot);
    }
  }

  // Turns every slot waiting to be (re)issued into an SQE and submits the batch with one syscall.
  void flush() {
    for (const unsigned slot : to_issue_) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) {  // only when earlier SQEs could not be submitted yet
        submit_sqes();
        sqe = io_uring_get_sqe(&ring_);
      }
      CHRONOS_CHECK_MSG(sqe != nullptr, "io_uring: no free SQE with {} slots", slots_.size());
      prepare(sqe, slot);
      ++n_in_kernel_;
    }
    to_issue_.clear();
    submit_sqes();
  }

  void submit_sqes() {
    while (io_uring_sq_ready(&ring_) > 0) {
      const int ret = io_uring_submit(&ring_);
      if (ret == -EINTR) continue;
      // The kernel is short of resources or completions: the SQEs stay queued and go with the next
      // io_uring_enter (the wait in reap submits too).
      if (ret == -EAGAIN || ret == -EBUSY) return;
      CHRONOS_CHECK_MSG(ret >= 0, "io_uring_submit: {}", std::strerror(-ret));
      if (ret == 0) return;
    }
  }

  void prepare(io_uring_sqe* sqe, unsigned slot) {
    ReadState& state = slots_[slot];
    const int64_t length = next_read_length(state, options_.max_bytes_per_read);
    // The kernel may read the iovecs after submit on older kernels: they live in the slot.
    iovec* pieces = slot_iovecs_[slot].data();
    const int n_pieces = next_iovecs(state, length, pieces);
    const uint64_t offset = uint64_t(state.file_offset());
    if (n_pieces > 1) {
      io_uring_prep_readv(sqe, state.request.fd, pieces, unsigned(n_pieces), offset);
    } else if (const int buffer_index = registered_index(static_cast<const char*>(pieces[0].iov_base), length);
               buffer_index >= 0) {
      io_uring_prep_read_fixed(sqe, state.request.fd, pieces[0].iov_base, unsigned(length), offset, buffer_index);
    } else {
      io_uring_prep_read(sqe, state.request.fd, pieces[0].iov_base, unsigned(length), offset);
    }
    io_uring_sqe_set_data64(sqe, slot);
  }

  // The registered buffer holding [dst, dst + length), or -1.
  int registered_index(const char* dst, int64_t length) const {
    for (size_t i = 0; i < registered_.size(); ++i) {
      const char* begin = static_cast<const char*>(registered_[i].iov_base);
      if (dst >= begin && dst + length <= begin + registered_[i].iov_len) return int(i);
    }
    return -1;
  }

  // Consumes every CQE there is: finished slots go to ready_, short reads back to to_issue_.
  void process_completions() {
    unsigned head;
    unsigned seen = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      const auto slot = unsigned(io_uring_cqe_get_data64(cqe));
      CHRONOS_CHECK_MSG(slot < slots_.size(), "io_uring: completion for unknown slot {}", slot);
      --n_in_kernel_;
      ReadState& state = slots_[slot];
      const int res = cqe->res;
      if (res < 0) {
        if (is_transient(-res)) {
          to_issue_.push_back(slot);
        } else {
          finish(slot, -res);
        }
      } else if (advance(state, res)) {
        finish(slot, 0);
      } else {
        to_issue_.push_back(slot);  // short read: the rest goes out with the next flush
      }
    }
    io_uring_cq_advance(&ring_, seen);
  }

  void finish(unsigned slot, int error) {
    const ReadState& state = slots_[slot];
    ready_.push_back({state.request.user_data, state.done, error});
    free_slots_.push_back(slot);
  }

  const Options options_;
  io_uring ring_;
  std::vector<ReadState> slots_;       // [queue_depth] the reads the ring holds, by SQE user_data
  std::vector<unsigned> free_slots_;   // slots not holding a read
  std::vector<unsigned> to_issue_;     // slots whose next read still needs an SQE
  Fifo<ReadState> pending_;            // requests waiting for a free slot
  std::vector<ReadCompletion> ready_;  // finished, not yet reaped
  std::vector<iovec> registered_;      // fixed buffers, by index
  size_t n_in_kernel_ = 0;             // SQEs prepared whose CQE has not been seen
  size_t in_flight_ = 0;               // submitted, not yet reaped
  // [queue_depth] the memory of each slot's current read (an SQE points here until its CQE)
  std::vector<std::array<iovec, ReadRequest::kMaxSegments>> slot_iovecs_;
};

}  // namespace

std::unique_ptr<IoRing> IoRing::make_uring_ring(const Options& options) {
  check_options(options);
  io_uring ring{};
  // Completions never exceed the slots, so the default CQ (twice the SQ) cannot overflow.
  const int ret = io_uring_queue_init(options.queue_depth, &ring, 0);
  if (ret < 0) {
    spdlog::info("io_uring_queue_init({}) failed: {}", options.queue_depth, std::strerror(-ret));
    return nullptr;
  }
  io_uring_probe* probe = io_uring_get_probe_ring(&ring);
  const bool has_read = probe != nullptr && io_uring_opcode_supported(probe, IORING_OP_READ) &&
                        io_uring_opcode_supported(probe, IORING_OP_READ_FIXED) &&
                        io_uring_opcode_supported(probe, IORING_OP_READV);
  if (probe != nullptr) io_uring_free_probe(probe);
  if (!has_read) {
    spdlog::info("io_uring: this kernel has no IORING_OP_READ (needs Linux 5.6)");
    io_uring_queue_exit(&ring);
    return nullptr;
  }
  return std::make_unique<UringRing>(options, ring);
}

}  // namespace chronos
