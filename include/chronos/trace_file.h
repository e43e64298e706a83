// Routing traces: a little-endian binary file of per-token routing records (docs/formats.md).
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "chronos/file_util.h"

namespace chronos {

inline constexpr uint32_t kTraceVersion = 1;

struct TraceHeader {
  std::string fingerprint;  // model fingerprint (model_fingerprint in pack_format.h)
  int32_t n_embd = 0;
  int32_t n_expert = 0;
  int32_t n_expert_used = 0;
  std::vector<int32_t> moe_layers;  // the model's own layer indices of the MoE layers
  int64_t n_moe_layers() const { return int64_t(moe_layers.size()); }
  // Bytes of one token record in the file.
  int64_t token_record_bytes() const;
};

struct TraceToken {
  bool generated = false;  // false: prompt token
  int32_t token_id = 0;
  std::vector<uint16_t> h0;      // [n_embd] f16 bits: hidden state after block 0
  std::vector<int32_t> top_ids;  // [n_moe_layers * n_expert_used], layer-major, router order
  std::vector<uint16_t> probs;   // [n_moe_layers * n_expert] router softmax, f16 bits, layer-major
};

struct TraceSequence {
  std::string prompt_id;
  std::string domain;
  std::vector<TraceToken> tokens;
};

// Writes <path>.tmp and renames it to <path> on finish(); a writer destroyed without finish()
// removes the temporary file, so an interrupted run leaves nothing that looks complete.
class TraceWriter {
 public:
  TraceWriter(const std::filesystem::path& path, const TraceHeader& header);
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Checks every token against the header (sizes, expert ids in range) before writing it.
  void add(const TraceSequence& sequence);
  void finish();

  int64_t n_sequences() const { return n_sequences_; }
  int64_t n_tokens() const { return n_tokens_; }

 private:
  void write(const void* data, size_t size);
  void flush();

  std::filesystem::path path_;
  TraceHeader header_;
  std::unique_ptr<AtomicFile> file_;  // null after finish()
  std::string pending_;               // bytes not yet handed to file_
  struct HashState;
  std::unique_ptr<HashState> hash_;
  int64_t n_sequences_ = 0;
  int64_t n_tokens_ = 0;
};

// A validated trace file. open() checks magic, version, header fields, the record structure and
// the end record's counts; read_all()/read_sequence() also check the checksum and every token
// field. Every bad byte is an Error naming the file and the byte offset.
class TraceReader {
 public:
  static TraceReader open(const std::filesystem::path& path);

  const TraceHeader& header() const { return header_; }
  std::vector<TraceSequence> read_all() const;
  TraceSequence read_sequence(int64_t index) const;  // without the whole-file checksum
  int64_t n_sequences() const { return int64_t(sequence_offsets_.size()); }
  int64_t n_tokens() const { return n_tokens_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  TraceSequence parse_sequence(const std::string& bytes, int64_t offset, int64_t base) const;

  std::filesystem::path path_;
  TraceHeader header_;
  std::vector<int64_t> sequence_offsets_;  // file offset of each sequence record
  int64_t end_offset_ = 0;                 // file offset of the end record
  int64_t n_tokens_ = 0;
  uint64_t checksum_ = 0;
};

}  // namespace chronos
