// make_backend: the --device flag's name to a Backend. Compiled into each device library
// (src/CMakeLists.txt: chronos_cuda, chronos_cuda_absent; tests/cuda_emulator: the emulated one),
// with CHRONOS_DEVICE_CUDA saying whether that library has a CUDA backend, so that the engine's
// libraries are the same objects in every build and an executable picks its CUDA by what it links.
#include <fmt/format.h>

#include <charconv>

#include "chronos/backend.h"
#include "chronos/error.h"

namespace chronos {

bool cuda_built() { return CHRONOS_DEVICE_CUDA != 0; }

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
    if (!cuda_built())
      throw_error(
          "--device {}: this chronos was built without the CUDA backend (no nvcc at configure time; "
          "rebuild with -DCHRONOS_CUDA=ON on a machine with the CUDA toolkit)",
          device);
    return make_cuda_backend(ordinal);
  }
  throw UsageError(fmt::format("--device must be cpu, cuda or cuda:N (got '{}')", device));
}

}  // namespace chronos
