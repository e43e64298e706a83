// write_all, AtomicFile and write_file_atomically.
#include "chronos/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "chronos/error.h"

namespace chronos {
namespace {

// Distinguishes the temporaries of one process; the pid distinguishes processes.
std::atomic<uint64_t> g_temp_counter{0};

}  // namespace

bool write_all(int fd, const void* data, size_t size) {
  const auto* cursor = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = ::write(fd, cursor, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    cursor += written;
    size -= size_t(written);
  }
  return true;
}

AtomicFile::AtomicFile(const std::filesystem::path& path) : path_(path), target_(path) {
  namespace fs = std::filesystem;
  if (path.empty()) throw_error("output file name is empty");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) throw_error("{}: is a directory, not a file to write", path.string());
    // A device, pipe or socket: write to it as it is.
    fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd_ < 0) throw_error("{}: cannot open for writing: {}", path.string(), std::strerror(errno));
    direct_ = true;
    return;
  }
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(path, ec))) {
    target_ = fs::weakly_canonical(path, ec);
    if (ec) throw_error("{}: cannot resolve the symlink: {}", path.string(), ec.message());
  }
  const fs::path dir = target_.has_parent_path() ? target_.parent_path() : fs::path(".");
  const std::string base = target_.filename().string();
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_ = dir / fmt::format(".{}.{}.{}.tmp", base, ::getpid(), g_temp_counter.fetch_add(1));
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ >= 0) return;
    if (errno != EEXIST) break;
  }
  const int error = errno;
  temp_.clear();
  throw_error("{}: cannot create a temporary file in {}: {}", path.string(), dir.string(), std::strerror(error));
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

void AtomicFile::fail(std::string_view what, int error) {
  discard();
  throw_error("{}: {}: {}", path_.string(), what, std::strerror(error));
}

void AtomicFile::write(const void* data, size_t size) {
  CHRONOS_CHECK_MSG(fd_ >= 0, "write to {} after commit", path_.string());
  if (!write_all(fd_, data, size)) fail("write failed", errno);
}

void AtomicFile::commit() {
  CHRONOS_CHECK_MSG(fd_ >= 0, "second commit of {}", path_.string());
  if (direct_) {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0 && errno != EINTR) throw_error("{}: close failed: {}", path_.string(), std::strerror(errno));
    return;
  }
  if (::fsync(fd_) != 0) fail("cannot sync", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close", errno);
  if (::rename(temp_.c_str(), target_.c_str()) != 0) fail("cannot rename the finished file into place", errno);
  temp_.clear();
}

std::filesystem::path make_temp_dir_beside(const std::filesystem::path& target) {
  const std::filesystem::path parent = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::string pattern = (parent / fmt::format(".{}.XXXXXX", target.filename().string())).string();
  if (::mkdtemp(pattern.data()) == nullptr)
    throw_error("{}: cannot create a temporary folder in {}: {}", target.string(), parent.string(),
                std::strerror(errno));
  ::chmod(pattern.c_str(), 0755);  // mkdtemp's 0700 would carry over to the result
  return pattern;
}

void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  AtomicFile file(path);
  file.write(text);
  file.commit();
}

}  // namespace chronos
