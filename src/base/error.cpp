// check_failed and throw_system_error.
#include "chronos/error.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace chronos {

void check_failed(const char* expression, const char* file, int line, const std::string& message) {
  fmt::print(stderr, "chronos: internal error: {}:{}: check failed: {}{}{}\n", file, line, expression,
             message.empty() ? "" : ": ", message);
  std::fflush(stderr);
  std::abort();
}

void throw_system_error(const std::string& what) {
  const int saved = errno;
  throw Error(fmt::format("{}: {}", what, std::strerror(saved)));
}

}  // namespace chronos
