// make_backend: the --device flag's name to a Backend.
#include <fmt/format.h>

#include <charconv>

#include "chronos/backend.h"
#include "chronos/error.h"
#if CHRONOS_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace chronos {

bool cuda_built() {
#if CHRONOS_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Backend> make_backend(const std::string& device) {
  if (device == "cpu") return make_cpu_backend();
  if (device == "cuda" || device.starts_with("cuda:")) {
    int ordinal = 0;
    if (device.size() > 5) {
      const char* first = device.data() + 5;
      const char* last = device.data() + device.size();
      const auto [end, ec] = std::from_chars(first, last, ordinal);
      if (ec != std::errc() || end != last || ordinal < 0)
        throw UsageError(fmt::format("--device: '{}' is not cuda:N with N a device number", device));
    }
#if CHRONOS_HAVE_CUDA
    return make_cuda_backend(ordinal);
#else
    throw_error(
        "--device {}: this chronos was built without the CUDA backend (no nvcc at configure time; "
        "rebuild with -DCHRONOS_CUDA=ON on a machine with the CUDA toolkit)",
        device);
#endif
  }
  throw UsageError(fmt::format("--device must be cpu, cuda or cuda:N (got '{}')", device));
}

}  // namespace chronos
