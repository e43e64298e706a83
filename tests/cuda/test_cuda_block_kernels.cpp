// The CUDA kernels on GGUF's block-quantized weights (every row of block_types.h), each against the
// CPU on the same bytes: dequantize_rows and embed_rows bit for bit against ops::weight_row_to_f32,
// matvec (1..16 tokens), Blas::gemm's dequantized-tile path (40 tokens) and the MoE expert kernels
// against ops::matmul_rows over those exact weights within the f32 dot-product bound (the kernels
// multiply GGUF's weights by f32 activations; the CPU's 8-bit-activation mode is not the reference
// here). Rows start one byte off alignment too (an expert cache slot may put them anywhere). The
// IQ grid types, which Chronos does not quantize to, are tested on random blocks, and on the gguf
// fixtures whose blocks use every grid row. Skipped when no CUDA device is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "chronos/block_types.h"
#include "chronos/dtype.h"
#include "chronos/error.h"
#include "chronos/ops.h"
#include "chronos/quant.h"
#include "cuda/cuda_test_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/quant_fixture.h"
#include "kernels/test_util.h"

namespace chronos {
namespace {

using test::abs_products;
using test::DeviceArray;
using test::expect_products_close;
using test::kF32Eps;
using test::ScalarIsa;

// Every block type of the table: each has CUDA kernels (one without them would be refused by the
// launchers, and fail here).
constexpr auto kBlockDtypes = [] {
  std::array<DType, kNumBlockTypes> dtypes{};
  for (size_t i = 0; i < kNumBlockTypes; ++i) dtypes[i] = kBlockTypes[i].dtype;
  return dtypes;
}();

class CudaBlockKernels : public test::CudaStreamTest {};

// A quantized [rows, cols] matrix on the host and on the device (`offset` bytes past an aligned
// start), with the f32 value of every weight as the CPU dequantizes it.
struct BlockWeights {
  DType dtype;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // [rows, cols]
  DeviceArray<uint8_t> device;
  int64_t offset;

  BlockWeights(DType type, int64_t r, int64_t c, uint32_t seed, int64_t offset_bytes = 0)
      : dtype(type),
        rows(r),
        cols(c),
        bytes(size_t(r * dtype_row_bytes(type, c))),
        values(size_t(r * c)),
        device(bytes.size() + size_t(offset_bytes)),
        offset(offset_bytes) {
    // Quantized from random weights, or random valid blocks for the IQ grid types (test_util.h).
    bytes = test::make_quant_weights(dtype, rows, cols, seed).bytes;
    for (int64_t row = 0; row < rows; ++row) ops::weight_row_to_f32(values.data() + row * cols, host_view(), row);
    std::vector<uint8_t> padded(size_t(offset), 0);
    padded.insert(padded.end(), bytes.begin(), bytes.end());
    device.upload(padded);
  }
  WeightView host_view() const { return {bytes.data(), dtype, rows, cols}; }
  // The same weights as an F32 matrix: the reference products use it, so that they are the f32
  // products of GGUF's weights whatever activations ops::matmul pairs with block types.
  WeightView f32_view() const { return {values.data(), DType::kF32, rows, cols}; }
  WeightView view() const { return {device.get() + offset, dtype, rows, cols}; }
};

std::string describe(DType dtype, int64_t rows, int64_t cols, int64_t n, int64_t offset) {
  return std::string(dtype_name(dtype)) + " rows " + std::to_string(rows) + " cols " + std::to_string(cols) + " n " +
         std::to_string(n) + " offset " + std::to_string(offset);
}

// The kernels' weights are the CPU's exactly: any difference in a product is summation order only.
TEST_F(CudaBlockKernels, DequantizeRowsAndEmbedRowsAreBitExact) {
  for (const DType dtype : kBlockDtypes) {
    for (const int64_t offset : {0, 1}) {
      const BlockWeights w(dtype, 7, 512, 40, offset);
      DeviceArray<float> tile(size_t(4 * w.cols));
      cuda::dequantize_rows(tile.get(), w.view(), 2, 4, stream_);
      const std::vector<int32_t> ids = {3, 0, 6, 3};
      DeviceArray<int32_t> d_ids(ids);
      DeviceArray<float> embedded(ids.size() * size_t(w.cols));
      cuda::embed_rows(embedded.get(), w.view(), d_ids.get(), int64_t(ids.size()), stream_);
      sync();
      const auto got_tile = tile.download(), got_embedded = embedded.download();
      for (int64_t i = 0; i < 4 * w.cols; ++i)
        ASSERT_EQ(got_tile[size_t(i)], w.values[size_t(2 * w.cols + i)]) << dtype_name(dtype) << " tile " << i;
      for (size_t t = 0; t < ids.size(); ++t)
        for (int64_t i = 0; i < w.cols; ++i)
          ASSERT_EQ(got_embedded[t * size_t(w.cols) + size_t(i)], w.values[size_t(ids[t] * w.cols + i)])
              << dtype_name(dtype) << " token " << t << " i " << i;
    }
  }
}

TEST_F(CudaBlockKernels, MatvecMatchesCpuMatmulForOneToSixteenTokens) {
  ScalarIsa scalar;
  for (const DType dtype : kBlockDtypes) {
    const int64_t block = dtype_block_elements(dtype);
    // One block; a row that is not a multiple of the warp's 256-weight step; several steps.
    for (const int64_t cols : {block, block == 32 ? int64_t(96) : int64_t(512), int64_t(768)}) {
      for (const int64_t rows : {1, 37}) {
        // Offset 1: the weights a byte off alignment and x one float off (the scalar activation reads).
        for (const int64_t offset : {0, 1}) {
          const BlockWeights w(dtype, rows, cols, uint32_t(rows * cols), offset);
          for (int64_t n = 1; n <= 16; ++n) {
            const auto x = test::random_floats(n * cols, uint32_t(n));
            std::vector<float> expected(static_cast<size_t>(n * rows));
            ops::matmul_rows(expected.data(), x.data(), w.f32_view(), n, 0, rows);
            std::vector<float> x_padded(size_t(offset), 0.0f);
            x_padded.insert(x_padded.end(), x.begin(), x.end());
            DeviceArray<float> dx(x_padded), y(size_t(n * rows));
            cuda::matvec(y.get(), dx.get() + offset, w.view(), n, stream_);
            sync();
            expect_products_close(y.download(), expected, abs_products(w.values, x, n, rows, cols), cols,
                                  describe(dtype, rows, cols, n, offset));
          }
        }
      }
    }
  }
}

// Prefill's path: rows dequantized into an f32 tile, an f32 SGEMM per tile into its columns of y.
// Tiles of 5 rows (the last one of 2) and one tile holding the whole matrix.
TEST_F(CudaBlockKernels, BlasGemmOverDequantizedTilesMatchesCpuMatmul) {
  ScalarIsa scalar;
  cuda::Blas blas;
  const int64_t n = 40, rows = 37, cols = 512;
  for (const DType dtype : kBlockDtypes) {
    const BlockWeights w(dtype, rows, cols, 41, dtype == DType::kQ5_0 ? 1 : 0);
    const auto x = test::random_floats(n * cols, 42);
    std::vector<float> expected(static_cast<size_t>(n * rows));
    ops::matmul_rows(expected.data(), x.data(), w.f32_view(), n, 0, rows);
    for (const int64_t tile_floats : {5 * cols + 3, rows * cols}) {
      DeviceArray<float> dx(x), y(size_t(n * rows)), tile(static_cast<size_t>(tile_floats));
      blas.gemm(y.get(), dx.get(), w.view(), n, nullptr, tile.get(), tile_floats, stream_);
      sync();
      expect_products_close(y.download(), expected, abs_products(w.values, x, n, rows, cols), cols,
                            describe(dtype, rows, cols, n, 0) + " tile " + std::to_string(tile_floats));
    }
    // Without a tile (or with one shorter than a row) a block matrix is refused, not misread.
    EXPECT_THROW(blas.gemm(nullptr, nullptr, w.view(), n, nullptr, stream_), Error) << dtype_name(dtype);
    DeviceArray<float> short_tile(static_cast<size_t>(cols - 1));
    EXPECT_THROW(blas.gemm(nullptr, nullptr, w.view(), n, nullptr, short_tile.get(), cols - 1, stream_), Error);
  }
}

// Three experts of 1, 9 and 4 rows (rows 0, 15, 16 belong to none and stay untouched); gate/up
// rows of 256 in the type itself, down rows of 96 in its 32-weight fallback for the K types (as a
// pack stores them), so the two launches take different dtypes.
TEST_F(CudaBlockKernels, MoeGateUpAndDownMatchCpuExperts) {
  ScalarIsa scalar;
  constexpr int64_t kRows = 17, n_embd = 256, n_ff = 96;
  const std::vector<std::pair<int32_t, int32_t>> ranges = {{1, 2}, {2, 11}, {11, 15}};
  for (const DType dtype : kBlockDtypes) {
    const DType down_dtype = block_dtype_for_row(dtype, n_ff);
    std::vector<std::unique_ptr<BlockWeights>> gate, up, down;
    std::vector<cuda::ExpertTask> tasks;
    for (int e = 0; e < 3; ++e) {
      gate.push_back(std::make_unique<BlockWeights>(dtype, n_ff, n_embd, uint32_t(100 + e), e == 2 ? 1 : 0));
      up.push_back(std::make_unique<BlockWeights>(dtype, n_ff, n_embd, uint32_t(200 + e)));
      down.push_back(std::make_unique<BlockWeights>(down_dtype, n_embd, n_ff, uint32_t(300 + e), e == 2 ? 3 : 0));
      tasks.push_back({gate.back()->view().data, up.back()->view().data, down.back()->view().data,
                       ranges[size_t(e)].first, ranges[size_t(e)].second});
    }
    DeviceArray<cuda::ExpertTask> d_tasks(tasks);
    const auto x = test::random_floats(kRows * n_embd, 22);
    const auto h_in = test::random_floats(kRows * n_ff, 23);
    DeviceArray<float> dx(x), dh_in(h_in), h(std::vector<float>(size_t(kRows * n_ff), 5.0f)),
        y(std::vector<float>(size_t(kRows * n_embd), 5.0f));
    cuda::moe_gate_up(h.get(), dx.get(), d_tasks.get(), 3, dtype, n_embd, n_ff, stream_);
    cuda::moe_down(y.get(), dh_in.get(), d_tasks.get(), 3, down_dtype, n_embd, n_ff, stream_);
    sync();
    const auto got_h = h.download(), got_y = y.download();
    const std::string what = std::string(dtype_name(dtype)) + " / " + std::string(dtype_name(down_dtype));
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
      const auto ff_size = static_cast<size_t>(n_ff);
      std::vector<float> g(ff_size), u(ff_size), expected_h(ff_size);
      ops::matmul_rows(g.data(), x_row.data(), gate[size_t(e)]->f32_view(), 1, 0, n_ff);
      ops::matmul_rows(u.data(), x_row.data(), up[size_t(e)]->f32_view(), 1, 0, n_ff);
      ops::silu_mul(expected_h.data(), g.data(), u.data(), n_ff);
      const auto g_mag = abs_products(gate[size_t(e)]->values, x_row, 1, n_ff, n_embd);
      const auto u_mag = abs_products(up[size_t(e)]->values, x_row, 1, n_ff, n_embd);
      for (int64_t f = 0; f < n_ff; ++f) {
        // As in the float-weight MoE test: the dots' bound carried through silu(g) u, 16 ulp for the rest.
        const double dg = double(2 * n_embd + 2) * kF32Eps * g_mag[size_t(f)];
        const double du = double(2 * n_embd + 2) * kF32Eps * u_mag[size_t(f)];
        const double silu_g = std::fabs(double(g[size_t(f)]) / (1.0 + std::exp(-double(g[size_t(f)]))));
        const double tol =
            1.1 * std::fabs(u[size_t(f)]) * dg + silu_g * du + 16 * kF32Eps * std::fabs(expected_h[size_t(f)]) + 1e-30;
        ASSERT_NEAR(got_h[size_t(r * n_ff + f)], expected_h[size_t(f)], tol) << what << " row " << r << " f " << f;
      }
      const std::vector<float> h_row(h_in.begin() + r * n_ff, h_in.begin() + (r + 1) * n_ff);
      std::vector<float> expected_y(static_cast<size_t>(n_embd));
      ops::matmul_rows(expected_y.data(), h_row.data(), down[size_t(e)]->f32_view(), 1, 0, n_embd);
      const std::vector<float> got_row(got_y.begin() + r * n_embd, got_y.begin() + (r + 1) * n_embd);
      expect_products_close(got_row, expected_y, abs_products(down[size_t(e)]->values, h_row, 1, n_embd, n_ff), n_ff,
                            what + " down row " + std::to_string(r));
    }
  }
}

// The IQ fixtures (tests/fixtures/quant/random_iq*.bin) hold blocks whose grid indices cover every
// row of each grid and the gguf package's decoding of them: the kernels' tables are gguf's, row
// for row, and their weights gguf's bit for bit.
TEST_F(CudaBlockKernels, IqGridFixturesDequantizeAsGguf) {
  for (const char* type : {"iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m"}) {
    const test::QuantFixture f = test::load_fixture(test::fixture_path(std::string("random_") + type));
    ASSERT_FALSE(f.expected.empty()) << type;
    DeviceArray<uint8_t> bytes(f.quantized);
    DeviceArray<float> out(f.expected.size());
    cuda::dequantize_rows(out.get(), WeightView{bytes.get(), f.dtype, f.rows, f.cols}, 0, f.rows, stream_);
    sync();
    const auto got = out.download();
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(f.expected[i]))
          << type << " row " << int64_t(i) / f.cols << " col " << int64_t(i) % f.cols << ": " << got[i] << " vs "
          << f.expected[i];
  }
}

// Rows that are not whole blocks are bad input (a K type on a 96-wide row), named in an Error.
TEST_F(CudaBlockKernels, LaunchersRejectPartialBlocks) {
  const WeightView q4_k{nullptr, DType::kQ4_K, 4, 96};
  EXPECT_THROW(cuda::matvec(nullptr, nullptr, q4_k, 1, stream_), Error);
  EXPECT_THROW(cuda::embed_rows(nullptr, q4_k, nullptr, 1, stream_), Error);
  EXPECT_THROW(cuda::dequantize_rows(nullptr, q4_k, 0, 1, stream_), Error);
  EXPECT_THROW(cuda::moe_gate_up(nullptr, nullptr, nullptr, 1, DType::kQ6_K, 96, 4, stream_), Error);
  EXPECT_THROW(cuda::moe_down(nullptr, nullptr, nullptr, 1, DType::kQ2_K, 4, 96, stream_), Error);
  // dequantize_rows is for block types, within the matrix.
  EXPECT_THROW(cuda::dequantize_rows(nullptr, WeightView{nullptr, DType::kF16, 4, 32}, 0, 1, stream_), Error);
  EXPECT_THROW(cuda::dequantize_rows(nullptr, WeightView{nullptr, DType::kQ8_0, 4, 32}, 3, 2, stream_), Error);
  try {
    cuda::matvec(nullptr, nullptr, q4_k, 1, stream_);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q4_K"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace chronos
