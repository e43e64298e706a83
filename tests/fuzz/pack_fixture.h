// A small deterministic pack folder (two .ctsr cluster files and their manifest) for the manifest
// harness, which needs real cluster files to check a manifest against, and for its seed input.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "chronos/dtype.h"
#include "chronos/pack_format.h"

namespace chronos::fuzz {

// Writes cluster_000.ctsr and cluster_001.ctsr (BF16 experts: gate and up [4, 2], down [2, 4])
// into `dir` and returns the manifest that describes them, without writing it.
inline PackManifest write_pack_fixture(const std::filesystem::path& dir) {
  PackManifest m;
  m.architecture = "qwen2_moe";
  m.num_moe_layers = 2;
  m.num_experts = 4;
  m.dtype = "BF16";
  m.fingerprint = "0123456789abcdef0123456789abcdef";
  m.clustering_method = "none";
  m.clustering_trace = "traces/";
  m.clustering_seed = 7;
  // Weights stay alive until write_ctsr returns: one buffer per projection of each expert.
  std::vector<std::vector<uint16_t>> weights;
  const auto view = [&](int64_t rows, int64_t cols, int seed) {
    auto& w = weights.emplace_back();
    for (int64_t i = 0; i < rows * cols; ++i) w.push_back(f32_to_bf16(float((i + seed) % 7) * 0.125f - 0.5f));
    return WeightView{w.data(), DType::kBF16, rows, cols};
  };
  weights.reserve(64);
  const std::vector<std::vector<ExpertKey>> clusters = {{{0, 1}, {1, 3}, {0, 0}}, {{1, 0}, {0, 2}}};
  for (int32_t id = 0; id < int32_t(clusters.size()); ++id) {
    std::vector<ExpertSource> sources;
    for (const ExpertKey& key : clusters[size_t(id)]) {
      const int seed = key.layer * 10 + key.expert;
      sources.push_back({key, view(4, 2, seed), view(4, 2, seed + 1), view(2, 4, seed + 2)});
    }
    const std::string file = "cluster_00" + std::to_string(id) + ".ctsr";
    const auto packed = write_ctsr(dir / file, id, m.fingerprint, sources);
    PackCluster cluster{id, file, int64_t(std::filesystem::file_size(dir / file)), {}};
    for (const PackedExpert& expert : packed) {
      cluster.experts.push_back(expert.key);
      m.experts[expert.key] = expert;
    }
    m.clusters.push_back(cluster);
  }
  return m;
}

}  // namespace chronos::fuzz
