// Helpers shared by the libFuzzer harnesses: a scratch folder in memory for loaders that take a
// path, and a property check that stops the run with a message.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace chronos::fuzz {

// One folder per process under /dev/shm (a tmpfs: writing each input costs no disk I/O), removed
// at exit. `name` keeps concurrent harnesses apart.
inline const std::filesystem::path& scratch_dir(const char* name) {
  static const std::filesystem::path dir = [name] {
    std::error_code ec;
    const std::filesystem::path shm = "/dev/shm";
    const auto root = std::filesystem::is_directory(shm, ec) ? shm : std::filesystem::temp_directory_path();
    auto path = root / ("chronos_fuzz_" + std::string(name) + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
    return path;
  }();
  static const bool cleanup_registered = [] {
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    });
    return true;
  }();
  (void)cleanup_registered;
  return dir;
}

inline void write_file(const std::filesystem::path& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::abort();
  }
}

// A broken property is a finding: print it and abort, which libFuzzer reports as a crash and
// saves the input for.
#define CHRONOS_FUZZ_CHECK(condition, ...)                                                  \
  do {                                                                                      \
    if (!(condition)) {                                                                     \
      std::fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #condition); \
      std::fprintf(stderr, __VA_ARGS__);                                                    \
      std::fprintf(stderr, "\n");                                                           \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

}  // namespace chronos::fuzz
