// libFuzzer target: a routing-trace file read by TraceReader (open, read_all, read_sequence).
// Bad bytes must be a chronos::Error; what reads must agree with the header it was read with.
#include "chronos/error.h"
#include "chronos/trace_file.h"
#include "fuzz/fuzz_util.h"

namespace {

void check_sequence(const chronos::TraceHeader& header, const chronos::TraceSequence& sequence) {
  for (const auto& token : sequence.tokens) {
    CHRONOS_FUZZ_CHECK(int64_t(token.h0.size()) == header.n_embd, "h0 of %zu values", token.h0.size());
    CHRONOS_FUZZ_CHECK(int64_t(token.top_ids.size()) == header.n_moe_layers() * header.n_expert_used, "%zu top ids",
                       token.top_ids.size());
    CHRONOS_FUZZ_CHECK(int64_t(token.probs.size()) == header.n_moe_layers() * header.n_expert, "%zu probs",
                       token.probs.size());
    for (const int32_t id : token.top_ids) {
      CHRONOS_FUZZ_CHECK(id >= 0 && id < header.n_expert, "expert id %d of %d", id, header.n_expert);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chronos;
  const auto path = fuzz::scratch_dir("trace") / "trace.ctrace";
  fuzz::write_file(path, data, size);
  try {
    const auto reader = TraceReader::open(path);
    for (int64_t i = 0; i < reader.n_sequences(); ++i) check_sequence(reader.header(), reader.read_sequence(i));
    const auto all = reader.read_all();
    CHRONOS_FUZZ_CHECK(int64_t(all.size()) == reader.n_sequences(), "read_all gave %zu sequences", all.size());
    int64_t tokens = 0;
    for (const auto& sequence : all) tokens += int64_t(sequence.tokens.size());
    CHRONOS_FUZZ_CHECK(tokens == reader.n_tokens(), "%lld tokens, the end record says %lld",
                       static_cast<long long>(tokens), static_cast<long long>(reader.n_tokens()));
  } catch (const Error&) {
  }
  return 0;
}
