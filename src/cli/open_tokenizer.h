// The tokenizer of a model given to -m: a folder's tokenizer.json, or a .gguf file's tokenizer.*
// key-values.
#pragma once

#include <filesystem>

#include "chronos/gguf.h"
#include "chronos/model_config.h"
#include "chronos/tokenizer.h"

namespace chronos::cli {

inline Tokenizer open_tokenizer(const std::filesystem::path& model) {
  if (is_gguf_path(model)) return Tokenizer::from_gguf(*GgufFile::open(model));
  return Tokenizer::load(model);
}

}  // namespace chronos::cli
