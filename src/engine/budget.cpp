// parse_budget: sizes with binary/decimal units or a percentage of a total.
#include "chronos/budget.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "chronos/error.h"

namespace chronos {

int64_t parse_budget(std::string_view text, int64_t total_bytes) {
  auto fail = [&]() -> int64_t { throw UsageError(fmt::format("'{}' is not a size (like 2GiB, 512MB, 25%)", text)); };
  size_t end = 0;
  while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) ++end;
  if (end == 0) return fail();
  double value = 0;
  try {
    value = std::stod(std::string(text.substr(0, end)));
  } catch (const std::exception&) {
    return fail();
  }
  std::string unit(text.substr(end));
  for (char& ch : unit) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  double bytes = 0;
  if (unit == "%") {
    if (!(value > 0 && value <= 100)) throw UsageError(fmt::format("a percentage must be in (0, 100] (got {})", text));
    bytes = std::floor(double(total_bytes) * value / 100.0);
  } else {
    double scale = 0;
    if (unit.empty() || unit == "b")
      scale = 1;
    else if (unit == "k" || unit == "kb")
      scale = 1e3;
    else if (unit == "kib")
      scale = 1024.0;
    else if (unit == "m" || unit == "mb")
      scale = 1e6;
    else if (unit == "mib")
      scale = 1024.0 * 1024;
    else if (unit == "g" || unit == "gb")
      scale = 1e9;
    else if (unit == "gib")
      scale = 1024.0 * 1024 * 1024;
    else if (unit == "t" || unit == "tb")
      scale = 1e12;
    else if (unit == "tib")
      scale = 1024.0 * 1024 * 1024 * 1024;
    else
      return fail();
    bytes = value * scale;
  }
  if (!(bytes >= 1) || bytes > 9e18) throw UsageError(fmt::format("'{}' is not a positive size", text));
  return int64_t(bytes);
}

namespace {

std::string human(int64_t bytes) { return fmt::format("{:.2f} GiB", double(bytes) / double(int64_t(1) << 30)); }

// The first line of a cgroup file as bytes; nullopt for "max", a missing or unreadable file.
std::optional<int64_t> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string text;
  if (!in || !(in >> text) || text == "max") return std::nullopt;
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || value < 0) return std::nullopt;
  return value;
}

}  // namespace

AvailableMemory available_memory(const std::filesystem::path& root) {
  AvailableMemory out;
  {
    std::ifstream meminfo(root / "proc/meminfo");
    if (!meminfo) throw_error("{}: cannot read the memory the system has available", (root / "proc/meminfo").string());
    std::string key, unit;
    int64_t kib = -1;
    while (meminfo >> key >> kib >> unit)
      if (key == "MemAvailable:") break;
    if (key != "MemAvailable:" || kib < 0) throw_error("{}: no MemAvailable line", (root / "proc/meminfo").string());
    out.bytes = kib * 1024;
    out.source = "MemAvailable";
  }
  // Every memory cgroup of the process and its ancestors: "0::/path" (v2) or "N:memory:/path" (v1).
  std::ifstream groups(root / "proc/self/cgroup");
  for (std::string line; std::getline(groups, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const bool v2 = controllers.empty();
    if (!v2 && controllers.find("memory") == std::string::npos) continue;
    std::filesystem::path group = line.substr(b + 1);
    const std::filesystem::path base = root / (v2 ? "sys/fs/cgroup" : "sys/fs/cgroup/memory");
    for (std::filesystem::path dir = group;; dir = dir.parent_path()) {
      const std::filesystem::path at = base / dir.relative_path();
      const auto limit = read_bytes(at / (v2 ? "memory.max" : "memory.limit_in_bytes"));
      const auto usage = read_bytes(at / (v2 ? "memory.current" : "memory.usage_in_bytes"));
      if (limit && usage && *limit - *usage < out.bytes) {
        out.bytes = std::max<int64_t>(0, *limit - *usage);
        out.source =
            fmt::format("{} ({} limit, {} in use)", (at / (v2 ? "memory.max" : "memory.limit_in_bytes")).string(),
                        human(*limit), human(*usage));
      }
      if (dir == dir.root_path() || dir.empty()) break;
    }
  }
  return out;
}

AutoBudget auto_expert_budget(const AvailableMemory& memory, int64_t expert_bytes, int64_t resident_bytes) {
  const int64_t margin = std::max<int64_t>(int64_t(256) << 20, memory.bytes / 10);
  const int64_t left = memory.bytes - resident_bytes - margin;
  AutoBudget out;
  out.bytes = std::clamp<int64_t>(left, 0, expert_bytes);
  out.explanation =
      fmt::format("{} available ({}), less {} resident beside the cache and a {} margin: {} of {} of experts ({:.0f}%)",
                  human(memory.bytes), memory.source, human(resident_bytes), human(margin), human(out.bytes),
                  human(expert_bytes), expert_bytes > 0 ? 100.0 * double(out.bytes) / double(expert_bytes) : 0.0);
  return out;
}

AutoBudget default_expert_budget(const AvailableMemory& memory, int64_t expert_bytes, int64_t resident_bytes) {
  AutoBudget fitted = auto_expert_budget(memory, expert_bytes, resident_bytes);
  if (fitted.bytes >= expert_bytes) return {expert_bytes, ""};
  fitted.explanation = "the experts do not fit beside the rest, so they stream: " + fitted.explanation;
  return fitted;
}

}  // namespace chronos
