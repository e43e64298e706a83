// Validators for numeric flags, shared by every subcommand: a value out of range, not finite or
// not a plain number is a usage error that names the flag (exit 2), never a silent wrap-around.
#pragma once

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdint>
#include <string>

#include "chronos/thread_pool.h"

namespace chronos::cli {

// An integer count in [lo, hi]; CLI11 reports the flag's name with the message.
template <typename T>
CLI::Validator count_in(T lo, T hi) {
  return CLI::Range(lo, hi);
}

// A finite number in [lo, hi] (CLI::Range lets NaN through).
inline CLI::Validator finite_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        double value = 0;
        try {
          size_t used = 0;
          value = std::stod(text, &used);
          if (used != text.size()) return "'" + text + "' is not a number";
        } catch (const std::exception&) {
          return "'" + text + "' is not a number";
        }
        if (!std::isfinite(value) || value < lo || value > hi)
          return fmt::format("value {} not in range [{} - {}]", text, lo, hi);
        return {};
      },
      fmt::format("FLOAT in [{} - {}]", lo, hi));
}

// Decimal digits only, at most 2^64 - 1: "-1" or "1e23" are refused instead of wrapping.
inline CLI::Validator decimal_u64() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
          return "'" + text + "' is not a non-negative integer";
        if (text.size() > 20 || (text.size() == 20 && text > "18446744073709551615"))
          return "'" + text + "' is larger than 18446744073709551615";
        return {};
      },
      "UINT64");
}

// More threads than CPUs only slows the run down (each parallel op waits for the slowest
// thread): said once on stderr, not refused.
inline void warn_if_oversubscribed(int threads) {
  const int cpus = available_cpus();
  if (threads > cpus)
    spdlog::warn("--threads {} is more than the {} CPUs available to this process; expect it to run slower", threads,
                 cpus);
}

// Limits shared by the subcommands.
inline constexpr int64_t kMaxNewTokens = int64_t(1) << 30;
inline constexpr int64_t kMaxContext = int64_t(1) << 24;
inline constexpr int64_t kMaxBatch = 65536;
inline constexpr int kMaxThreads = 1024;
inline constexpr double kMaxIoLatencyMs = 60000.0;

}  // namespace chronos::cli
