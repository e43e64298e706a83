// AtomicFile: what is at the output path decides how it is written; nothing is half-written,
// followed or consumed on the way.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "chronos/error.h"
#include "chronos/file_util.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / (std::string("chronos_base_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Names in dir_ other than `keep`.
  std::vector<std::string> others(std::initializer_list<std::string> keep) const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      const std::string name = entry.path().filename().string();
      if (std::find(keep.begin(), keep.end(), name) == keep.end()) names.push_back(name);
    }
    return names;
  }

  fs::path dir_;
};

TEST_F(AtomicFileTest, CreatesAndReplacesARegularFileLeavingNoTemporary) {
  const fs::path path = dir_ / "out.json";
  write_file_atomically(path, "first\n");
  EXPECT_EQ(read_text(path), "first\n");
  write_file_atomically(path, "second\n");
  EXPECT_EQ(read_text(path), "second\n");
  EXPECT_TRUE(others({"out.json"}).empty());
}

TEST_F(AtomicFileTest, ASymlinkAtTheTemporaryNameIsNeitherFollowedNorConsumed) {
  const fs::path path = dir_ / "out.json";
  const fs::path victim = dir_ / "victim";
  write_text(victim, "precious");
  fs::create_symlink(victim, path.string() + ".tmp");
  write_text(dir_ / "out.json.tmp.keep", "mine");
  write_file_atomically(path, "result");
  EXPECT_EQ(read_text(path), "result");
  EXPECT_EQ(read_text(victim), "precious");
  EXPECT_TRUE(fs::is_symlink(path.string() + ".tmp"));
  EXPECT_EQ(read_text(dir_ / "out.json.tmp.keep"), "mine");
  EXPECT_EQ(others({"out.json", "victim", "out.json.tmp", "out.json.tmp.keep"}).size(), 0u);
}

TEST_F(AtomicFileTest, AnExistingFileAtTheOldTemporaryNameIsLeftAlone) {
  const fs::path path = dir_ / "stats.json";
  write_text(path.string() + ".tmp", "someone else's");
  write_file_atomically(path, "{}");
  EXPECT_EQ(read_text(path), "{}");
  EXPECT_EQ(read_text(path.string() + ".tmp"), "someone else's");
}

TEST_F(AtomicFileTest, ASymlinkAtThePathStaysALinkAndItsTargetIsReplaced) {
  const fs::path target = dir_ / "real.json";
  const fs::path link = dir_ / "link.json";
  write_text(target, "old");
  fs::create_symlink(target, link);
  write_file_atomically(link, "new");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read_text(target), "new");
}

TEST_F(AtomicFileTest, ACharacterDeviceIsWrittenDirectlyNotReplaced) {
  write_file_atomically("/dev/null", "into the void\n");
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null was replaced by a regular file";
}

TEST_F(AtomicFileTest, AFullDeviceIsAnErrorNamingIt) {
  struct stat st {};
  if (::stat("/dev/full", &st) != 0 || !S_ISCHR(st.st_mode)) GTEST_SKIP() << "no /dev/full here";
  try {
    write_file_atomically("/dev/full", std::string(1 << 16, 'x'));
    ADD_FAILURE() << "a write to /dev/full succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/full"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No space left"), std::string::npos) << e.what();
  }
  ASSERT_EQ(::stat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST_F(AtomicFileTest, AFifoIsWrittenThrough) {
  const fs::path fifo = dir_ / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Opened read-write by the reader side first, so the writer's open does not block.
  const int reader = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  write_file_atomically(fifo, "through");
  char buffer[16] = {};
  const ssize_t n = ::read(reader, buffer, sizeof(buffer));
  ::close(reader);
  EXPECT_EQ(std::string(buffer, size_t(std::max<ssize_t>(n, 0))), "through");
  EXPECT_TRUE(fs::is_fifo(fifo));
}

TEST_F(AtomicFileTest, WithoutCommitNothingIsLeft) {
  const fs::path path = dir_ / "abandoned.bin";
  {
    AtomicFile file(path);
    file.write("half");
    EXPECT_EQ(others({}).size(), 1u);  // the temporary
  }
  EXPECT_TRUE(others({}).empty());
}

TEST_F(AtomicFileTest, ADirectoryOrAMissingFolderIsAnErrorNamingThePath) {
  try {
    write_file_atomically(dir_, "x");
    ADD_FAILURE() << "wrote over a directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir_.string()), std::string::npos) << e.what();
  }
  const fs::path missing = dir_ / "no" / "such" / "file.json";
  try {
    write_file_atomically(missing, "x");
    ADD_FAILURE() << "wrote into a missing folder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing.string()), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_directory(dir_));
}

}  // namespace
}  // namespace chronos
