// DirectFile: a read-only file descriptor opened with O_DIRECT when the filesystem allows it.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "chronos/error.h"
#include "chronos/io_ring.h"

namespace chronos {
namespace {

int open_retrying(const std::filesystem::path& path, int flags) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

}  // namespace

DirectFile DirectFile::open(const std::filesystem::path& path) {
  bool direct = true;
  int fd = open_retrying(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (fd < 0 && errno == EINVAL) {
    // The filesystem does not do direct I/O (procfs, some FUSE and network mounts): the page cache
    // then serves the reads, which is slower for streaming but correct.
    spdlog::debug("{}: O_DIRECT not supported by this filesystem; using buffered reads", path.string());
    direct = false;
    fd = open_retrying(path, O_RDONLY | O_CLOEXEC);
  }
  if (fd < 0) throw_system_error(fmt::format("{}: cannot open for reading", path.string()));

  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    throw_system_error(fmt::format("{}: cannot stat", path.string()));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_error("{}: not a regular file", path.string());
  }
  return DirectFile(path, fd, int64_t(st.st_size), direct);
}

DirectFile::DirectFile(DirectFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      size_(std::exchange(other.size_, 0)),
      direct_(std::exchange(other.direct_, false)) {}

DirectFile& DirectFile::operator=(DirectFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = std::exchange(other.size_, 0);
    direct_ = std::exchange(other.direct_, false);
  }
  return *this;
}

DirectFile::~DirectFile() {
  // A read-only descriptor: close cannot lose data, and EINTR must not be retried on Linux.
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace chronos
