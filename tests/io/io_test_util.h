// Helpers for the io tests: a per-test scratch folder and hand-crafted safetensors bytes.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <string_view>

#include "chronos/error.h"
#include "chronos/safetensors.h"

namespace chronos::test {

inline const std::filesystem::path kFixtures = CHRONOS_TEST_DATA_DIR;

// A fresh folder per test, removed afterwards.
class ScratchDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           fmt_name(std::string("chronos_io_") + info->test_suite_name() + "_" + info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static std::string fmt_name(std::string name) {
    for (char& c : name)
      if (c == '/') c = '_';
    return name + "_" + std::to_string(::getpid());
  }

  std::filesystem::path dir_;
};

// A scratch folder that tests open as a TensorStore.
class StoreDir : public ScratchDir {
 protected:
  // Expects TensorStore::open(dir_) to fail with a one-line message holding every fragment.
  void expect_open_fails(std::initializer_list<std::string_view> fragments) {
    try {
      TensorStore::open(dir_);
      ADD_FAILURE() << "TensorStore::open accepted " << dir_;
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      for (auto fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
    }
  }
};

// Files in `dir` whose names say they are a writer's temporary (".tmp" anywhere in the name).
inline int count_temporaries(const std::filesystem::path& dir) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().filename().string().find(".tmp") != std::string::npos) ++n;
  return n;
}

inline void write_bytes(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// 8-byte little-endian length (`claimed_length`, or the header's real size), the header text,
// then `data_bytes` bytes of data.
inline std::string safetensors_bytes(std::string_view header, size_t data_bytes, uint64_t claimed_length = UINT64_MAX) {
  const uint64_t length = claimed_length == UINT64_MAX ? header.size() : claimed_length;
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(char(uint8_t(length >> (8 * i))));
  bytes.append(header);
  bytes.append(data_bytes, '\x5a');
  return bytes;
}

}  // namespace chronos::test
