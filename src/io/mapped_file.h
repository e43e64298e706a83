// Read-only memory mapping of a whole file, shared by the safetensors and GGUF readers.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "chronos/error.h"

namespace chronos::io_detail {

struct Mapping {
  void* data = nullptr;
  size_t size = 0;
};

// Maps `path` read-only. Throws Error "path: ..." when it cannot be opened, stat'ed or mapped, is
// not a regular file, or is smaller than min_bytes (then with "file is N bytes, too small for "
// followed by `what`). The caller owns the mapping (munmap).
inline Mapping map_whole_file(const std::filesystem::path& path, uint64_t min_bytes, const char* what) {
  const auto fail = [&](const std::string& message) { throw Error(fmt::format("{}: {}", path.string(), message)); };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(fmt::format("cannot open: {}", std::strerror(errno)));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int saved = errno;
    ::close(fd);
    fail(fmt::format("cannot stat: {}", std::strerror(saved)));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    fail("not a regular file");
  }
  const uint64_t file_size = uint64_t(info.st_size);
  if (file_size < min_bytes) {
    ::close(fd);
    fail(fmt::format("file is {} bytes, too small for {}", file_size, what));
  }
  void* mapping = ::mmap(nullptr, size_t(file_size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (mapping == MAP_FAILED) fail(fmt::format("cannot mmap: {}", std::strerror(map_errno)));
  return {mapping, size_t(file_size)};
}

}  // namespace chronos::io_detail
