// Small file helpers shared by every writer: whole writes and atomic replacement.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string_view>

namespace chronos {

// Writes all of `data` to `fd`, retrying short writes and EINTR; false with errno set on failure.
bool write_all(int fd, const void* data, size_t size);

// Writes `text` to "<path>.tmp" and renames it to `path`, so a failure never leaves a half-written
// file; throws Error naming the path.
void write_file_atomically(const std::filesystem::path& path, std::string_view text);

}  // namespace chronos
