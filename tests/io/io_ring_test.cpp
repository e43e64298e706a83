// IoRing (both backends) and DirectFile against the bytes of a random file read back with ifstream.
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <random>

#include "chronos/error.h"
#include "chronos/io_ring.h"
#include "io/io_test_util.h"

namespace chronos {
namespace {

using test::read_bytes;
using test::write_bytes;

constexpr int64_t kPage = DirectFile::kAlignment;

// Page-aligned memory, as staging buffers are.
struct AlignedBytes {
  explicit AlignedBytes(int64_t bytes)
      : data(static_cast<char*>(std::aligned_alloc(kPage, size_t(DirectFile::align_up(std::max<int64_t>(bytes, 1)))))) {
    std::memset(data.get(), 0xEE, size_t(DirectFile::align_up(std::max<int64_t>(bytes, 1))));
  }
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> data;
};

// A folder where O_DIRECT works on ordinary machines (/var/tmp is on disk; /tmp may be tmpfs).
std::filesystem::path scratch_root() {
  std::error_code ec;
  return std::filesystem::is_directory("/var/tmp", ec) ? std::filesystem::path("/var/tmp")
                                                       : std::filesystem::temp_directory_path();
}

std::string random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string bytes(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t word = rng();
    std::memcpy(bytes.data() + i, &word, std::min<size_t>(8, n - i));
  }
  return bytes;
}

// Reaps until `n` completions have come, keyed by user_data; a duplicate fails the test.
std::map<uint64_t, ReadCompletion> reap_all(IoRing& ring, size_t n) {
  std::map<uint64_t, ReadCompletion> by_id;
  std::vector<ReadCompletion> out;
  while (by_id.size() < n) {
    out.clear();
    const size_t got = ring.reap(out, 1, std::chrono::seconds(20));
    EXPECT_EQ(got, out.size());
    if (got == 0) {
      ADD_FAILURE() << "no completion within 20 s; " << ring.in_flight() << " in flight";
      break;
    }
    for (const ReadCompletion& c : out) EXPECT_TRUE(by_id.emplace(c.user_data, c).second) << "twice: " << c.user_data;
  }
  return by_id;
}

// A random file in scratch_root(), its bytes, and an open DirectFile on it.
class IoFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("chronos_io_ring_") + info->test_suite_name() + "_" + info->name();
    for (char& c : name)
      if (c == '/') c = '_';
    dir_ = scratch_root() / (name + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = dir_ / "data.bin";
    bytes_ = random_bytes(kFileBytes, 42);
    write_bytes(path_, bytes_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // 4 MiB and a bit: the last block is partial, as in most real checkpoints.
  static constexpr int64_t kFileBytes = 4 * 1024 * 1024 + 1234;

  std::filesystem::path dir_;
  std::filesystem::path path_;
  std::string bytes_;
};

class IoRingTest : public IoFileTest, public ::testing::WithParamInterface<std::string> {
 protected:
  std::unique_ptr<IoRing> make_ring(IoRing::Options options = {}) {
    auto ring = GetParam() == "pread" ? IoRing::make_pread_ring(options) : IoRing::make_uring_ring(options);
    if (ring) {
      EXPECT_STREQ(ring->backend_name(), GetParam().c_str());
    }
    return ring;
  }
  // Checks a completion against the file: `expected` bytes from `offset`, landed in `dst`.
  void expect_bytes(const ReadCompletion& c, int64_t offset, int64_t expected, const char* dst) {
    ASSERT_EQ(c.error, 0) << "user_data " << c.user_data << ": " << std::strerror(c.error);
    ASSERT_EQ(c.bytes, expected) << "user_data " << c.user_data;
    ASSERT_EQ(std::memcmp(dst, bytes_.data() + offset, size_t(expected)), 0) << "user_data " << c.user_data;
  }
};

#define SKIP_IF_NO_RING(ring) \
  if (!(ring)) GTEST_SKIP() << "io_uring refused by this kernel"

TEST_P(IoRingTest, RandomAlignedExtentsMatchTheFile) {
  const DirectFile file = DirectFile::open(path_);
  IoRing::Options options;
  options.queue_depth = 8;  // far fewer entries than requests: the internal queue is exercised
  auto ring = make_ring(options);
  SKIP_IF_NO_RING(ring);

  constexpr int kReads = 400;
  const int64_t n_pages = DirectFile::align_up(kFileBytes) / kPage;
  std::mt19937_64 rng(7);
  std::vector<ReadRequest> requests;
  std::vector<AlignedBytes> buffers;
  for (int i = 0; i < kReads; ++i) {
    const int64_t first = int64_t(rng() % uint64_t(n_pages));
    const int64_t pages = 1 + int64_t(rng() % 32);
    const int64_t offset = first * kPage;
    // Extents past the end are cut at EOF, as the contract allows (only the last one is unaligned).
    const int64_t bytes = std::min(pages * kPage, kFileBytes - offset);
    buffers.emplace_back(bytes);
    requests.push_back({file.fd(), offset, bytes, buffers.back().data.get(), uint64_t(1000 + i)});
  }
  // Submitted in uneven batches, reaped in between.
  std::map<uint64_t, ReadCompletion> done;
  std::vector<ReadCompletion> out;
  for (size_t begin = 0; begin < requests.size();) {
    const size_t n = std::min<size_t>(1 + rng() % 50, requests.size() - begin);
    ring->submit(std::span(requests).subspan(begin, n));
    begin += n;
    out.clear();
    ring->reap(out, 0, std::chrono::microseconds(0));
    for (const auto& c : out) ASSERT_TRUE(done.emplace(c.user_data, c).second);
  }
  for (const auto& [id, c] : reap_all(*ring, requests.size() - done.size())) ASSERT_TRUE(done.emplace(id, c).second);
  ASSERT_EQ(done.size(), requests.size());
  EXPECT_EQ(ring->in_flight(), 0u);
  for (int i = 0; i < kReads; ++i) {
    const ReadRequest& r = requests[size_t(i)];
    expect_bytes(done.at(r.user_data), r.offset, r.bytes, static_cast<const char*>(r.dst));
  }
}

TEST_P(IoRingTest, ReadsPastEofReportTheBytesThatExist) {
  const DirectFile file = DirectFile::open(path_);
  auto ring = make_ring();
  SKIP_IF_NO_RING(ring);
  const int64_t last_block = DirectFile::align_down(kFileBytes);  // 1234 bytes of file from here
  AlignedBytes a(3 * kPage), b(kPage), c(kPage), d(kPage);
  const ReadRequest requests[] = {
      {file.fd(), last_block - 2 * kPage, 3 * kPage, a.data.get(), 1},    // asks for more than there is
      {file.fd(), last_block, kFileBytes - last_block, b.data.get(), 2},  // unaligned length ending at EOF
      {file.fd(), last_block + kPage, kPage, c.data.get(), 3},            // starts past EOF
      {file.fd(), 0, 0, d.data.get(), 4},                                 // nothing to read
  };
  ring->submit(requests);
  const auto done = reap_all(*ring, 4);
  expect_bytes(done.at(1), last_block - 2 * kPage, 2 * kPage + 1234, a.data.get());
  expect_bytes(done.at(2), last_block, 1234, b.data.get());
  expect_bytes(done.at(3), 0, 0, c.data.get());
  expect_bytes(done.at(4), 0, 0, d.data.get());
}

TEST_P(IoRingTest, ShortReadsAreResubmittedForTheRest) {
  const DirectFile file = DirectFile::open(path_);
  IoRing::Options options;
  options.queue_depth = 4;
  options.max_bytes_per_read = 3 * kPage;  // every read below takes several syscalls
  auto ring = make_ring(options);
  SKIP_IF_NO_RING(ring);
  std::vector<AlignedBytes> buffers;
  std::vector<ReadRequest> requests;
  for (int i = 0; i < 12; ++i) {
    const int64_t offset = i * 5 * kPage;
    const int64_t bytes = i == 11 ? kFileBytes - offset : 64 * kPage + (i % 3) * kPage;  // the last ends at EOF
    buffers.emplace_back(bytes);
    requests.push_back({file.fd(), offset, bytes, buffers.back().data.get(), uint64_t(i)});
  }
  ring->submit(requests);
  const auto done = reap_all(*ring, requests.size());
  for (const ReadRequest& r : requests)
    expect_bytes(done.at(r.user_data), r.offset, r.bytes, static_cast<const char*>(r.dst));
}

TEST_P(IoRingTest, InjectedFaultsAreReportedWithTheirUserData) {
  const DirectFile file = DirectFile::open(path_);
  IoRing::Options options;
  options.queue_depth = 4;
  int calls = 0;
  options.fault_injector = [&](const ReadRequest& r) {
    ++calls;
    return r.user_data % 5 == 3 ? EIO : 0;
  };
  auto ring = make_ring(options);
  SKIP_IF_NO_RING(ring);
  std::vector<AlignedBytes> buffers;
  std::vector<ReadRequest> requests;
  for (int i = 0; i < 20; ++i) {
    buffers.emplace_back(2 * kPage);
    requests.push_back({file.fd(), i * 2 * kPage, 2 * kPage, buffers.back().data.get(), uint64_t(i)});
  }
  ring->submit(requests);
  const auto done = reap_all(*ring, requests.size());
  EXPECT_EQ(calls, 20);
  for (const ReadRequest& r : requests) {
    const ReadCompletion& c = done.at(r.user_data);
    if (r.user_data % 5 == 3) {
      EXPECT_EQ(c.error, EIO) << r.user_data;
      EXPECT_EQ(c.bytes, 0) << r.user_data;
    } else {
      expect_bytes(c, r.offset, r.bytes, static_cast<const char*>(r.dst));
    }
  }
}

TEST_P(IoRingTest, KernelErrorsAreReportedNotThrown) {
  const DirectFile file = DirectFile::open(path_);
  auto ring = make_ring();
  SKIP_IF_NO_RING(ring);
  AlignedBytes a(kPage), b(2 * kPage);
  std::vector<ReadRequest> requests = {{-1, 0, kPage, a.data.get(), 7}};
  if (file.direct()) requests.push_back({file.fd(), 100, kPage, b.data.get() + 1, 8});  // misaligned O_DIRECT
  ring->submit(requests);
  const auto done = reap_all(*ring, requests.size());
  EXPECT_EQ(done.at(7).error, EBADF);
  if (file.direct()) {
    EXPECT_EQ(done.at(8).error, EINVAL);
  }
}

TEST_P(IoRingTest, ReapPollsTimesOutAndNeverWaitsForMoreThanSubmitted) {
  const DirectFile file = DirectFile::open(path_);
  auto ring = make_ring();
  SKIP_IF_NO_RING(ring);
  std::vector<ReadCompletion> out;
  EXPECT_EQ(ring->reap(out, 0, std::chrono::microseconds(0)), 0u);
  EXPECT_EQ(ring->reap(out, 5, std::chrono::milliseconds(1)), 0u);  // nothing in flight: no wait
  EXPECT_EQ(ring->reap(out, 5), 0u);                                // not even forever
  AlignedBytes a(kPage);
  const ReadRequest request{file.fd(), kPage, kPage, a.data.get(), 11};
  ring->submit({&request, 1});
  EXPECT_EQ(ring->in_flight(), 1u);
  EXPECT_EQ(ring->reap(out, 10), 1u);  // clamped to the one in flight
  ASSERT_EQ(out.size(), 1u);
  expect_bytes(out[0], kPage, kPage, a.data.get());
  EXPECT_EQ(ring->in_flight(), 0u);
}

TEST_P(IoRingTest, RegisteredBuffersAreReadIntoCorrectly) {
  const DirectFile file = DirectFile::open(path_);
  auto ring = make_ring();
  SKIP_IF_NO_RING(ring);
  AlignedBytes staging(64 * kPage), outside(kPage);
  const Buffer buffer{staging.data.get(), size_t(64 * kPage)};
  const bool registered = ring->register_buffers({&buffer, 1});
  if (GetParam() == "pread") {
    EXPECT_FALSE(registered);
  }
  std::vector<ReadRequest> requests;
  for (int i = 0; i < 8; ++i)
    requests.push_back({file.fd(), (3 + 9 * i) * kPage, 8 * kPage, staging.data.get() + i * 8 * kPage, uint64_t(i)});
  requests.push_back({file.fd(), 0, kPage, outside.data.get(), 99});  // not in a registered buffer
  ring->submit(requests);
  const auto done = reap_all(*ring, requests.size());
  for (const ReadRequest& r : requests)
    expect_bytes(done.at(r.user_data), r.offset, r.bytes, static_cast<const char*>(r.dst));
}

TEST_P(IoRingTest, DestroyingARingWithReadsInFlightIsSafe) {
  const DirectFile file = DirectFile::open(path_);
  IoRing::Options options;
  options.queue_depth = 4;
  auto ring = make_ring(options);
  SKIP_IF_NO_RING(ring);
  AlignedBytes staging(32 * 16 * kPage);
  std::vector<ReadRequest> requests;
  for (int i = 0; i < 32; ++i)
    requests.push_back({file.fd(), i * 16 * kPage, 16 * kPage, staging.data.get() + i * 16 * kPage, uint64_t(i)});
  ring->submit(requests);
  EXPECT_EQ(ring->in_flight(), 32u);
  ring.reset();  // waits for the kernel; ASan would see a write into freed memory otherwise
}

TEST_P(IoRingTest, BufferedFilesReadToEof) {
  // procfs refuses O_DIRECT: DirectFile falls back to buffered reads, with a short read at EOF.
  const DirectFile file = DirectFile::open("/proc/version");
  EXPECT_FALSE(file.direct());
  const std::string expected = read_bytes("/proc/version");
  ASSERT_FALSE(expected.empty());
  auto ring = make_ring();
  SKIP_IF_NO_RING(ring);
  AlignedBytes a(kPage);
  const ReadRequest request{file.fd(), 0, kPage, a.data.get(), 5};
  ring->submit({&request, 1});
  const auto done = reap_all(*ring, 1);
  ASSERT_EQ(done.at(5).error, 0);
  ASSERT_EQ(done.at(5).bytes, int64_t(expected.size()));
  EXPECT_EQ(std::string(a.data.get(), expected.size()), expected);
}

// A vectored request over `pages` (page counts per segment) from `offset`, each segment its own
// buffer; `last_bytes` > 0 replaces the last segment's length (a read that ends at EOF).
struct VectoredRead {
  ReadRequest request;
  std::vector<AlignedBytes> buffers;

  VectoredRead(int fd, int64_t offset, const std::vector<int64_t>& pages, uint64_t user_data, int64_t last_bytes = 0) {
    request.fd = fd;
    request.offset = offset;
    request.user_data = user_data;
    buffers.reserve(pages.size());
    for (size_t i = 0; i < pages.size(); ++i) {
      const int64_t bytes = i + 1 == pages.size() && last_bytes > 0 ? last_bytes : pages[i] * kPage;
      buffers.emplace_back(bytes);
      request.add_segment(buffers.back().data.get(), bytes);
    }
  }
};

// Checks a vectored completion: `expected` bytes from the request's offset, spread over its
// segments in order (a segment past `expected` is not looked at).
void expect_vectored(const ReadCompletion& c, const ReadRequest& r, int64_t expected, const std::string& file) {
  ASSERT_EQ(c.error, 0) << "user_data " << c.user_data << ": " << std::strerror(c.error);
  ASSERT_EQ(c.bytes, expected) << "user_data " << c.user_data;
  int64_t at = 0;
  for (int i = 0; i < r.n_segments && at < expected; ++i) {
    const ReadSegment& segment = r.segments[size_t(i)];
    const int64_t n = std::min(segment.bytes, expected - at);
    ASSERT_EQ(std::memcmp(segment.dst, file.data() + r.offset + at, size_t(n)), 0)
        << "user_data " << c.user_data << " segment " << i << " of " << r.n_segments;
    at += n;
  }
}

TEST(ReadRequestTest, AddSegmentSumsTheBytes) {
  ReadRequest request;
  char a[16], b[16];
  request.add_segment(a, 16);
  request.add_segment(b, 8);
  EXPECT_EQ(request.n_segments, 2);
  EXPECT_EQ(request.bytes, 24);
  EXPECT_EQ(request.segments[1].dst, static_cast<void*>(b));
  EXPECT_EQ(request.dst, nullptr);
}

TEST_P(IoRingTest, RandomVectoredReadsMatchTheFile) {
  const DirectFile file = DirectFile::open(path_);
  IoRing::Options options;
  options.queue_depth = 8;  // most requests wait in the internal queue, segments and all
  auto ring = make_ring(options);
  SKIP_IF_NO_RING(ring);

  constexpr int kReads = 300;
  const int64_t n_pages = DirectFile::align_up(kFileBytes) / kPage;
  std::mt19937_64 rng(11);
  std::vector<VectoredRead> reads;
  std::vector<AlignedBytes> plain_buffers;  // every fourth request is a plain single-buffer read
  std::vector<ReadRequest> requests;
  reads.reserve(kReads);
  for (int i = 0; i < kReads; ++i) {
    const int64_t offset = int64_t(rng() % uint64_t(n_pages)) * kPage;
    if (i % 4 == 3) {
      const int64_t bytes = std::min<int64_t>(int64_t(1 + rng() % 16) * kPage, kFileBytes - offset);
      plain_buffers.emplace_back(bytes);
      requests.push_back({file.fd(), offset, bytes, plain_buffers.back().data.get(), uint64_t(i)});
      continue;
    }
    std::vector<int64_t> pages(1 + rng() % uint64_t(ReadRequest::kMaxSegments));
    for (int64_t& p : pages) p = 1 + int64_t(rng() % 6);
    // Reads that run past EOF stop there, in whichever segment holds it.
    reads.emplace_back(file.fd(), offset, pages, uint64_t(i));
    requests.push_back(reads.back().request);
  }
  for (size_t begin = 0; begin < requests.size();) {
    const size_t n = std::min<size_t>(1 + rng() % 40, requests.size() - begin);
    ring->submit(std::span(requests).subspan(begin, n));
    begin += n;
  }
  const auto done = reap_all(*ring, requests.size());
  ASSERT_EQ(done.size(), requests.size());
  EXPECT_EQ(ring->in_flight(), 0u);
  for (const ReadRequest& r : requests) {
    const int64_t expected = std::min(r.bytes, kFileBytes - r.offset);
    if (r.n_segments == 0) {
      expect_bytes(done.at(r.user_data), r.offset, expected, static_cast<const char*>(r.dst));
    } else {
      expect_vectored(done.at(r.user_data), r, expected, bytes_);
    }
  }
}

TEST_P(IoRingTest, VectoredShortReadsResumeAcrossSegmentBoundaries) {
  const DirectFile file = DirectFile::open(path_);
  // 3 pages per syscall cuts inside segments and on their boundaries; 1 page cuts every segment.
  for (const int64_t cap : {3 * kPage, kPage, 5 * kPage}) {
    IoRing::Options options;
    options.queue_depth = 3;
    options.max_bytes_per_read = cap;
    auto ring = make_ring(options);
    SKIP_IF_NO_RING(ring);
    std::vector<VectoredRead> reads;
    reads.reserve(8);
    reads.emplace_back(file.fd(), 0, std::vector<int64_t>{2, 5, 1, 4, 7}, 1);
    reads.emplace_back(file.fd(), 10 * kPage, std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 1}, 2);
    reads.emplace_back(file.fd(), 40 * kPage, std::vector<int64_t>{3, 3, 3}, 3);
    reads.emplace_back(file.fd(), 100 * kPage, std::vector<int64_t>{64, 2}, 4);
    // Ends at EOF with an unaligned last segment: O_DIRECT asks for its whole last block.
    const int64_t last_block = DirectFile::align_down(kFileBytes);
    reads.emplace_back(file.fd(), last_block - 6 * kPage, std::vector<int64_t>{4, 2, 1}, 5, kFileBytes - last_block);
    // Asks for more than the file has: EOF in the middle of the second segment.
    reads.emplace_back(file.fd(), last_block - 2 * kPage, std::vector<int64_t>{1, 4, 2}, 6);
    std::vector<ReadRequest> requests;
    for (const VectoredRead& r : reads) requests.push_back(r.request);
    ring->submit(requests);
    const auto done = reap_all(*ring, requests.size());
    for (const ReadRequest& r : requests) {
      SCOPED_TRACE(::testing::Message() << "max_bytes_per_read " << cap);
      expect_vectored(done.at(r.user_data), r, std::min(r.bytes, kFileBytes - r.offset), bytes_);
    }
  }
}

TEST_P(IoRingTest, VectoredReadErrorsCompleteTheWholeRequestOnce) {
  const DirectFile file = DirectFile::open(path_);
  IoRing::Options options;
  options.queue_depth = 4;
  options.max_bytes_per_read = 2 * kPage;  // an injected or kernel error must not be resumed
  int calls = 0;
  options.fault_injector = [&](const ReadRequest& r) {
    ++calls;
    EXPECT_EQ(r.n_segments, r.user_data == 99 ? 2 : 3) << r.user_data;  // the injector sees the segments
    return r.user_data % 3 == 1 ? EIO : 0;
  };
  auto ring = make_ring(options);
  SKIP_IF_NO_RING(ring);
  std::vector<VectoredRead> reads;
  reads.reserve(13);
  std::vector<ReadRequest> requests;
  for (int i = 0; i < 12; ++i) {
    reads.emplace_back(file.fd(), i * 9 * kPage, std::vector<int64_t>{2, 3, 4}, uint64_t(i));
    requests.push_back(reads.back().request);
  }
  reads.emplace_back(-1, 0, std::vector<int64_t>{1, 1}, 99);  // the kernel says EBADF
  requests.push_back(reads.back().request);
  ring->submit(requests);
  const auto done = reap_all(*ring, requests.size());  // fails on a second completion of one request
  EXPECT_EQ(ring->in_flight(), 0u);
  EXPECT_EQ(calls, 13);
  EXPECT_EQ(done.size(), requests.size());
  for (const ReadRequest& r : requests) {
    const ReadCompletion& c = done.at(r.user_data);
    if (r.user_data == 99) {
      EXPECT_EQ(c.error, EBADF);
    } else if (r.user_data % 3 == 1) {
      EXPECT_EQ(c.error, EIO) << r.user_data;
      EXPECT_EQ(c.bytes, 0) << r.user_data;
    } else {
      expect_vectored(c, r, r.bytes, bytes_);
    }
  }
}

TEST_P(IoRingTest, PartialBlockSegmentIsAnErrorOnDirectFiles) {
  const DirectFile file = DirectFile::open(path_);
  if (!file.direct()) GTEST_SKIP() << "no O_DIRECT on " << dir_;
  auto ring = make_ring();
  SKIP_IF_NO_RING(ring);
  AlignedBytes a(kPage), b(kPage), c(kPage);
  ReadRequest request;
  request.fd = file.fd();
  request.user_data = 9;
  request.add_segment(a.data.get(), kPage);
  request.add_segment(b.data.get(), 100);  // not a whole block: the kernel refuses the read
  request.add_segment(c.data.get(), kPage - 100);
  ring->submit({&request, 1});
  const auto done = reap_all(*ring, 1);
  EXPECT_EQ(done.at(9).error, EINVAL);
}

INSTANTIATE_TEST_SUITE_P(Backends, IoRingTest, ::testing::Values("io_uring", "pread"),
                         [](const auto& info) { return info.param == "io_uring" ? "IoUring" : "Pread"; });

TEST(IoRingCreate, ForcedPreadIsThePreadBackend) {
  IoRing::Options options;
  options.force_pread = true;
  EXPECT_STREQ(IoRing::create(options)->backend_name(), "pread");
}

TEST(IoRingCreate, PrefersIoUringWhenTheKernelAllowsIt) {
  const bool kernel_allows = IoRing::make_uring_ring({}) != nullptr;
  EXPECT_STREQ(IoRing::create({})->backend_name(), kernel_allows ? "io_uring" : "pread");
}

// In a child process whose io_uring_setup fails with EPERM (as under a container's seccomp
// profile), create() falls back to pread and still reads. Exit codes: 0 pass, 77 no seccomp here.
TEST(IoRingCreate, FallsBackToPreadWhenIoUringSetupIsRefused) {
  const std::filesystem::path path = scratch_root() / ("chronos_io_ring_seccomp_" + std::to_string(::getpid()));
  const std::string bytes = random_bytes(3 * kPage, 3);
  write_bytes(path, bytes);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0) << std::strerror(errno);
  if (child == 0) {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog program{static_cast<unsigned short>(std::size(filter)), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0)
      ::_exit(77);
    auto ring = IoRing::create({});
    if (std::strcmp(ring->backend_name(), "pread") != 0) ::_exit(1);
    const DirectFile file = DirectFile::open(path);
    AlignedBytes a(3 * kPage);
    const ReadRequest request{file.fd(), 0, 3 * kPage, a.data.get(), 1};
    ring->submit({&request, 1});
    std::vector<ReadCompletion> out;
    if (ring->reap(out, 1) != 1 || out[0].error != 0 || out[0].bytes != 3 * kPage) ::_exit(2);
    ::_exit(std::memcmp(a.data.get(), bytes.data(), bytes.size()) == 0 ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  std::filesystem::remove(path);
  ASSERT_TRUE(WIFEXITED(status)) << "child died: status " << status;
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "seccomp filters are not allowed here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: not pread, 2: read failed, 3: wrong bytes";
}

TEST(DirectFileTest, MissingFileErrorNamesThePath) {
  const std::filesystem::path path = scratch_root() / "chronos_no_such_dir" / "model.safetensors";
  try {
    DirectFile::open(path);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
}

TEST(DirectFileTest, DirectoryIsNotARegularFile) {
  try {
    DirectFile::open(scratch_root());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
}

class DirectFileOnDisk : public IoFileTest {};

TEST_F(DirectFileOnDisk, OpensDirectWithItsSizeAndMoves) {
  struct statfs fs {};
  ASSERT_EQ(::statfs(dir_.c_str(), &fs), 0);
  constexpr long kTmpfsMagic = 0x01021994;
  DirectFile file = DirectFile::open(path_);
  EXPECT_EQ(file.size(), kFileBytes);
  EXPECT_EQ(file.path(), path_);
  if (fs.f_type != kTmpfsMagic) {
    EXPECT_TRUE(file.direct()) << dir_ << " should allow O_DIRECT";
  }
  EXPECT_EQ((::fcntl(file.fd(), F_GETFL) & O_DIRECT) != 0, file.direct());

  const int fd = file.fd();
  DirectFile moved = std::move(file);
  EXPECT_EQ(moved.fd(), fd);
  EXPECT_EQ(file.fd(), -1);  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  DirectFile other = DirectFile::open("/proc/version");
  const int other_fd = other.fd();
  other = std::move(moved);  // closes /proc/version
  EXPECT_EQ(other.fd(), fd);
  EXPECT_EQ(::fcntl(other_fd, F_GETFD), -1);
  EXPECT_EQ(errno, EBADF);
}

}  // namespace
}  // namespace chronos
