// make_backend for the emulated CUDA tests (they are built with make_backend renamed to this):
// "cuda" is the CUDA backend over the CPU emulation.
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "chronos/backend.h"

namespace chronos {

std::unique_ptr<Backend> make_emulated_backend(const std::string& device) {
  return device == "cpu" ? make_cpu_backend() : make_cuda_backend(0);
}

}  // namespace chronos
