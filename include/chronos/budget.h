// Byte budgets from the command line: "2GiB", "512MB", "1073741824", or "25%" of a total.
#pragma once

#include <cstdint>
#include <string_view>

namespace chronos {

// Throws UsageError for anything that is not a positive size or a percentage in (0, 100]; the
// caller names the flag or setting the text came from.
int64_t parse_budget(std::string_view text, int64_t total_bytes);

}  // namespace chronos
