// Runs the chronos binary as a user would and captures stdout, stderr and the exit status.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace chronos::testing {

struct RunResult {
  int exit_code = -1;  // -1 when killed by a signal
  bool signalled = false;
  std::string out, err;
  std::vector<std::string> err_lines() const {
    std::vector<std::string> lines;
    std::istringstream in(err);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) lines.push_back(line);
    return lines;
  }
};

inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline std::string shell_quote(const std::string& s) {
  std::string out(1, '\'');
  for (char c : s) {
    if (c == '\'')
      out.append("'\\''");
    else
      out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

// A fresh, empty folder for the running test's files: <tmp>/<prefix>_<pid>_<test name>.
inline std::filesystem::path fresh_work_dir(const std::string& prefix) {
  const auto path =
      std::filesystem::temp_directory_path() / (prefix + "_" + std::to_string(::getpid()) + "_" +
                                                ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
  return path;
}

// args are quoted; stdin_file, when given, is redirected to standard input; stdout_file, when
// given, receives standard output instead of `out`; env entries (NAME=VALUE) are set for chronos.
inline RunResult run_chronos(const std::vector<std::string>& args, const std::filesystem::path& work,
                             const std::string& stdin_file = "", const std::string& stdout_file = "",
                             const std::vector<std::string>& env = {}) {
  std::string cmd;
  auto append_arg = [&cmd](const char* prefix, const std::string& arg) {
    cmd.append(prefix);
    cmd.append(shell_quote(arg));
  };
  if (!env.empty()) {
    cmd = "env";
    for (const auto& entry : env) append_arg(" ", entry);
    cmd.append(" ");
  }
  cmd.append(shell_quote(CHRONOS_BINARY));
  for (const auto& a : args) append_arg(" ", a);
  const auto out_path = work / "stdout.txt", err_path = work / "stderr.txt";
  append_arg(" >", stdout_file.empty() ? out_path.string() : stdout_file);
  append_arg(" 2>", err_path.string());
  append_arg(" <", stdin_file.empty() ? std::string("/dev/null") : stdin_file);
  const int status = std::system(cmd.c_str());
  RunResult r;
  if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
    // The shell reports a signal-killed child as 128 + signal.
    r.signalled = r.exit_code > 128;
  } else {
    r.signalled = true;
  }
  if (stdout_file.empty()) r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

// A clean failure: exit code `code`, exactly one stderr line containing `needle`, nothing on stdout.
inline void expect_clean_failure(const RunResult& r, int code, const std::string& needle) {
  EXPECT_FALSE(r.signalled) << r.err;
  EXPECT_EQ(r.exit_code, code) << r.err;
  const auto lines = r.err_lines();
  ASSERT_EQ(lines.size(), 1u) << "stderr:\n" << r.err;
  EXPECT_NE(lines[0].find(needle), std::string::npos) << lines[0];
  EXPECT_TRUE(r.out.empty()) << r.out;
}

}  // namespace chronos::testing
