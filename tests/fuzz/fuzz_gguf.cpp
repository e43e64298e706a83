// libFuzzer target: a GGUF file (header, key-values, tensor directory, data) opened and validated
// by GgufFile::open, then every key read through the getters. Bad bytes must be a chronos::Error; a
// file that opens must have every tensor inside the file, aligned, with a byte count that matches
// its type and shape, and no two tensors sharing bytes.
#include <algorithm>
#include <vector>

#include "chronos/error.h"
#include "chronos/gguf.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chronos;
  const auto path = fuzz::scratch_dir("gguf") / "model.gguf";
  fuzz::write_file(path, data, size);
  try {
    const auto file = GgufFile::open(path);
    std::vector<std::pair<int64_t, int64_t>> extents;
    int64_t total = 0;
    for (const GgufTensor& tensor : file->tensors()) {
      CHRONOS_FUZZ_CHECK(file->find(tensor.name) == &tensor, "tensor %s not found by name", tensor.name.c_str());
      CHRONOS_FUZZ_CHECK(
          tensor.file_offset > 0 && tensor.n_bytes > 0 && tensor.file_offset + tensor.n_bytes <= int64_t(size),
          "tensor %s [%lld, +%lld) outside the %zu-byte file", tensor.name.c_str(),
          static_cast<long long>(tensor.file_offset), static_cast<long long>(tensor.n_bytes), size);
      CHRONOS_FUZZ_CHECK(tensor.file_offset % file->alignment() == 0, "tensor %s misaligned", tensor.name.c_str());
      CHRONOS_FUZZ_CHECK(!tensor.shape.empty() && tensor.shape.size() <= 4, "tensor %s: bad rank", tensor.name.c_str());
      int64_t rows = 1;
      for (size_t d = 0; d + 1 < tensor.shape.size(); ++d) rows *= tensor.shape[d];
      CHRONOS_FUZZ_CHECK(rows * dtype_row_bytes(tensor.dtype, tensor.shape.back()) == tensor.n_bytes,
                         "tensor %s: %lld bytes do not hold its shape", tensor.name.c_str(),
                         static_cast<long long>(tensor.n_bytes));
      // Touch the first and last byte: ASan checks them against the mapping.
      total += int64_t(tensor.data[0]) + int64_t(tensor.data[tensor.n_bytes - 1]);
      extents.emplace_back(tensor.file_offset, tensor.file_offset + tensor.n_bytes);
    }
    std::sort(extents.begin(), extents.end());
    for (size_t i = 1; i < extents.size(); ++i)
      CHRONOS_FUZZ_CHECK(extents[i].first >= extents[i - 1].second, "tensors overlap at %lld",
                         static_cast<long long>(extents[i].first));
    for (const std::string& key : file->keys()) {
      try {  // each getter either answers or throws Error for a key of another type
        total += int64_t(file->get_string_array(key).size());
      } catch (const Error&) {
      }
      try {
        total += int64_t(file->get_i32_array(key).size()) + int64_t(file->get_f32_array(key).size());
      } catch (const Error&) {
      }
      try {
        total += file->get_int(key).value_or(0) & 1;
      } catch (const Error&) {
      }
      try {
        total += int64_t(file->get_string(key).value_or("").size());
      } catch (const Error&) {
      }
    }
    CHRONOS_FUZZ_CHECK(total >= 0, "byte total overflowed");
  } catch (const Error&) {
    // Rejected with a message: what the contract asks for.
  }
  return 0;
}
