// Byte budgets from the command line: "2GiB", "512MB", "1073741824", or "25%" of a total.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace chronos {

// Throws UsageError for anything that is not a positive size or a percentage in (0, 100]; the
// caller names the flag or setting the text came from.
int64_t parse_budget(std::string_view text, int64_t total_bytes);

// The memory this process can still take without swapping: the least of the kernel's MemAvailable
// and, for each memory cgroup (v2 memory.max, v1 memory.limit_in_bytes) of the process, its limit
// less its usage. `root` is "/" but for tests. Throws Error when /proc/meminfo cannot be read.
struct AvailableMemory {
  int64_t bytes = 0;
  std::string source;  // what bounded it, for the start-up line: "MemAvailable" or the cgroup's file
};
AvailableMemory available_memory(const std::filesystem::path& root = "/");

// --expert-cache auto: the available memory less what stays resident beside the cache (dense
// weights, KV store, staging: `resident_bytes`) and a margin of 10% of it (at least 256 MiB), at
// most every expert; 0 when nothing is left. `explanation` says how it was reached.
struct AutoBudget {
  int64_t bytes = 0;
  std::string explanation;
};
AutoBudget auto_expert_budget(const AvailableMemory& memory, int64_t expert_bytes, int64_t resident_bytes);

// The budget when none is asked for: every expert when they all fit beside the resident bytes (the
// run is as resident as it was), else auto_expert_budget's, so that a pack larger than the memory
// streams instead of swapping; `explanation` is empty in the first case.
AutoBudget default_expert_budget(const AvailableMemory& memory, int64_t expert_bytes, int64_t resident_bytes);

}  // namespace chronos
