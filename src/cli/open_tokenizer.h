// The tokenizer of a model given to -m: a folder's tokenizer.json, or a .gguf file's tokenizer.*
// key-values.
#pragma once

#include <filesystem>

#include "chronos/gguf.h"
#include "chronos/model.h"
#include "chronos/model_config.h"
#include "chronos/tokenizer.h"

namespace chronos::cli {

inline Tokenizer open_tokenizer(const std::filesystem::path& model) {
  if (is_gguf_path(model)) return Tokenizer::from_gguf(*GgufFile::open(model));
  return Tokenizer::load(model);
}

// The tokenizer of a model already loaded from `dir`: a GGUF file is not opened and parsed again.
inline Tokenizer open_tokenizer(const Model& model, const std::filesystem::path& dir) {
  if (const GgufFile* file = model.gguf_file()) return Tokenizer::from_gguf(*file);
  return Tokenizer::load(dir);
}

}  // namespace chronos::cli
