// ExpertKey: the (layer, expert) pair that names one routed expert everywhere (cache, packs, predictors).
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace chronos {

// `layer` is the model's own layer index as in the Hugging Face tensor names (DESIGN.md §5).
struct ExpertKey {
  int32_t layer;
  int32_t expert;
  auto operator<=>(const ExpertKey&) const = default;
};

}  // namespace chronos

template <>
struct std::hash<chronos::ExpertKey> {
  size_t operator()(const chronos::ExpertKey& key) const noexcept {
    const uint64_t packed = (uint64_t(uint32_t(key.layer)) << 32) | uint32_t(key.expert);
    // splitmix64 finalizer: unordered containers of keys with small, dense fields spread well.
    uint64_t x = packed + 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return size_t(x ^ (x >> 31));
  }
};
