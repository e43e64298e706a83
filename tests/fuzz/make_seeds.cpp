// Writes the seed inputs of the trace and manifest targets (and a .ctsr seed for safetensors),
// which are binary or must match the pack fixture byte for byte:
//   build/fuzz/tests/fuzz/fuzz_make_seeds tests/fuzz/corpus
#include <cstdio>

#include "chronos/dtype.h"
#include "chronos/pack_format.h"
#include "chronos/trace_file.h"
#include "fuzz/pack_fixture.h"

namespace {

namespace fs = std::filesystem;
using namespace chronos;

TraceToken make_token(const TraceHeader& h, int32_t seed, bool generated) {
  TraceToken t;
  t.generated = generated;
  t.token_id = 100 + seed;
  for (int i = 0; i < h.n_embd; ++i) t.h0.push_back(f32_to_f16(float(seed) * 0.25f - float(i)));
  for (int64_t l = 0; l < h.n_moe_layers(); ++l) {
    for (int64_t k = 0; k < h.n_expert_used; ++k) t.top_ids.push_back(int32_t((seed + l + k) % h.n_expert));
    for (int64_t e = 0; e < h.n_expert; ++e) t.probs.push_back(f32_to_f16(float((e + seed) % h.n_expert + 1) / 15.0f));
  }
  return t;
}

void write_trace(const fs::path& path, const TraceHeader& header, int n_sequences, int n_tokens) {
  TraceWriter writer(path, header);
  for (int s = 0; s < n_sequences; ++s) {
    TraceSequence sequence;
    sequence.prompt_id = "p-" + std::to_string(s);
    sequence.domain = s % 2 ? "code" : "";
    for (int i = 0; i < n_tokens; ++i) sequence.tokens.push_back(make_token(header, s * 10 + i, i >= 2));
    writer.add(sequence);
  }
  writer.finish();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  TraceHeader header;
  header.fingerprint = "0123456789abcdef0123456789abcdef";
  header.n_embd = 4;
  header.n_expert = 4;
  header.n_expert_used = 2;
  header.moe_layers = {0, 2};
  fs::create_directories(out / "trace");
  write_trace(out / "trace" / "two_sequences.ctrace", header, 2, 3);
  write_trace(out / "trace" / "empty.ctrace", header, 0, 0);
  header.moe_layers = {1};
  header.n_expert_used = 1;
  write_trace(out / "trace" / "one_layer.ctrace", header, 1, 1);

  const fs::path pack = out / "pack.tmp";
  fs::create_directories(pack);
  const PackManifest manifest = fuzz::write_pack_fixture(pack);
  fs::create_directories(out / "manifest");
  manifest.save(out / "manifest" / "cluster_manifest.json");
  fs::create_directories(out / "safetensors");
  fs::copy_file(pack / "cluster_001.ctsr", out / "safetensors" / "cluster_001.ctsr",
                fs::copy_options::overwrite_existing);
  fs::remove_all(pack);
  return 0;
}
