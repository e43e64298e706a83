// read_generation_defaults: generation_config.json -> SamplingParams.
#include "chronos/generation_config.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "chronos/error.h"

namespace chronos {

SamplingParams read_generation_defaults(const std::filesystem::path& model_dir) {
  SamplingParams params;
  const auto path = model_dir / "generation_config.json";
  if (!std::filesystem::exists(path)) return params;
  std::ifstream in(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
    if (!j.value("do_sample", false)) return params;
    params.temperature = j.value("temperature", 1.0f);
    params.top_k = j.value("top_k", int64_t{50});
    params.top_p = j.value("top_p", 1.0f);
    params.min_p = j.contains("min_p") && !j["min_p"].is_null() ? j["min_p"].get<float>() : 0.0f;
    params.repetition_penalty = j.value("repetition_penalty", 1.0f);
  } catch (const nlohmann::json::exception& e) {
    throw_error("{}: {}", path.string(), e.what());
  }
  return params;
}

}  // namespace chronos
