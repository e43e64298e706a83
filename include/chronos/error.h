// Error policy: Error for bad input (reported once in main), CHRONOS_CHECK for invariants.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace chronos {

// Bad input of any kind: a file, a flag, a prompt. Caught once in main, printed as one line,
// exit code 1.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A command line that does not parse or a flag value out of range: exit code 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

template <typename... Args>
[[noreturn]] void throw_error(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Reports a broken internal invariant with the expression and file:line, then aborts.
[[noreturn]] void check_failed(const char* expression, const char* file, int line, const std::string& message);

// Throws Error naming `what` with strerror(errno) appended.
[[noreturn]] void throw_system_error(const std::string& what);

}  // namespace chronos

#define CHRONOS_CHECK(cond)                                              \
  do {                                                                   \
    if (!(cond)) ::chronos::check_failed(#cond, __FILE__, __LINE__, ""); \
  } while (0)

#define CHRONOS_CHECK_MSG(cond, ...)                                                           \
  do {                                                                                         \
    if (!(cond)) ::chronos::check_failed(#cond, __FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (0)
