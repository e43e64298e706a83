// The CUDA entry points of a build without nvcc (chronos_cuda_absent): each is a clear error.
#include "chronos/backend.h"
#include "chronos/error.h"
#include "chronos/model_runner.h"

namespace chronos {

std::unique_ptr<Backend> make_cuda_backend(int) {
  throw_error("this chronos was built without the CUDA backend (rebuild with -DCHRONOS_CUDA=ON)");
}

std::unique_ptr<ModelRunner> make_cuda_runner(const Model&, Backend&, int64_t, int64_t, ForwardHooks, int64_t) {
  throw_error("this chronos was built without the CUDA backend (rebuild with -DCHRONOS_CUDA=ON)");
}

}  // namespace chronos
