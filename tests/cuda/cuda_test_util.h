// Helpers shared by the CUDA kernel tests: device arrays, the fixture that skips without a device
// and gives each test a stream, the scalar CPU reference, and the dot-product error bound.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "chronos/ops.h"
#include "kernels/test_util.h"

namespace chronos::test {

inline bool cuda_device_present() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// A device array filled from (and read back into) a host vector.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) { check(cudaMalloc(&ptr_, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc"); }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return ptr_; }
  void upload(const std::vector<T>& host) {
    check(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    check(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
  }

 private:
  static void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
  T* ptr_ = nullptr;
  size_t n_;
};

// Skips every test when there is no device; gives each test its own stream.
class CudaStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_present()) GTEST_SKIP() << "no CUDA device: the CUDA kernels cannot run here";
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  void sync() {
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  }
  cudaStream_t stream_ = nullptr;
};

// Runs the CPU ops at the scalar reference ISA.
struct ScalarIsa {
  ScalarIsa() { set_isa(Isa::kScalar); }
  ~ScalarIsa() { set_isa(detect_isa()); }
};

// |W x| summed without cancellation, per output: the scale of a dot product's rounding error.
inline std::vector<double> abs_products(const std::vector<float>& w, const std::vector<float>& x, int64_t n,
                                        int64_t rows, int64_t cols) {
  std::vector<double> out(size_t(n * rows), 0.0);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        out[size_t(t * rows + r)] += std::fabs(double(w[size_t(r * cols + c)]) * x[size_t(t * cols + c)]);
  return out;
}

// A dot product of n terms in any order is within n u sum |w x| of the exact value (Higham 3.1);
// the CPU op and the kernel are each within that of it, so of each other within 2 n u sum |w x|.
inline void expect_products_close(const std::vector<float>& got, const std::vector<float>& expected,
                                  const std::vector<double>& magnitude, int64_t cols, const std::string& what) {
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], expected[i], double(2 * cols + 2) * kF32Eps * magnitude[i] + 1e-30) << what << " i " << i;
}

}  // namespace chronos::test
