// libFuzzer target: a checkpoint's config.json read by ModelConfig::load. Bad input must be a
// chronos::Error naming the key; a config that loads must have the sizes the engine allocates by
// within the bounds load() promises.
#include "chronos/error.h"
#include "chronos/model_config.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chronos;
  const auto& dir = fuzz::scratch_dir("config");
  fuzz::write_file(dir / "config.json", data, size);
  try {
    const auto config = ModelConfig::load(dir);
    CHRONOS_FUZZ_CHECK(config.n_layer > 0 && int64_t(config.layers.size()) == config.n_layer,
                       "%lld layers, %zu layer kinds", static_cast<long long>(config.n_layer), config.layers.size());
    CHRONOS_FUZZ_CHECK(config.n_embd > 0 && config.n_head > 0 && config.n_head_kv > 0 && config.head_dim > 0,
                       "non-positive width");
    if (config.n_moe_layers() > 0) {
      CHRONOS_FUZZ_CHECK(config.n_expert_used > 0 && config.n_expert_used <= config.n_expert, "top-%lld of %lld",
                         static_cast<long long>(config.n_expert_used), static_cast<long long>(config.n_expert));
    }
    CHRONOS_FUZZ_CHECK(config.n_rot > 0 && config.n_rot <= config.head_dim, "n_rot %lld of head_dim %lld",
                       static_cast<long long>(config.n_rot), static_cast<long long>(config.head_dim));
    CHRONOS_FUZZ_CHECK(config.q_dim() > 0 && config.kv_dim() > 0 && config.n_moe_layers() >= 0, "derived sizes");
    CHRONOS_FUZZ_CHECK(config.arch_name() != nullptr, "no architecture name");
  } catch (const Error&) {
  }
  return 0;
}
