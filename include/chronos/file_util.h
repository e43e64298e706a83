// Small file helpers shared by every writer: whole writes and atomic replacement.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string_view>

namespace chronos {

// Writes all of `data` to `fd`, retrying short writes and EINTR; false with errno set on failure.
bool write_all(int fd, const void* data, size_t size);

// One output file written so that a failure never leaves half of it at `path`.
//
// A regular file (or a name that does not exist yet) is written to a fresh temporary beside it,
// created with a unique name and O_EXCL | O_NOFOLLOW (an existing file or a symlink at that name
// is never followed or reused), synced, and renamed over `path` by commit(). A symlink at `path`
// is resolved first, so the link stays and its target is replaced. Anything else that exists at
// `path` (a terminal, a pipe, /dev/stdout, /dev/null, a character device) is written directly:
// renaming a regular file over it would replace the device for the whole machine. An object
// destroyed without commit() removes its temporary. Every failure throws Error naming `path`.
class AtomicFile {
 public:
  explicit AtomicFile(const std::filesystem::path& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Syncs, closes and renames the temporary into place (or closes the direct target).
  void commit();
  bool direct() const { return direct_; }

 private:
  [[noreturn]] void fail(std::string_view what, int error);
  void discard() noexcept;

  std::filesystem::path path_;    // as given, for messages
  std::filesystem::path target_;  // where the file ends: `path_`, or the target of its symlink
  std::filesystem::path temp_;
  int fd_ = -1;
  bool direct_ = false;
};

// Creates a new, empty folder beside `target` with a unique name (".NAME.XXXXXX"), for a result
// that is renamed to `target` once complete; an existing folder is never reused or removed.
std::filesystem::path make_temp_dir_beside(const std::filesystem::path& target);

// AtomicFile(path).write(text).commit() in one call.
void write_file_atomically(const std::filesystem::path& path, std::string_view text);

}  // namespace chronos
