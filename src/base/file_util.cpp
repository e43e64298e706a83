// write_all and write_file_atomically.
#include "chronos/file_util.h"

#include <unistd.h>

#include <cerrno>
#include <fstream>

#include "chronos/error.h"

namespace chronos {

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

void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  namespace fs = std::filesystem;
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw_error("{}: cannot create file", path.string());
    out.write(text.data(), std::streamsize(text.size()));
    out.flush();
    if (!out) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      throw_error("{}: write failed", path.string());
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw_error("{}: cannot rename the finished file into place", path.string());
  }
}

}  // namespace chronos
