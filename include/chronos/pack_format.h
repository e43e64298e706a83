// The pack folder's on-disk formats: `.ctsr` cluster files, cluster_manifest.json, model fingerprints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "chronos/dtype.h"
#include "chronos/expert_key.h"
#include "chronos/ops.h"
#include "chronos/safetensors.h"

namespace chronos {

// Extents of a `.ctsr` file start at, and are padded to, multiples of this (one O_DIRECT read).
inline constexpr int64_t kCtsrAlignment = 4096;
inline constexpr const char* kManifestFileName = "cluster_manifest.json";
// Key of dense.safetensors' __metadata__ holding a JSON object {tensor name: {"dtype": "Q8_0",
// "shape": [rows, cols]}} for each block-quantized tensor, stored as U8 [bytes] (DESIGN.md §5).
inline constexpr const char* kQuantizedTensorsKey = "chronos.quantized_tensors";

// One tensor of a packed expert. `offset` is an absolute file offset.
struct PackedTensor {
  int64_t offset = 0;
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  int64_t bytes = 0;
};

// One read of an expert whose tensors are not adjacent in its file (streamed from a GGUF file, where
// each is a slice of a stacked ffn_*_exps tensor): file bytes [offset, offset + bytes), widened to
// 4096-byte boundaries (cut at the end of the file) so that it may be an O_DIRECT read, land at
// `slot_offset` of the expert's slot, a multiple of 4096.
struct ExpertPiece {
  int64_t offset = 0;
  int64_t bytes = 0;
  int64_t slot_offset = 0;
};

// Where one expert lives. In a pack: one extent [offset, offset + bytes) of its cluster file,
// 4096-aligned and padded to a multiple of 4096, holding gate, up and down back to back. Streamed
// from a GGUF file: `pieces`, one aligned read per tensor, `bytes` their sum (what its slot holds),
// `offset` the first piece's, and no checksum.
struct PackedExpert {
  ExpertKey key{};
  int32_t cluster = 0;
  int64_t offset = 0;
  int64_t bytes = 0;
  uint64_t xxh64 = 0;  // XXH64 (seed 0) of the gate+up+down bytes, padding excluded
  PackedTensor gate, up, down;
  std::vector<ExpertPiece> pieces;  // empty in a pack: the one extent

  int64_t payload_bytes() const { return gate.bytes + up.bytes + down.bytes; }
  bool scattered() const { return !pieces.empty(); }
  // Where tensor `t` (gate, up or down of this expert) starts in the expert's slot.
  int64_t slot_offset(const PackedTensor& t) const;
};

// One routed expert of a GGUF file: its gate, up and down slices of the stacked ffn_*_exps tensors
// (absolute file offsets, each with its own type and [rows, cols]).
struct GgufExpertSlices {
  ExpertKey key{};
  PackedTensor gate, up, down;
};

// What identifies a file besides its size (stat's device, inode and modification time): a GGUF
// file streamed in place has no checksums, so a file replaced or rewritten after the model was
// loaded is refused when its reads begin (a pack's extents carry XXH64 instead).
struct FileIdentity {
  uint64_t device = 0, inode = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
  static FileIdentity of(int fd);  // Error when fstat fails
};

struct PackCluster {
  int32_t id = 0;
  std::string file;                      // plain file name inside the pack folder
  int64_t bytes = 0;                     // size of the file
  std::vector<ExpertKey> experts;        // in file order
  std::optional<FileIdentity> identity;  // a GGUF file streamed in place: as it was when loaded
};

// The low-bit copies of every routed expert (chronos pack --lowbit-type): one file of the pack
// folder laid out like a cluster file (cluster id -1), each copy one aligned extent with its
// checksum. With --on-miss lowbit they are resident for the whole run (DESIGN.md §3, §4).
struct LowbitCopies {
  std::string file;   // plain file name inside the pack folder
  int64_t bytes = 0;  // size of the file
  std::string dtype;  // the type asked for ("Q2_K"); a K type falls back per tensor on short rows
  std::map<ExpertKey, PackedExpert> experts;
};
inline constexpr int32_t kLowbitClusterId = -1;

struct PackManifest {
  std::string architecture;
  int64_t num_moe_layers = 0;
  int64_t num_experts = 0;
  std::string dtype;  // type name of the expert tensors ("BF16", "Q4_K"): the one asked for, or the
                      // type holding most expert bytes when they differ
  // "model.dtypes": every type the expert tensors use, when they are not all `dtype` (a GGUF
  // file's mix such as Q4_K_M: Q4_K gate/up, Q6_K down in some layers); empty otherwise.
  std::vector<std::string> dtypes;
  std::string fingerprint;
  // config_fingerprint() of the config.json the pack was made with; empty in packs written before
  // it was recorded. A pack whose config.json no longer matches it is refused at load.
  std::string config_fingerprint;
  std::string clustering_method;  // "leiden", "louvain" or "none"
  std::string clustering_trace;
  uint64_t clustering_seed = 0;
  std::vector<PackCluster> clusters;
  std::map<ExpertKey, PackedExpert> experts;
  std::optional<LowbitCopies> lowbit;  // absent unless packed with --lowbit-type

  // Reads <dir>/cluster_manifest.json and checks every field against the .ctsr files themselves
  // (exist, sizes, each expert's tensors present in that file's safetensors header at the stated
  // offsets/shapes/dtypes, extents 4096-aligned, no overlaps). Throws Error naming file/layer/expert.
  // Checksums are not verified here (that reads every byte): see verify_expert_bytes.
  static PackManifest load(const std::filesystem::path& dir);
  // The JSON alone, every field checked for kind and consistency, the .ctsr files not opened
  // (what the model loader needs: the expert dtype and counts).
  static PackManifest parse(const std::filesystem::path& dir);
  // Writes the JSON atomically (tmp + rename).
  void save(const std::filesystem::path& path) const;
  // Whether an expert tensor of `type` and `shape` belongs to this pack: `dtype`, or the 32-weight
  // type a K `dtype` falls back to on rows it does not fit, or one of `dtypes`.
  bool accepts_expert_dtype(DType type, const std::vector<int64_t>& shape) const;
};

// The manifest of a GGUF file's routed experts (GgufExpertSlices), streamed in place: one cluster
// (id 0, `file_name`, `file_bytes`, `identity`), every expert's pieces planned, `dtype` the type
// holding most expert bytes and `dtypes` every type when they differ. Error when a slice runs past
// the end of the file.
PackManifest gguf_expert_manifest(const std::string& file_name, int64_t file_bytes, const FileIdentity& identity,
                                  std::string architecture, int64_t num_moe_layers, int64_t num_experts,
                                  std::string fingerprint, std::span<const GgufExpertSlices> experts);

// Low-bit copies kept apart from the experts they stand in for, in a folder of their own (a .gguf
// file read in place has no pack to hold them; chronos pack --lowbit-only writes one):
// <dir>/lowbit.json ({format, version, fingerprint, lowbit: the manifest's "lowbit" object}) and its
// .ctsr file. load_lowbit_sidecar checks both against `manifest` (the model's fingerprint, a copy of
// every expert with its shapes, the .ctsr's header) and throws Error naming the file otherwise.
inline constexpr const char* kLowbitSidecarFileName = "lowbit.json";
void save_lowbit_sidecar(const LowbitCopies& lowbit, const std::string& fingerprint, const std::filesystem::path& dir);
LowbitCopies load_lowbit_sidecar(const std::filesystem::path& dir, const PackManifest& manifest);

// The gate/up/down weights of one expert to pack.
struct ExpertSource {
  ExpertKey key{};
  WeightView gate, up, down;
};

// Writes one cluster file: experts in the given order, each as gate, up, down tensors named
// layers.{l}.experts.{e}.{gate|up|down} with the source dtype/shape, adjacent, the extent starting at
// a multiple of 4096 and padded to 4096 with U8 tensors __pad.{n}; header padded with spaces so the
// data buffer starts at a multiple of 4096; __metadata__ {format: ctsr, version: 1, cluster: id,
// fingerprint}. Valid safetensors. Written to <path>.tmp and renamed into place.
std::vector<PackedExpert> write_ctsr(const std::filesystem::path& path, int32_t cluster_id,
                                     const std::string& fingerprint, std::span<const ExpertSource> experts);

// Recomputes the XXH64 of an expert's bytes as read into memory (the extent, padded or not) and
// throws Error "cluster_003.ctsr: layer 5 expert 17: checksum mismatch (expected .., got ..)".
void verify_expert_bytes(const PackedExpert& expert, const std::string& cluster_file, std::span<const std::byte> bytes);

// A stable fingerprint of a model (32 hex digits): a hash of config.json's canonical dump and of
// every tensor's name, dtype and shape. For a pack folder (it has cluster_manifest.json) it is the
// fingerprint of the model it was packed from, as recorded in the manifest.
std::string model_fingerprint(const std::filesystem::path& model_dir);
// The same hash over a config.json text and a list of tensors (a model read from a GGUF file).
std::string model_fingerprint(const std::string& config_json, std::span<const TensorInfo* const> tensors);
// XXH3-64 (hex) of a config.json's canonical form (keys sorted, no whitespace).
std::string config_fingerprint(const std::filesystem::path& config_path);

// Canonical tensor name of one expert projection: "layers.5.experts.17.gate".
std::string ctsr_tensor_name(const ExpertKey& key, const char* projection);

}  // namespace chronos
