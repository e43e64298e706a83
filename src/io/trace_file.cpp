// Routing-trace files: TraceWriter (streamed, checksummed, atomic) and TraceReader (validated).
// The byte layout is documented in docs/formats.md; keep the two in step.
#include "chronos/trace_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <set>

#include "chronos/error.h"

namespace chronos {
namespace {

static_assert(std::endian::native == std::endian::little, "trace files are little-endian; add byte swaps");

constexpr char kMagic[8] = {'C', 'H', 'R', 'T', 'R', 'A', 'C', 'E'};
constexpr char kSequenceTag[4] = {'C', 'S', 'E', 'Q'};
constexpr char kEndTag[4] = {'C', 'E', 'N', 'D'};
constexpr int64_t kEndRecordBytes = 4 + 8 + 8 + 8;

// Bounds that keep a corrupt header from asking for absurd allocations.
constexpr int64_t kMaxFingerprint = 4096;
constexpr int64_t kMaxString = 1 << 20;
constexpr int64_t kMaxEmbd = 1 << 20;
constexpr int64_t kMaxExperts = 1 << 16;
constexpr int64_t kMaxLayers = 1 << 16;

// Returns an empty string when the header is acceptable, else what is wrong with it.
std::string header_problem(const TraceHeader& h) {
  if (int64_t(h.fingerprint.size()) > kMaxFingerprint)
    return fmt::format("fingerprint of {} bytes (limit {})", h.fingerprint.size(), kMaxFingerprint);
  if (h.n_embd <= 0 || h.n_embd > kMaxEmbd) return fmt::format("n_embd {} out of range", h.n_embd);
  if (h.n_expert <= 0 || h.n_expert > kMaxExperts) return fmt::format("n_expert {} out of range", h.n_expert);
  if (h.n_expert_used <= 0 || h.n_expert_used > h.n_expert)
    return fmt::format("n_expert_used {} out of range (n_expert {})", h.n_expert_used, h.n_expert);
  if (h.moe_layers.empty() || int64_t(h.moe_layers.size()) > kMaxLayers)
    return fmt::format("{} MoE layers", h.moe_layers.size());
  for (size_t i = 0; i < h.moe_layers.size(); ++i)
    if (h.moe_layers[i] < 0 || (i > 0 && h.moe_layers[i] <= h.moe_layers[i - 1]))
      return fmt::format("MoE layer indices are not increasing non-negative numbers (entry {} is {})", i,
                         h.moe_layers[i]);
  return {};
}

// Returns an empty string when the token fits the header, else what is wrong with it.
std::string token_problem(const TraceHeader& h, const TraceToken& t) {
  if (t.token_id < 0) return fmt::format("token id {} is negative", t.token_id);
  const int64_t n_layers = h.n_moe_layers();
  for (int64_t l = 0; l < n_layers; ++l) {
    for (int64_t k = 0; k < h.n_expert_used; ++k) {
      const int32_t id = t.top_ids[size_t(l * h.n_expert_used + k)];
      if (id < 0 || id >= h.n_expert)
        return fmt::format("MoE layer {} (model layer {}): expert id {} out of range [0, {})", l,
                           h.moe_layers[size_t(l)], id, h.n_expert);
      for (int64_t j = 0; j < k; ++j)
        if (t.top_ids[size_t(l * h.n_expert_used + j)] == id)
          return fmt::format("MoE layer {} (model layer {}): expert id {} selected twice", l, h.moe_layers[size_t(l)],
                             id);
    }
  }
  for (size_t i = 0; i < t.probs.size(); ++i) {
    const uint16_t bits = t.probs[i];
    // A probability is finite and non-negative: sign bit clear, exponent not all ones, <= 1.0.
    if ((bits & 0x8000u) != 0 && bits != 0x8000u) return fmt::format("probability {} is negative", i);
    if ((bits & 0x7fffu) > 0x3c00u) return fmt::format("probability {} is above 1 or not finite", i);
  }
  return {};
}

void put(std::string& out, const void* data, size_t size) { out.append(static_cast<const char*>(data), size); }
template <typename T>
void put_value(std::string& out, T value) {
  put(out, &value, sizeof(value));
}

}  // namespace

int64_t TraceHeader::token_record_bytes() const {
  return 8 + 2 * int64_t(n_embd) + 4 * n_moe_layers() * n_expert_used + 2 * n_moe_layers() * n_expert;
}

// ---- writer ----

struct TraceWriter::HashState {
  XXH64_state_t* state = XXH64_createState();
  HashState() {
    CHRONOS_CHECK(state != nullptr);
    XXH64_reset(state, 0);
  }
  ~HashState() { XXH64_freeState(state); }
};

TraceWriter::TraceWriter(const std::filesystem::path& path, const TraceHeader& header)
    : path_(path), header_(header), hash_(std::make_unique<HashState>()) {
  if (const std::string problem = header_problem(header); !problem.empty())
    throw_error("{}: cannot write a trace with {}", path.string(), problem);
  file_ = std::make_unique<AtomicFile>(path);
  std::string bytes;
  put(bytes, kMagic, sizeof(kMagic));
  put_value<uint32_t>(bytes, kTraceVersion);
  put_value<uint32_t>(bytes, uint32_t(header.fingerprint.size()));
  put(bytes, header.fingerprint.data(), header.fingerprint.size());
  put_value<int32_t>(bytes, header.n_embd);
  put_value<int32_t>(bytes, header.n_expert);
  put_value<int32_t>(bytes, header.n_expert_used);
  put_value<int32_t>(bytes, int32_t(header.moe_layers.size()));
  put(bytes, header.moe_layers.data(), header.moe_layers.size() * sizeof(int32_t));
  write(bytes.data(), bytes.size());
}

// The AtomicFile removes its temporary when destroyed without commit().
TraceWriter::~TraceWriter() = default;

void TraceWriter::write(const void* data, size_t size) {
  CHRONOS_CHECK_MSG(file_ != nullptr, "{}: write after finish()", path_.string());
  if (size == 0) return;
  pending_.append(static_cast<const char*>(data), size);
  XXH64_update(hash_->state, data, size);
  if (pending_.size() >= (size_t(1) << 20)) flush();
}

void TraceWriter::flush() {
  try {
    file_->write(pending_);
  } catch (...) {
    file_.reset();
    throw;
  }
  pending_.clear();
}

void TraceWriter::add(const TraceSequence& sequence) {
  if (file_ == nullptr) throw_error("{}: add() after finish()", path_.string());
  const TraceHeader& h = header_;
  const auto where = [&](size_t t) {
    return fmt::format("{}: sequence {} (\"{}\") token {}", path_.string(), n_sequences_, sequence.prompt_id, t);
  };
  if (int64_t(sequence.prompt_id.size()) > kMaxString || int64_t(sequence.domain.size()) > kMaxString)
    throw_error("{}: sequence {}: prompt id or domain longer than {} bytes", path_.string(), n_sequences_, kMaxString);
  // Validate the whole sequence first so a bad token leaves the file as it was.
  for (size_t t = 0; t < sequence.tokens.size(); ++t) {
    const TraceToken& token = sequence.tokens[t];
    if (int64_t(token.h0.size()) != h.n_embd || int64_t(token.top_ids.size()) != h.n_moe_layers() * h.n_expert_used ||
        int64_t(token.probs.size()) != h.n_moe_layers() * h.n_expert)
      throw_error("{}: h0/top_ids/probs have {}/{}/{} values, the header needs {}/{}/{}", where(t), token.h0.size(),
                  token.top_ids.size(), token.probs.size(), h.n_embd, h.n_moe_layers() * h.n_expert_used,
                  h.n_moe_layers() * h.n_expert);
    if (const std::string problem = token_problem(h, token); !problem.empty()) throw_error("{}: {}", where(t), problem);
  }
  std::string bytes;
  put(bytes, kSequenceTag, sizeof(kSequenceTag));
  put_value<uint32_t>(bytes, uint32_t(sequence.prompt_id.size()));
  put(bytes, sequence.prompt_id.data(), sequence.prompt_id.size());
  put_value<uint32_t>(bytes, uint32_t(sequence.domain.size()));
  put(bytes, sequence.domain.data(), sequence.domain.size());
  put_value<uint64_t>(bytes, uint64_t(sequence.tokens.size()));
  write(bytes.data(), bytes.size());
  for (const TraceToken& token : sequence.tokens) {
    bytes.clear();
    put_value<uint32_t>(bytes, token.generated ? 1u : 0u);
    put_value<int32_t>(bytes, token.token_id);
    put(bytes, token.h0.data(), token.h0.size() * sizeof(uint16_t));
    put(bytes, token.top_ids.data(), token.top_ids.size() * sizeof(int32_t));
    put(bytes, token.probs.data(), token.probs.size() * sizeof(uint16_t));
    write(bytes.data(), bytes.size());
  }
  ++n_sequences_;
  n_tokens_ += int64_t(sequence.tokens.size());
}

void TraceWriter::finish() {
  if (file_ == nullptr) throw_error("{}: finish() called twice", path_.string());
  std::string bytes;
  put(bytes, kEndTag, sizeof(kEndTag));
  put_value<uint64_t>(bytes, uint64_t(n_sequences_));
  put_value<uint64_t>(bytes, uint64_t(n_tokens_));
  write(bytes.data(), bytes.size());
  const uint64_t checksum = XXH64_digest(hash_->state);  // of every byte before the checksum itself
  pending_.append(reinterpret_cast<const char*>(&checksum), sizeof(checksum));
  flush();
  const std::unique_ptr<AtomicFile> file = std::move(file_);
  file->commit();
}

// ---- reader ----

namespace {

// A read-only file descriptor with bounds-checked reads that name the offset on failure.
class InputFile {
 public:
  explicit InputFile(const std::filesystem::path& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw_error("{}: cannot open: {}", path.string(), std::strerror(errno));
    struct stat info {};
    if (::fstat(fd_, &info) != 0 || !S_ISREG(info.st_mode)) {
      ::close(fd_);
      throw_error("{}: not a regular file", path.string());
    }
    size_ = int64_t(info.st_size);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  int64_t size() const { return size_; }
  [[noreturn]] void fail(int64_t offset, const std::string& what) const {
    throw_error("{}: offset {}: {}", path_.string(), offset, what);
  }
  // Reads `size` bytes at `offset`; `what` names the field for the truncation message.
  void read(int64_t offset, void* out, int64_t size, const char* what) const {
    if (size < 0 || offset > size_ || size > size_ - offset)
      fail(offset, fmt::format("file is truncated: {} needs {} bytes, {} left", what, size,
                               std::max<int64_t>(0, size_ - offset)));
    auto* cursor = static_cast<char*>(out);
    while (size > 0) {
      const ssize_t got = ::pread(fd_, cursor, size_t(size), offset);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) fail(offset, fmt::format("read failed: {}", got < 0 ? std::strerror(errno) : "unexpected end"));
      cursor += got;
      offset += got;
      size -= got;
    }
  }
  template <typename T>
  T value(int64_t& offset, const char* what) const {
    T out{};
    read(offset, &out, sizeof(T), what);
    offset += sizeof(T);
    return out;
  }
  std::string bytes(int64_t& offset, int64_t size, const char* what) const {
    std::string out(size_t(std::max<int64_t>(size, 0)), '\0');
    read(offset, out.data(), size, what);
    offset += size;
    return out;
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

}  // namespace

TraceReader TraceReader::open(const std::filesystem::path& path) {
  const InputFile file(path);
  TraceReader reader;
  reader.path_ = path;
  int64_t at = 0;
  char magic[8];
  file.read(0, magic, 8, "the magic");
  if (std::memcmp(magic, kMagic, 8) != 0) file.fail(0, "not a Chronos trace (bad magic)");
  at = 8;
  const uint32_t version = file.value<uint32_t>(at, "the version");
  if (version != kTraceVersion)
    file.fail(8, fmt::format("trace version {} is not supported (this build reads {})", version, kTraceVersion));
  TraceHeader& h = reader.header_;
  const int64_t fingerprint_at = at;
  const uint32_t fingerprint_size = file.value<uint32_t>(at, "the fingerprint length");
  if (fingerprint_size > kMaxFingerprint)
    file.fail(fingerprint_at, fmt::format("fingerprint length {} exceeds {}", fingerprint_size, kMaxFingerprint));
  h.fingerprint = file.bytes(at, fingerprint_size, "the fingerprint");
  const int64_t sizes_at = at;
  h.n_embd = file.value<int32_t>(at, "n_embd");
  h.n_expert = file.value<int32_t>(at, "n_expert");
  h.n_expert_used = file.value<int32_t>(at, "n_expert_used");
  const int32_t n_layers = file.value<int32_t>(at, "the MoE layer count");
  if (n_layers <= 0 || n_layers > kMaxLayers)
    file.fail(at - 4, fmt::format("MoE layer count {} out of range", n_layers));
  h.moe_layers.resize(size_t(n_layers));
  file.read(at, h.moe_layers.data(), int64_t(n_layers) * 4, "the MoE layer indices");
  at += int64_t(n_layers) * 4;
  if (const std::string problem = header_problem(h); !problem.empty()) file.fail(sizes_at, problem);

  // Walk the records; token payloads are skipped here and checked when read.
  const int64_t record = h.token_record_bytes();
  while (true) {
    const int64_t record_at = at;
    char tag[4];
    file.read(at, tag, 4, "a record tag");
    at += 4;
    if (std::memcmp(tag, kEndTag, 4) == 0) {
      reader.end_offset_ = record_at;
      break;
    }
    if (std::memcmp(tag, kSequenceTag, 4) != 0)
      file.fail(record_at, "expected a sequence record (\"CSEQ\") or the end record (\"CEND\")");
    reader.sequence_offsets_.push_back(record_at);
    for (const char* what : {"the prompt id", "the domain"}) {
      const int64_t length_at = at;
      const uint32_t length = file.value<uint32_t>(at, what);
      if (length > kMaxString) file.fail(length_at, fmt::format("{} length {} exceeds {}", what, length, kMaxString));
      if (length > file.size() - at) file.fail(at, fmt::format("file is truncated inside {}", what));
      at += length;
    }
    const int64_t count_at = at;
    const uint64_t n_tokens = file.value<uint64_t>(at, "the token count");
    const uint64_t left = uint64_t(std::max<int64_t>(0, file.size() - at));
    if (n_tokens > left / uint64_t(record))
      file.fail(count_at, fmt::format("file is truncated: {} tokens of {} bytes do not fit in the {} bytes left",
                                      n_tokens, record, left));
    at += int64_t(n_tokens) * record;
    reader.n_tokens_ += int64_t(n_tokens);
  }
  int64_t after_tag = reader.end_offset_ + 4;
  const uint64_t n_sequences = file.value<uint64_t>(after_tag, "the end record's sequence count");
  const uint64_t n_tokens = file.value<uint64_t>(after_tag, "the end record's token count");
  reader.checksum_ = file.value<uint64_t>(after_tag, "the end record's checksum");
  if (n_sequences != reader.sequence_offsets_.size())
    file.fail(reader.end_offset_ + 4, fmt::format("end record counts {} sequences, the file holds {}", n_sequences,
                                                  reader.sequence_offsets_.size()));
  if (n_tokens != uint64_t(reader.n_tokens_))
    file.fail(reader.end_offset_ + 12,
              fmt::format("end record counts {} tokens, the file holds {}", n_tokens, reader.n_tokens_));
  if (after_tag != file.size())
    file.fail(after_tag, fmt::format("{} trailing bytes after the end record", file.size() - after_tag));
  return reader;
}

TraceSequence TraceReader::parse_sequence(const std::string& bytes, int64_t offset, int64_t base) const {
  // `bytes` holds the file from offset `base`; record fields were bounds-checked by open().
  const TraceHeader& h = header_;
  const auto fail = [&](int64_t at, const std::string& what) {
    throw_error("{}: offset {}: {}", path_.string(), base + at, what);
  };
  const auto get = [&](int64_t& at, void* out, int64_t size) {
    if (at < 0 || at + size > int64_t(bytes.size())) fail(at, "record runs past the data read");
    std::memcpy(out, bytes.data() + at, size_t(size));
    at += size;
  };
  TraceSequence sequence;
  int64_t at = offset - base + 4;
  for (std::string* field : {&sequence.prompt_id, &sequence.domain}) {
    uint32_t length = 0;
    get(at, &length, 4);
    field->resize(length);
    get(at, field->data(), length);
  }
  uint64_t n_tokens = 0;
  get(at, &n_tokens, 8);
  sequence.tokens.resize(size_t(n_tokens));
  for (TraceToken& token : sequence.tokens) {
    const int64_t token_at = at;
    uint32_t flags = 0;
    get(at, &flags, 4);
    if (flags > 1) fail(token_at, fmt::format("token flags {:#x} have unknown bits set", flags));
    token.generated = flags == 1;
    get(at, &token.token_id, 4);
    token.h0.resize(size_t(h.n_embd));
    get(at, token.h0.data(), 2 * int64_t(h.n_embd));
    token.top_ids.resize(size_t(h.n_moe_layers() * h.n_expert_used));
    get(at, token.top_ids.data(), 4 * int64_t(token.top_ids.size()));
    token.probs.resize(size_t(h.n_moe_layers() * h.n_expert));
    get(at, token.probs.data(), 2 * int64_t(token.probs.size()));
    if (const std::string problem = token_problem(h, token); !problem.empty()) fail(token_at, "token: " + problem);
  }
  return sequence;
}

std::vector<TraceSequence> TraceReader::read_all() const {
  const InputFile file(path_);
  const int64_t hashed = end_offset_ + kEndRecordBytes - 8;
  if (file.size() != end_offset_ + kEndRecordBytes)
    file.fail(0, fmt::format("file changed size since it was opened ({} bytes now)", file.size()));
  int64_t at = 0;
  const std::string bytes = file.bytes(at, hashed, "the trace");
  const uint64_t got = XXH64(bytes.data(), bytes.size(), 0);
  if (got != checksum_)
    file.fail(hashed, fmt::format("checksum mismatch over bytes [0, {}) (stored {:016x}, computed {:016x})", hashed,
                                  checksum_, got));
  std::vector<TraceSequence> sequences;
  sequences.reserve(sequence_offsets_.size());
  for (int64_t offset : sequence_offsets_) sequences.push_back(parse_sequence(bytes, offset, 0));
  return sequences;
}

TraceSequence TraceReader::read_sequence(int64_t index) const {
  CHRONOS_CHECK_MSG(index >= 0 && index < n_sequences(), "{}: sequence {} of {}", path_.string(), index, n_sequences());
  const InputFile file(path_);
  const int64_t begin = sequence_offsets_[size_t(index)];
  const int64_t end = size_t(index + 1) < sequence_offsets_.size() ? sequence_offsets_[size_t(index + 1)] : end_offset_;
  int64_t at = begin;
  const std::string bytes = file.bytes(at, end - begin, "a sequence record");
  return parse_sequence(bytes, begin, begin);
}

}  // namespace chronos
