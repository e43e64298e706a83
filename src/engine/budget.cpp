// parse_budget: sizes with binary/decimal units or a percentage of a total.
#include "chronos/budget.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
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

}  // namespace chronos
