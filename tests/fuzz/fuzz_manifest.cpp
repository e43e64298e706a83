// libFuzzer target: cluster_manifest.json read by PackManifest::load against a real pack folder
// (tests/fuzz/pack_fixture.h), so that inputs close to the seed reach the checks of every expert
// against its .ctsr file. Bad input must be a chronos::Error; a manifest that loads must describe
// extents that lie inside their files.
#include "chronos/error.h"
#include "chronos/pack_format.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/pack_fixture.h"

namespace {

const std::filesystem::path& pack_dir() {
  static const std::filesystem::path dir = [] {
    const auto& scratch = chronos::fuzz::scratch_dir("manifest");
    chronos::fuzz::write_pack_fixture(scratch);
    return scratch;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chronos;
  const auto& dir = pack_dir();
  fuzz::write_file(dir / kManifestFileName, data, size);
  try {
    const auto manifest = PackManifest::load(dir);
    for (const auto& cluster : manifest.clusters) {
      for (const ExpertKey& key : cluster.experts) {
        const PackedExpert& expert = manifest.experts.at(key);
        CHRONOS_FUZZ_CHECK(expert.cluster == cluster.id, "expert in cluster %d listed by %d", expert.cluster,
                           cluster.id);
        CHRONOS_FUZZ_CHECK(expert.offset >= 0 && expert.bytes >= expert.payload_bytes() &&
                               expert.offset <= cluster.bytes - expert.bytes,
                           "layer %d expert %d: extent [%lld, +%lld) outside the %lld-byte file", key.layer, key.expert,
                           static_cast<long long>(expert.offset), static_cast<long long>(expert.bytes),
                           static_cast<long long>(cluster.bytes));
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
