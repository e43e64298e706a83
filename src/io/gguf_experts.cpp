// The routed experts of a GGUF file streamed in place: their slices planned as aligned reads, the
// file's identity, and where each tensor lands in an expert's slot.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "chronos/error.h"
#include "chronos/pack_format.h"

namespace chronos {
namespace {

constexpr int64_t align_down(int64_t bytes) { return bytes / kCtsrAlignment * kCtsrAlignment; }
constexpr int64_t align_up(int64_t bytes) { return (bytes + kCtsrAlignment - 1) / kCtsrAlignment * kCtsrAlignment; }

}  // namespace

FileIdentity FileIdentity::of(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) throw_error("fstat: {}", std::strerror(errno));
  return FileIdentity{uint64_t(st.st_dev), uint64_t(st.st_ino),
                      int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

int64_t PackedExpert::slot_offset(const PackedTensor& t) const {
  if (pieces.empty()) return t.offset - offset;
  for (const ExpertPiece& piece : pieces)
    if (t.offset >= piece.offset && t.offset + t.bytes <= piece.offset + piece.bytes)
      return piece.slot_offset + (t.offset - piece.offset);
  CHRONOS_CHECK_MSG(false, "layer {} expert {}: no piece holds the tensor at {}", key.layer, key.expert, t.offset);
  return 0;
}

PackManifest gguf_expert_manifest(const std::string& file_name, int64_t file_bytes, const FileIdentity& identity,
                                  std::string architecture, int64_t num_moe_layers, int64_t num_experts,
                                  std::string fingerprint, std::span<const GgufExpertSlices> experts) {
  PackManifest m;
  m.architecture = std::move(architecture);
  m.num_moe_layers = num_moe_layers;
  m.num_experts = num_experts;
  m.fingerprint = std::move(fingerprint);
  m.clustering_method = "none";
  PackCluster cluster{0, file_name, file_bytes, {}, identity};
  std::map<DType, int64_t> type_bytes;
  for (const GgufExpertSlices& slices : experts) {
    PackedExpert expert;
    expert.key = slices.key;
    expert.cluster = 0;
    expert.gate = slices.gate;
    expert.up = slices.up;
    expert.down = slices.down;
    int64_t slot = 0;
    for (const PackedTensor* t : {&expert.gate, &expert.up, &expert.down}) {
      if (t->offset < 0 || t->bytes <= 0 || t->offset > file_bytes - t->bytes)
        throw_error("{}: layer {} expert {}: slice [{}, +{}) runs past the end of the {}-byte file", file_name,
                    slices.key.layer, slices.key.expert, t->offset, t->bytes, file_bytes);
      type_bytes[t->dtype] += t->bytes;
      // Widened to whole 4096-byte blocks for O_DIRECT; the last block of the file may be short.
      const int64_t begin = align_down(t->offset), end = std::min(align_up(t->offset + t->bytes), file_bytes);
      expert.pieces.push_back(ExpertPiece{begin, end - begin, slot});
      slot += align_up(end - begin);
    }
    expert.offset = expert.pieces.front().offset;
    expert.bytes = slot;
    cluster.experts.push_back(expert.key);
    m.experts.emplace(expert.key, std::move(expert));
  }
  std::sort(cluster.experts.begin(), cluster.experts.end(),
            [&m](ExpertKey a, ExpertKey b) { return m.experts.at(a).offset < m.experts.at(b).offset; });
  m.clusters.push_back(std::move(cluster));
  int64_t most = -1;
  for (const auto& [type, bytes] : type_bytes) {
    if (bytes > most) {
      m.dtype = std::string(dtype_name(type));
      most = bytes;
    }
    if (type_bytes.size() > 1) m.dtypes.emplace_back(dtype_name(type));
  }
  std::sort(m.dtypes.begin(), m.dtypes.end());  // by name, as a pack lists them
  return m;
}

}  // namespace chronos
