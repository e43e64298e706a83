// libFuzzer target: a safetensors file (8-byte header length, JSON header, data buffer) opened
// and validated by SafetensorsFile::open. Bad bytes must be a chronos::Error; a file that opens
// must have every tensor inside the mapping with a byte count that matches its shape.
#include "chronos/error.h"
#include "chronos/safetensors.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chronos;
  const auto path = fuzz::scratch_dir("safetensors") / "model.safetensors";
  fuzz::write_file(path, data, size);
  try {
    const auto file = SafetensorsFile::open(path);
    int64_t total = 0;
    for (const TensorInfo& tensor : file->tensors()) {
      CHRONOS_FUZZ_CHECK(file->find(tensor.name) == &tensor, "tensor %s not found by name", tensor.name.c_str());
      CHRONOS_FUZZ_CHECK(tensor.file_offset >= 8 && tensor.file_offset + tensor.n_bytes <= int64_t(size),
                         "tensor %s [%lld, +%lld) outside the %zu-byte file", tensor.name.c_str(),
                         static_cast<long long>(tensor.file_offset), static_cast<long long>(tensor.n_bytes), size);
      CHRONOS_FUZZ_CHECK(tensor.n_elements() * int64_t(dtype_bits(tensor.dtype)) == tensor.n_bytes * 8,
                         "tensor %s: %lld bytes do not hold its shape", tensor.name.c_str(),
                         static_cast<long long>(tensor.n_bytes));
      // Touch the first and last byte: ASan checks them against the mapping.
      if (tensor.n_bytes > 0) total += int64_t(tensor.data[0]) + int64_t(tensor.data[tensor.n_bytes - 1]);
      total += tensor.n_bytes;
    }
    CHRONOS_FUZZ_CHECK(total >= 0, "byte total overflowed");
  } catch (const Error&) {
    // Rejected with a message: what the contract asks for.
  }
  return 0;
}
