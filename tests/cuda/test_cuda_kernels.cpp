// Every CUDA launcher of kernels/cuda/cuda_kernels.h against the CPU op or model semantics it
// replaces, on random inputs over weight dtypes and shapes (odd sizes, 1..64 tokens, GQA, windows,
// partial RoPE, top-k ties), plus Blas::gemm against the CPU matmul. Skipped when no CUDA device is
// present. Tolerances are stated per test; u = 2^-24 is the unit roundoff of f32.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "chronos/dtype.h"
#include "chronos/error.h"
#include "chronos/ops.h"
#include "cuda/cuda_test_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_math.h"
#include "kernels/reference_combine.h"
#include "kernels/test_util.h"

namespace chronos {
namespace {

using test::abs_products;
using test::DeviceArray;
using test::expect_products_close;
using test::kF32Eps;
using test::ScalarIsa;

constexpr DType kWeightDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};

class CudaKernels : public test::CudaStreamTest {};

// Weights on the device with their exact host values; `offset_elements` shifts the start so the
// kernels' unaligned (scalar) load path is exercised too.
struct DeviceWeights {
  test::StoredWeights host;
  DeviceArray<uint8_t> bytes;
  int64_t offset_bytes;

  DeviceWeights(DType dtype, int64_t rows, int64_t cols, uint32_t seed, int64_t offset_elements = 0)
      : host(test::make_weights(dtype, rows, cols, seed)),
        bytes(host.bytes.size() + size_t(offset_elements * dtype_size(dtype))),
        offset_bytes(offset_elements * dtype_size(dtype)) {
    std::vector<uint8_t> padded(size_t(offset_bytes), 0);
    padded.insert(padded.end(), host.bytes.begin(), host.bytes.end());
    bytes.upload(padded);
  }
  const void* data() const { return bytes.get() + offset_bytes; }
  WeightView view() const { return {data(), host.dtype, host.rows, host.cols}; }
};

// ---- Element-wise ops: one rounding each (or none), the same formula as the CPU ---------------------

TEST_F(CudaKernels, AddAddBiasClampAreExact) {
  for (const int64_t n : {1, 31, 1000, 4099}) {
    const auto x0 = test::random_floats(n, 1, -3.0f, 3.0f), y = test::random_floats(n, 2);
    DeviceArray<float> x(x0), dy(y);
    cuda::add(x.get(), dy.get(), n, stream_);
    sync();
    auto got = x.download();
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[size_t(i)], x0[size_t(i)] + y[size_t(i)]) << "add " << i;

    const int64_t dim = n % 7 + 3, rows = n / dim;
    const auto bias = test::random_floats(dim, 3);
    x.upload(x0);
    DeviceArray<float> d_bias(bias);
    cuda::add_bias(x.get(), d_bias.get(), rows, dim, stream_);
    sync();
    got = x.download();
    for (int64_t i = 0; i < n; ++i) {
      const float expected = i < rows * dim ? x0[size_t(i)] + bias[size_t(i % dim)] : x0[size_t(i)];
      ASSERT_EQ(got[size_t(i)], expected) << "add_bias " << i;
    }

    auto with_nan = x0;
    with_nan[0] = std::numeric_limits<float>::quiet_NaN();
    x.upload(with_nan);
    cuda::clamp(x.get(), n, 1.5f, stream_);
    sync();
    got = x.download();
    EXPECT_TRUE(std::isnan(got[0]));
    for (int64_t i = 1; i < n; ++i) ASSERT_EQ(got[size_t(i)], std::clamp(x0[size_t(i)], -1.5f, 1.5f)) << i;
  }
}

TEST_F(CudaKernels, SiluMulMatchesCpuOp) {
  ScalarIsa scalar;
  for (const int64_t n : {1, 33, 5000}) {
    const auto gate = test::random_floats(n, 4, -10.0f, 10.0f), up = test::random_floats(n, 5, -2.0f, 2.0f);
    std::vector<float> expected(static_cast<size_t>(n));
    ops::silu_mul(expected.data(), gate.data(), up.data(), n);
    DeviceArray<float> g(gate), u(up);
    cuda::silu_mul(g.get(), g.get(), u.get(), n, stream_);  // in place, as the contract allows
    sync();
    const auto got = g.download();
    // The device expf is within 2 ulp, the host's within 1; a divide and a multiply follow: 8 ulp.
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(got[size_t(i)], expected[size_t(i)], 16 * kF32Eps * std::fabs(expected[size_t(i)]) + 1e-30) << i;
  }
}

TEST_F(CudaKernels, RmsnormMatchesCpuOpPerRowAndPerHead) {
  ScalarIsa scalar;
  struct Shape {
    int64_t rows, dim, stride;
  };
  // Whole rows; per-head rows (dim = stride = head_dim); rows with a gap (stride > dim).
  for (const Shape s :
       {Shape{1, 1, 1}, Shape{3, 2048, 2048}, Shape{17 * 4, 64, 64}, Shape{5, 100, 131}, Shape{2, 33, 40}}) {
    const auto x = test::random_floats(s.rows * s.stride, 6, -4.0f, 4.0f);
    const auto weight = test::random_floats(s.dim, 7, 0.5f, 1.5f);
    auto expected = x;
    for (int64_t r = 0; r < s.rows; ++r)
      ops::rmsnorm(expected.data() + r * s.stride, x.data() + r * s.stride, weight.data(), s.dim, 1e-5f);
    DeviceArray<float> in(x), w(weight), out(x.size());
    out.upload(x);
    cuda::rmsnorm(out.get(), in.get(), w.get(), s.rows, s.dim, s.stride, 1e-5f, stream_);
    cuda::rmsnorm(in.get(), in.get(), w.get(), s.rows, s.dim, s.stride, 1e-5f, stream_);  // aliased
    sync();
    // The sum of squares (positive terms) is within (dim - 1) u relative on each side, so the two
    // sums differ by up to 2 (dim - 1) u and their rsqrt by half that; the divide, sqrt and two
    // multiplies add a few u: (dim + 8) u relative.
    const double rel = (double(s.dim) + 8) * kF32Eps;
    for (const auto& got : {out.download(), in.download()})
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_NEAR(got[i], expected[i], rel * std::fabs(expected[i])) << "dim " << s.dim << " i " << i;
  }
}

TEST_F(CudaKernels, EmbedRowsAndGatherRowsCopyExactly) {
  for (const DType dtype : kWeightDtypes) {
    const DeviceWeights table(dtype, 50, 37, 8);
    const std::vector<int32_t> ids = {3, 0, 49, 3, 17};
    DeviceArray<int32_t> d_ids(ids);
    DeviceArray<float> out(ids.size() * 37);
    cuda::embed_rows(out.get(), table.view(), d_ids.get(), int64_t(ids.size()), stream_);
    sync();
    const auto got = out.download();
    std::vector<float> row(37);
    for (size_t t = 0; t < ids.size(); ++t) {
      ops::weight_row_to_f32(row.data(), table.host.view(), ids[t]);
      for (size_t i = 0; i < 37; ++i) ASSERT_EQ(got[t * 37 + i], row[i]) << dtype_name(dtype) << " " << t;
    }
  }
  const auto src = test::random_floats(10 * 33, 9);
  const std::vector<int32_t> rows = {9, 9, 0, 4, 7, 1, 2};
  DeviceArray<float> d_src(src), dst(rows.size() * 33);
  DeviceArray<int32_t> d_rows(rows);
  cuda::gather_rows(dst.get(), d_src.get(), d_rows.get(), int64_t(rows.size()), 33, stream_);
  sync();
  const auto got = dst.download();
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t i = 0; i < 33; ++i) ASSERT_EQ(got[r * 33 + i], src[size_t(rows[r]) * 33 + i]);
}

TEST_F(CudaKernels, ConvertMatchesHostRoundingBitForBit) {
  auto values = test::random_floats(70001, 10, -70000.0f, 70000.0f);
  const auto small = test::random_floats(1000, 11, -1e-6f, 1e-6f);  // f16 subnormals
  values.insert(values.end(), small.begin(), small.end());
  values.push_back(std::numeric_limits<float>::quiet_NaN());
  values.push_back(INFINITY);
  DeviceArray<float> src(values);
  DeviceArray<uint16_t> dst(values.size());
  for (const DType dtype : {DType::kF16, DType::kBF16}) {
    cuda::convert_f32(dst.get(), dtype, src.get(), int64_t(values.size()), stream_);
    sync();
    const auto got = dst.download();
    for (size_t i = 0; i < values.size(); ++i)
      ASSERT_EQ(got[i], dtype == DType::kF16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i])) << i;
  }
  EXPECT_THROW(cuda::convert_f32(dst.get(), DType::kF32, src.get(), 1, stream_), Error);
}

// ---- RoPE and the KV cache --------------------------------------------------------------------------

TEST_F(CudaKernels, RopeMatchesCpuRotateHalfAndAdjacentPairs) {
  struct Shape {
    int64_t n_tokens, n_heads, head_dim, n_rot, row_stride, pos0;
    bool interleaved;
  };
  for (const Shape s :
       {Shape{1, 4, 64, 64, 256, 9, false}, Shape{3, 3, 10, 4, 35, 0, false}, Shape{17, 2, 128, 64, 300, 5, false},
        Shape{64, 8, 32, 32, 256, 1, false}, Shape{5, 3, 24, 8, 80, 2, true}, Shape{17, 2, 64, 64, 128, 40, true}}) {
    const int64_t half = s.n_rot / 2, n_ctx = s.pos0 + s.n_tokens;
    std::vector<float> cos(static_cast<size_t>(n_ctx * half)), sin(static_cast<size_t>(n_ctx * half));
    for (int64_t p = 0; p < n_ctx; ++p)
      for (int64_t i = 0; i < half; ++i) {
        const double angle = double(p) * std::pow(10000.0, -2.0 * double(i) / double(s.n_rot));
        cos[size_t(p * half + i)] = float(std::cos(angle));
        sin[size_t(p * half + i)] = float(std::sin(angle));
      }
    const auto x0 = test::random_floats(s.n_tokens * s.row_stride, 12);
    auto expected = x0;
    for (int64_t t = 0; t < s.n_tokens; ++t)
      for (int64_t h = 0; h < s.n_heads; ++h) {
        float* head = expected.data() + t * s.row_stride + h * s.head_dim;
        const float* c = cos.data() + (s.pos0 + t) * half;
        const float* sn = sin.data() + (s.pos0 + t) * half;
        if (s.interleaved)
          ops::rope_head_interleaved(head, c, sn, s.n_rot);
        else
          ops::rope_head(head, c, sn, s.n_rot);
      }
    DeviceArray<float> x(x0), d_cos(cos), d_sin(sin);
    cuda::rope(x.get(), d_cos.get(), d_sin.get(), s.n_tokens, s.n_heads, s.head_dim, s.n_rot, s.row_stride, s.pos0,
               s.interleaved, stream_);
    sync();
    const auto got = x.download();
    // The host rounds both products and the sum (within 2 u (|a| + |b|) of exact, |c|, |s| <= 1);
    // nvcc may fuse one product into an fma (also within 2 u (|a| + |b|)): 4 u (|a| + |b|) apart.
    // Elements outside the rotated dimensions must be untouched (bitwise equal).
    for (int64_t t = 0; t < s.n_tokens; ++t)
      for (int64_t d = 0; d < s.row_stride; ++d) {
        const size_t i = size_t(t * s.row_stride + d);
        const bool rotated = d < s.n_heads * s.head_dim && d % s.head_dim < s.n_rot;
        if (!rotated) {
          ASSERT_EQ(got[i], x0[i]) << "t " << t << " d " << d;
          continue;
        }
        const int64_t in_head = d % s.head_dim, base = t * s.row_stride + d - in_head;
        const int64_t first = s.interleaved ? in_head / 2 * 2 : in_head % half;  // the pair's two elements
        const int64_t second = s.interleaved ? first + 1 : first + half;
        const double scale = std::fabs(x0[size_t(base + first)]) + std::fabs(x0[size_t(base + second)]);
        ASSERT_NEAR(got[i], expected[i], 4 * kF32Eps * scale) << "t " << t << " d " << d;
      }
  }
}

TEST_F(CudaKernels, KvStoreWritesOnlyTheNewRows) {
  const int64_t n_ctx = 40, kv_dim = 24, pos0 = 13, n_tokens = 17;
  const auto k = test::random_floats(n_tokens * kv_dim, 13), v = test::random_floats(n_tokens * kv_dim, 14);
  const std::vector<float> before(size_t(n_ctx * kv_dim), -7.0f);
  DeviceArray<float> k_cache(before), v_cache(before), dk(k), dv(v);
  cuda::kv_store(k_cache.get(), v_cache.get(), dk.get(), dv.get(), n_tokens, kv_dim, pos0, stream_);
  sync();
  const auto got_k = k_cache.download(), got_v = v_cache.download();
  for (int64_t i = 0; i < n_ctx * kv_dim; ++i) {
    const int64_t row = i / kv_dim;
    const bool written = row >= pos0 && row < pos0 + n_tokens;
    ASSERT_EQ(got_k[size_t(i)], written ? k[size_t(i - pos0 * kv_dim)] : -7.0f) << i;
    ASSERT_EQ(got_v[size_t(i)], written ? v[size_t(i - pos0 * kv_dim)] : -7.0f) << i;
  }
}

// ---- Attention --------------------------------------------------------------------------------------

TEST_F(CudaKernels, AttentionMatchesExactSoftmaxWithGqaAndWindow) {
  struct Shape {
    int64_t n_tokens, pos0, n_head, n_head_kv, head_dim, window;
  };
  // Prefill from 0; decode far past one key tile (64); a window smaller than a tile; a window
  // spanning tiles with 4 query heads per kv head; odd head_dim.
  for (const Shape s : {Shape{17, 0, 4, 2, 64, 0}, Shape{1, 150, 2, 2, 16, 0}, Shape{3, 70, 3, 1, 40, 5},
                        Shape{64, 130, 8, 2, 128, 50}, Shape{3, 9, 2, 1, 33, 0}}) {
    const int64_t n_ctx = s.pos0 + s.n_tokens, q_dim = s.n_head * s.head_dim, kv_dim = s.n_head_kv * s.head_dim;
    const auto q = test::random_floats(s.n_tokens * q_dim, 15, -2.0f, 2.0f);
    const auto k = test::random_floats(n_ctx * kv_dim, 16, -2.0f, 2.0f);
    const auto v = test::random_floats(n_ctx * kv_dim, 17);
    DeviceArray<float> dq(q), dk(k), dv(v), out(size_t(s.n_tokens * q_dim));
    cuda::attention(out.get(), dq.get(), dk.get(), dv.get(), s.n_tokens, s.pos0, s.n_head, s.n_head_kv, s.head_dim,
                    s.window, float(1.0 / std::sqrt(double(s.head_dim))), stream_);
    sync();
    const auto got = out.download();
    const int64_t group = s.n_head / s.n_head_kv;
    const double scale = 1.0 / std::sqrt(double(s.head_dim));
    for (int64_t t = 0; t < s.n_tokens; ++t) {
      // src/model/attention.cpp's key range, computed in double.
      const int64_t last = s.pos0 + t, first = s.window > 0 ? std::max<int64_t>(0, last - s.window + 1) : 0;
      for (int64_t h = 0; h < s.n_head; ++h) {
        const int64_t kv_offset = (h / group) * s.head_dim;
        std::vector<double> p;
        double max_score = -INFINITY, sum = 0.0;
        for (int64_t key = first; key <= last; ++key) {
          double dot = 0.0;
          for (int64_t d = 0; d < s.head_dim; ++d)
            dot += double(q[size_t(t * q_dim + h * s.head_dim + d)]) * k[size_t(key * kv_dim + kv_offset + d)];
          p.push_back(dot * scale);
          max_score = std::max(max_score, p.back());
        }
        for (auto& value : p) sum += value = std::exp(value - max_score);
        for (int64_t d = 0; d < s.head_dim; ++d) {
          double expected = 0.0;
          for (int64_t key = first; key <= last; ++key)
            expected += p[size_t(key - first)] / sum * v[size_t(key * kv_dim + kv_offset + d)];
          // |v| <= 1, so the output's f32 error is the weights' relative error: the scores carry
          // about head_dim u |q||k| (|score| <= 4 sqrt(head_dim)), exp adds a few ulp, and the
          // running sum and the weighted sum of n keys n u each: 4 (head_dim + n_keys + 16) u.
          const double tol = 4.0 * double(s.head_dim + (last - first + 1) + 16) * kF32Eps;
          ASSERT_NEAR(got[size_t(t * q_dim + h * s.head_dim + d)], expected, tol)
              << "tokens " << s.n_tokens << " pos0 " << s.pos0 << " t " << t << " h " << h << " d " << d;
        }
      }
    }
  }
  EXPECT_THROW(cuda::attention(nullptr, nullptr, nullptr, nullptr, 1, 0, 3, 2, 8, 0, 1.0f, stream_), Error);
}

// ---- Matrix products ---------------------------------------------------------------------------------

TEST_F(CudaKernels, MatvecMatchesCpuMatmulOverDtypesAndShapes) {
  ScalarIsa scalar;
  for (const DType dtype : kWeightDtypes) {
    for (const int64_t cols : {1, 31, 64, 130, 1024}) {
      for (const int64_t rows : {1, 33, 100}) {
        // Offset 0 takes the vectorized path when cols % 4 == 0; offset 1 forces the scalar path.
        for (const int64_t offset : {0, 1}) {
          const DeviceWeights w(dtype, rows, cols, uint32_t(rows * cols), offset);
          for (const int64_t n : {1, 3, 17, 64}) {
            const auto x = test::random_floats(n * cols, uint32_t(n));
            std::vector<float> expected(static_cast<size_t>(n * rows));
            ops::matmul_rows(expected.data(), x.data(), w.host.view(), n, 0, rows);
            DeviceArray<float> dx(x), y(size_t(n * rows));
            cuda::matvec(y.get(), dx.get(), w.view(), n, stream_);
            sync();
            expect_products_close(y.download(), expected, abs_products(w.host.values, x, n, rows, cols), cols,
                                  std::string(dtype_name(dtype)) + " rows " + std::to_string(rows) + " cols " +
                                      std::to_string(cols) + " n " + std::to_string(n) + " offset " +
                                      std::to_string(offset));
          }
        }
      }
    }
  }
}

TEST_F(CudaKernels, BlasGemmMatchesCpuMatmul) {
  ScalarIsa scalar;
  cuda::Blas blas;
  for (const DType dtype : kWeightDtypes) {
    for (const int64_t n : {1, 17, 64}) {
      const int64_t rows = 97, cols = 130;
      const DeviceWeights w(dtype, rows, cols, 20);
      const auto x = test::random_floats(n * cols, 21);
      // The reference sees x as cuBLAS does: hi + lo in the weight dtype (split_f32), which differs
      // from x by about 2^-17 relative, well inside the bound below.
      auto x_split = x;
      if (dtype != DType::kF32) {
        for (auto& v : x_split) {
          uint16_t hi = 0, lo = 0;
          cuda::dm::split_f32(v, dtype == DType::kF16, hi, lo);
          v = dtype == DType::kF16 ? f16_to_f32(hi) + f16_to_f32(lo) : bf16_to_f32(hi) + bf16_to_f32(lo);
        }
      }
      std::vector<float> expected(static_cast<size_t>(n * rows));
      ops::matmul_rows(expected.data(), x_split.data(), w.host.view(), n, 0, rows);
      DeviceArray<float> dx(x), y(size_t(n * rows));
      DeviceArray<uint16_t> converted(size_t(2 * n * cols));
      blas.gemm(y.get(), dx.get(), w.view(), n, converted.get(), stream_);
      sync();
      // Products of two halves are exact in f32 and the accumulation is f32 (no TF32 for F32
      // weights); the hi and lo products are two sums of `cols` terms, so the bound of 2 * cols holds.
      expect_products_close(y.download(), expected, abs_products(w.host.values, x_split, n, rows, cols), 2 * cols,
                            std::string(dtype_name(dtype)) + " n " + std::to_string(n));
    }
  }
}

// ---- MoE ---------------------------------------------------------------------------------------------

// Three experts of different row counts (1, 9: more than a group of 8, 4); rows 0, 15 and 16 belong
// to no task and must stay untouched.
TEST_F(CudaKernels, MoeGateUpAndDownMatchCpuExperts) {
  ScalarIsa scalar;
  constexpr int64_t kRows = 17;
  const std::vector<std::pair<int32_t, int32_t>> ranges = {{1, 2}, {2, 11}, {11, 15}};
  for (const DType dtype : kWeightDtypes) {
    for (const auto& [n_embd, n_ff] : {std::pair<int64_t, int64_t>{64, 96}, std::pair<int64_t, int64_t>{33, 50}}) {
      std::vector<std::unique_ptr<DeviceWeights>> gate, up, down;
      std::vector<cuda::ExpertTask> tasks;
      for (int e = 0; e < 3; ++e) {
        // Expert 2's gate and down start one element off alignment: the scalar load path.
        gate.push_back(std::make_unique<DeviceWeights>(dtype, n_ff, n_embd, uint32_t(100 + e), e == 2 ? 1 : 0));
        up.push_back(std::make_unique<DeviceWeights>(dtype, n_ff, n_embd, uint32_t(200 + e)));
        down.push_back(std::make_unique<DeviceWeights>(dtype, n_embd, n_ff, uint32_t(300 + e), e == 2 ? 1 : 0));
        tasks.push_back({gate.back()->data(), up.back()->data(), down.back()->data(), ranges[size_t(e)].first,
                         ranges[size_t(e)].second});
      }
      DeviceArray<cuda::ExpertTask> d_tasks(tasks);
      const auto x = test::random_floats(kRows * n_embd, 22);
      const auto h_in = test::random_floats(kRows * n_ff, 23);
      const std::vector<float> sentinel_h(size_t(kRows * n_ff), 5.0f), sentinel_y(size_t(kRows * n_embd), 5.0f);
      DeviceArray<float> dx(x), dh_in(h_in), h(sentinel_h), y(sentinel_y);
      cuda::moe_gate_up(h.get(), dx.get(), d_tasks.get(), 3, dtype, n_embd, n_ff, stream_);
      cuda::moe_down(y.get(), dh_in.get(), d_tasks.get(), 3, dtype, n_embd, n_ff, stream_);
      sync();
      const auto got_h = h.download(), got_y = y.download();
      const std::string what = std::string(dtype_name(dtype)) + " n_embd " + std::to_string(n_embd);
      for (int64_t r = 0; r < kRows; ++r) {
        int e = -1;
        for (int i = 0; i < 3; ++i)
          if (r >= ranges[size_t(i)].first && r < ranges[size_t(i)].second) e = i;
        if (e < 0) {
          for (int64_t f = 0; f < n_ff; ++f) ASSERT_EQ(got_h[size_t(r * n_ff + f)], 5.0f) << what << " row " << r;
          for (int64_t i = 0; i < n_embd; ++i) ASSERT_EQ(got_y[size_t(r * n_embd + i)], 5.0f) << what << " row " << r;
          continue;
        }
        const std::vector<float> x_row(x.begin() + r * n_embd, x.begin() + (r + 1) * n_embd);
        std::vector<float> g(static_cast<size_t>(n_ff)), u(static_cast<size_t>(n_ff)),
            expected_h(static_cast<size_t>(n_ff));
        ops::matmul_rows(g.data(), x_row.data(), gate[size_t(e)]->host.view(), 1, 0, n_ff);
        ops::matmul_rows(u.data(), x_row.data(), up[size_t(e)]->host.view(), 1, 0, n_ff);
        ops::silu_mul(expected_h.data(), g.data(), u.data(), n_ff);
        const auto g_mag = abs_products(gate[size_t(e)]->host.values, x_row, 1, n_ff, n_embd);
        const auto u_mag = abs_products(up[size_t(e)]->host.values, x_row, 1, n_ff, n_embd);
        for (int64_t f = 0; f < n_ff; ++f) {
          // h = silu(g) u: an error dg in g moves h by at most 1.1 |u| dg (|silu'| < 1.1), an error du
          // by |silu(g)| du; the dots are within 2 n u of each other, the rest within 16 ulp.
          const double dg = double(2 * n_embd + 2) * kF32Eps * g_mag[size_t(f)];
          const double du = double(2 * n_embd + 2) * kF32Eps * u_mag[size_t(f)];
          const double silu_g = std::fabs(double(g[size_t(f)]) / (1.0 + std::exp(-double(g[size_t(f)]))));
          const double tol = 1.1 * std::fabs(u[size_t(f)]) * dg + silu_g * du +
                             16 * kF32Eps * std::fabs(expected_h[size_t(f)]) + 1e-30;
          ASSERT_NEAR(got_h[size_t(r * n_ff + f)], expected_h[size_t(f)], tol) << what << " row " << r << " f " << f;
        }
        const std::vector<float> h_row(h_in.begin() + r * n_ff, h_in.begin() + (r + 1) * n_ff);
        std::vector<float> expected_y(static_cast<size_t>(n_embd));
        ops::matmul_rows(expected_y.data(), h_row.data(), down[size_t(e)]->host.view(), 1, 0, n_embd);
        const std::vector<float> got_row(got_y.begin() + r * n_embd, got_y.begin() + (r + 1) * n_embd);
        expect_products_close(got_row, expected_y, abs_products(down[size_t(e)]->host.values, h_row, 1, n_embd, n_ff),
                              n_ff, what + " down row " + std::to_string(r));
      }
    }
  }
}

TEST_F(CudaKernels, RouterTopKMatchesCpuRouterWithTies) {
  ScalarIsa scalar;
  std::mt19937 rng(24);
  for (const int64_t n_expert : {8, 60, 256}) {
    for (const int64_t k : {1, 2, 8}) {
      for (const int64_t n_tokens : {1, 3, 17, 64}) {
        // Logits on a grid of 0.25: equal logits give bit-identical probabilities on both sides
        // (ties), different ones differ by a factor e^0.25, far beyond any rounding difference, so
        // the selection must agree exactly.
        std::uniform_int_distribution<int> level(0, 6);
        std::vector<float> logits(static_cast<size_t>(n_tokens * n_expert));
        for (auto& v : logits) v = float(level(rng)) * 0.25f;
        for (const bool norm : {false, true}) {
          DeviceArray<float> d_logits(logits), d_probs(logits.size()), d_weights(size_t(n_tokens * k));
          DeviceArray<int32_t> d_ids(size_t(n_tokens * k));
          cuda::router_topk(d_ids.get(), d_weights.get(), d_probs.get(), d_logits.get(), n_tokens, n_expert, k, norm,
                            stream_);
          // probs aliasing logits, as the contract allows.
          DeviceArray<float> in_place(logits), w2(size_t(n_tokens * k));
          DeviceArray<int32_t> ids2(size_t(n_tokens * k));
          cuda::router_topk(ids2.get(), w2.get(), in_place.get(), in_place.get(), n_tokens, n_expert, k, norm, stream_);
          sync();
          const auto probs = d_probs.download(), weights = d_weights.download();
          const auto ids = d_ids.download();
          EXPECT_EQ(in_place.download(), probs);
          EXPECT_EQ(ids2.download(), ids);
          EXPECT_EQ(w2.download(), weights);
          for (int64_t t = 0; t < n_tokens; ++t) {
            std::vector<float> expected_probs(logits.begin() + t * n_expert, logits.begin() + (t + 1) * n_expert);
            ops::softmax(expected_probs.data(), n_expert);
            // The sums of exps (positive terms) are within n u relative of exact on each side, the
            // two exps within 3 ulp (6 u) of each other, the reciprocal and multiply add 2 u per
            // side: (2 n + 16) u relative, doubled for margin.
            const double prob_rel = double(2 * (2 * n_expert + 16)) * kF32Eps;
            for (int64_t e = 0; e < n_expert; ++e)
              ASSERT_NEAR(probs[size_t(t * n_expert + e)], expected_probs[size_t(e)],
                          prob_rel * expected_probs[size_t(e)]);
            std::vector<int32_t> expected_ids(static_cast<size_t>(k));
            std::vector<float> expected_w(static_cast<size_t>(k));
            ops::top_k(expected_ids.data(), expected_w.data(), expected_probs.data(), n_expert, k, norm);
            for (int64_t j = 0; j < k; ++j) {
              ASSERT_EQ(ids[size_t(t * k + j)], expected_ids[size_t(j)])
                  << "n " << n_expert << " k " << k << " t " << t;
              // Renormalization adds a sum of k positive terms and a divide: (2 k + 2) u more.
              ASSERT_NEAR(weights[size_t(t * k + j)], expected_w[size_t(j)],
                          (prob_rel + double(2 * k + 2) * kF32Eps) * expected_w[size_t(j)]);
            }
          }
        }
      }
    }
  }
  EXPECT_THROW(cuda::router_topk(nullptr, nullptr, nullptr, nullptr, 1, 4, 5, false, stream_), Error);
}

TEST_F(CudaKernels, MoeCombineMatchesCpuSoftGatedFallback) {
  ScalarIsa scalar;
  std::mt19937 rng(25);
  for (const int64_t k : {1, 2, 8}) {
    const int64_t n_tokens = 17, n_embd = 100, n_rows = n_tokens * k;
    const auto y = test::random_floats(n_rows * n_embd, 26);
    const auto shared = test::random_floats(n_tokens * n_embd, 27);
    const auto gate_logits = test::random_floats(n_tokens, 28, -3.0f, 3.0f);
    std::vector<int32_t> row(static_cast<size_t>(n_rows));
    std::vector<float> weight = test::random_floats(n_rows, 29, 0.05f, 1.0f);
    std::vector<uint8_t> missing(static_cast<size_t>(n_rows));
    for (int64_t i = 0; i < n_rows; ++i) row[size_t(i)] = int32_t((i * 7) % n_rows);
    // Token 0: nothing missing; token 1: everything missing; the rest: random.
    for (int64_t i = 0; i < n_rows; ++i) missing[size_t(i)] = i < k ? 0 : i < 2 * k ? 1 : uint8_t(rng() % 3 == 0);
    DeviceArray<float> dy(y), d_shared(shared), d_logits(gate_logits), d_weight(weight), out(size_t(n_tokens * n_embd));
    DeviceArray<int32_t> d_row(row);
    DeviceArray<uint8_t> d_missing(missing);
    for (int mode = 0; mode < 3; ++mode) {  // no shared expert, ungated shared, gated shared
      cuda::moe_combine(out.get(), dy.get(), d_row.get(), d_weight.get(), d_missing.get(),
                        mode == 0 ? nullptr : d_shared.get(), mode == 2 ? d_logits.get() : nullptr, n_tokens, k, n_embd,
                        stream_);
      sync();
      const auto got = out.download();
      for (int64_t t = 0; t < n_tokens; ++t) {
        const auto expected = test::reference_combine(
            y, n_embd, row.data() + t * k, weight.data() + t * k, missing.data() + t * k, k,
            mode == 0 ? nullptr : shared.data() + t * n_embd, mode == 2 ? gate_logits.data() + t : nullptr);
        // The factor the routed sum is scaled by without a shared expert (total / available mass).
        double total = 0.0, available = 0.0;
        for (int64_t j = 0; j < k; ++j) {
          total += weight[size_t(t * k + j)];
          if (!missing[size_t(t * k + j)]) available += weight[size_t(t * k + j)];
        }
        const double routed_scale = mode == 0 && available > 0.0 ? total / available : 1.0;
        for (int64_t i = 0; i < n_embd; ++i) {
          // Same order of operations; the device may fuse each multiply-add (1 u of the running
          // magnitude per step), scales the routed sum by the same rounded factor, and its expf (the
          // shared gate) is within 2 ulp: 4 (k + 8) u of the terms' magnitude covers all of it. The
          // shared term's coefficient (gate + missing mass) is at most k + 1.
          double magnitude = mode == 0 ? 0.0 : std::fabs(double(shared[size_t(t * n_embd + i)])) * double(k + 1);
          for (int64_t j = 0; j < k; ++j)
            magnitude += routed_scale *
                         std::fabs(double(weight[size_t(t * k + j)]) * y[size_t(row[size_t(t * k + j)] * n_embd + i)]);
          ASSERT_NEAR(got[size_t(t * n_embd + i)], expected[size_t(i)], 4.0 * double(k + 8) * kF32Eps * magnitude)
              << "k " << k << " mode " << mode << " t " << t << " i " << i;
        }
      }
    }
  }
}

TEST_F(CudaKernels, LaunchersRejectUnsupportedWeightDtypes) {
  const WeightView w{nullptr, DType::kI32, 4, 4};
  EXPECT_THROW(cuda::matvec(nullptr, nullptr, w, 1, stream_), Error);
  EXPECT_THROW(cuda::embed_rows(nullptr, w, nullptr, 1, stream_), Error);
  EXPECT_THROW(cuda::moe_gate_up(nullptr, nullptr, nullptr, 1, DType::kF64, 4, 4, stream_), Error);
}

}  // namespace
}  // namespace chronos
