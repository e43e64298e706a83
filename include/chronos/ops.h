// CPU ops: free functions over plain arrays; outputs first, inputs const, sizes explicit.
// Activations are f32; weight matrices stay in their checkpoint dtype (F32, F16, BF16) or a
// block-quantized type (chronos/quant.h) and are converted on the fly, accumulating in f32.
// Each op has a scalar reference in kernels/cpu and AVX2/AVX-512 versions chosen once at run time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "chronos/dtype.h"

namespace chronos {

class ThreadPool;

// A row-major weight matrix [rows, cols] as nn.Linear stores it: rows = out features,
// cols = in features, row r at data + r * dtype_row_bytes(dtype, cols). For a block type
// (Q8_0 ... Q6_K) cols must be a multiple of dtype_block_elements(dtype); the ops use the exact
// dequantized weights (dequantize_row) with f32 or 8-bit activations (ops::block_activation_mode).
//
// An F8_E4M3 matrix is block-scaled (FP8 checkpoints, DeepSeek-V3 style): element (r, c) is its FP8
// value times scale[(r / scale_rows) * ceil(cols / scale_cols) + c / scale_cols], rounded to BF16 as
// transformers dequantizes it. Only
// weight_row_to_f32 reads it (packing and load-time conversion); the ops refuse it.
struct WeightView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const float* scale = nullptr;  // F8_E4M3 only: [ceil(rows / scale_rows), ceil(cols / scale_cols)]
  int64_t scale_rows = 0, scale_cols = 0;
};

// Instruction set the kernels run with; kScalar is the reference.
enum class Isa { kScalar, kAvx2, kAvx512 };
Isa detect_isa();       // best the CPU supports
Isa active_isa();       // what the ops below use
void set_isa(Isa isa);  // for tests and benchmarks; clamps to detect_isa()
const char* isa_name(Isa isa);

namespace ops {

// y[n_tokens, w.rows] = x[n_tokens, w.cols] · wᵀ. n_tokens == 1 is the bandwidth-bound
// matrix-vector case; n_tokens > 1 is a real matrix-matrix product (each weight row is read
// once per block of tokens). Threads split the rows of w.
void matmul(float* y, const float* x, const WeightView& w, int64_t n_tokens, ThreadPool& pool);

// Same, single-threaded over rows [row_begin, row_end) of w; y keeps its full row stride
// w.rows. For callers that already run inside a pool task.
void matmul_rows(float* y, const float* x, const WeightView& w, int64_t n_tokens, int64_t row_begin, int64_t row_end);

// matmul_rows over activations prepared once for many calls (the MoE block's row chunks of one
// expert): prepare_activations writes x[n_tokens, w.cols] as the 8-bit activation blocks w's
// integer path reads (prepared_activation_bytes(w, n_tokens) bytes, 8-byte aligned; 0 when w
// takes the f32 path, and then nothing is written), and matmul_rows_prepared is matmul_rows with
// them: the same results, without quantizing x again. xq may serve every weight for which
// same_prepared_activations(w, w_prepared) holds; x is still given (the f32 path reads it).
int64_t prepared_activation_bytes(const WeightView& w, int64_t n_tokens);
void prepare_activations(void* xq, const float* x, const WeightView& w, int64_t n_tokens);
bool same_prepared_activations(const WeightView& a, const WeightView& b);
void matmul_rows_prepared(float* y, const float* x, const void* xq, const WeightView& w, int64_t n_tokens,
                          int64_t row_begin, int64_t row_end);

// Gives every thread of the pool its kernel buffers (f32 weight tiles, activation blocks) at
// a reserved size now. They otherwise grow on a thread's first use, which, with dynamic task
// scheduling, can come in any later step: a caller that needs steps to allocate nothing from
// the first one calls this first. Rows of up to 16384 columns (4-row tiles) fit the reserve.
void reserve_thread_buffers(ThreadPool& pool);

// How matmul multiplies block-type weights (Q8_0 ... Q6_K) by the f32 activations
// (docs/quantization.md has the measurements behind the default):
// - kF32: the exact dequantized weights times the f32 activations (f32 FMA).
// - kInt8: each activation row rounded per block to 8 bits (a 32-block with an f32 scale for the
//   32-weight types, a 256-block with an f32 scale and 16-element sums for the K types), once per
//   matmul / matmul_rows call (or prepare_activations), then integer dot products and one f32
//   step per block. Faster, with a relative error of about 0.5% on the product. Bit-identical
//   across ISAs, thread counts and batch sizes, as kF32 is.
// F32/F16 weights always take the f32 path, BF16 weights Bf16ActivationMode's. The initial mode
// is kInt8 unless the environment variable CHRONOS_BLOCK_ACTIVATIONS is "f32" ("int8" is also
// accepted; anything else is an Error at first use).
enum class BlockActivationMode { kF32, kInt8 };
void set_block_activation_mode(BlockActivationMode mode);  // process-wide, as set_isa
BlockActivationMode block_activation_mode();
const char* block_activation_mode_name(BlockActivationMode mode);

// How matmul multiplies BF16 weights:
// - kF32: the weights widened to f32 exactly, times the f32 activations (f32 FMA); every CPU.
// - kBf16: each activation row rounded to bf16 (nearest even) once per matmul / matmul_rows call
//   (or prepare_activations), then vdpbf16ps straight from the stored weights: about 2x the f32
//   path's prefill. Only where the CPU has AVX512_BF16; elsewhere BF16 weights take kF32 in
//   either mode. Bit-identical across thread counts and batch sizes (a token alone or in a batch),
//   as kF32 is; the rounding's effect on quality is measured in docs/prefill.md.
// The initial mode is kF32, which keeps a BF16 model's logits equal to transformers' float32 run,
// unless the environment variable CHRONOS_BF16_ACTIVATIONS is "bf16" (what llama.cpp does to the
// activations of BF16 weights; "f32" is also accepted, anything else is an Error at first use).
enum class Bf16ActivationMode { kF32, kBf16 };
void set_bf16_activation_mode(Bf16ActivationMode mode);  // process-wide, as set_isa
Bf16ActivationMode bf16_activation_mode();

// Copies row `row` of w into out[w.cols] as f32 (embedding lookup).
void weight_row_to_f32(float* out, const WeightView& w, int64_t row);

// y[n] = x[n] * rsqrt(mean(x^2) + eps) * weight[n]; y may alias x.
void rmsnorm(float* y, const float* x, const float* weight, int64_t n, float eps);

// x[n] = softmax(x[n]) in place, max-subtracted.
void softmax(float* x, int64_t n);

// out[n] = silu(gate[n]) * up[n]; out may alias gate or up.
void silu_mul(float* out, const float* gate, const float* up, int64_t n);

float dot(const float* a, const float* b, int64_t n);

// y[n] += alpha * x[n]
void axpy(float* y, float alpha, const float* x, int64_t n);

// Many short dots and axpys over rows `stride` floats apart (attention's keys and values): the
// same kernel calls as dot / axpy one row at a time, in row order, with the kernel table looked up
// once (per call it cost 6% of a 512-token prefill's attention-heavy layers).
// out[j] = dot(q, rows + j * stride, n) * scale for j < count.
void dot_rows(float* out, const float* q, const float* rows, int64_t stride, int64_t count, int64_t n, float scale);
// y[n] += alpha[j] * rows[j * stride ..] for j = 0 .. count - 1, in that order.
void axpy_rows(float* y, const float* alpha, const float* rows, int64_t stride, int64_t count, int64_t n);

// True when none of the n values is NaN or Inf.
bool all_finite(const float* x, int64_t n);

// The router's choice: ids/weights = the k largest of probs[n] in descending order, ties (and
// NaN) to the lower index; weights renormalized to sum 1 when `normalize` (norm_topk_prob).
void top_k(int32_t* ids, float* weights, const float* probs, int64_t n, int64_t k, bool normalize);

// Rotate-half RoPE on one head: pairs (i, i + n_rot/2), the GPT-NeoX convention HF uses; cos/sin
// hold n_rot/2 values for the token's position.
void rope_head(float* x, const float* cos, const float* sin, int64_t n_rot);
// The same rotation on adjacent pairs: (x[2i], x[2i+1]) turns by angle i (DeepSeek's interleaved
// RoPE).
void rope_head_interleaved(float* x, const float* cos, const float* sin, int64_t n_rot);

// A [rows, cols] weight converted to `target` (rows quantized one by one for a block type, after
// block_dtype_for_row; any readable type, F8_E4M3 with its scales included, through
// weight_row_to_f32): the returned view points into `storage`, or is `weight` itself when it
// already has that type. Rows are converted in parallel on `pool` when given; the bytes do not
// depend on it.
WeightView convert_weight(const WeightView& weight, DType target, std::vector<std::byte>& storage,
                          ThreadPool* pool = nullptr);

}  // namespace ops
}  // namespace chronos
