// CUDA kernels: one op per .cu file, each with a host launcher that queues the op on an explicit
// stream and returns without synchronizing. Pointers are device memory unless a parameter says
// otherwise; activations are f32, weights f32/f16/bf16 or a GGUF block type (WeightView with a
// device `data`; a block row is dequantized exactly, as dequantize_row does, and must hold whole
// blocks), and every reduction accumulates in f32. The CPU ops in include/chronos/ops.h and src/model are the
// reference each kernel is tested against (tests/cuda).
//
// Launchers check the launch (cudaGetLastError) and throw chronos::Error naming the op; they do
// not check the kernel's completion (that would need a synchronize).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "chronos/ops.h"  // WeightView, DType
#include "kernels/delta_net_layout.h"
#include "kernels/router_select.h"

namespace chronos::cuda {

// out[t, :] = row ids[t] of `table` ([n_vocab, n_embd]) as f32. ids: device, [n_tokens].
void embed_rows(float* out, const WeightView& table, const int32_t* ids, int64_t n_tokens, cudaStream_t stream);

// out[r, :] = in[r, :] / sqrt(mean(in[r, :]^2) + eps) * weight, for `rows` rows of `dim`
// floats spaced `stride` floats apart (in and out alike; they may alias). Per-head q/k norm
// is rows = tokens * heads, dim = stride = head_dim.
void rmsnorm(float* out, const float* in, const float* weight, int64_t rows, int64_t dim, int64_t stride, float eps,
             cudaStream_t stream);

// x[r, :] += bias for `rows` rows of `dim`.
void add_bias(float* x, const float* bias, int64_t rows, int64_t dim, cudaStream_t stream);

// x[i] = clamp(x[i], -limit, limit) (OLMoE clip_qkv).
void clamp(float* x, int64_t n, float limit, cudaStream_t stream);

// x[i] += y[i] (the residual stream).
void add(float* x, const float* y, int64_t n, cudaStream_t stream);

// out[i] = silu(gate[i]) * up[i]; out may alias gate.
void silu_mul(float* out, const float* gate, const float* up, int64_t n, cudaStream_t stream);

// Rotate-half (GPT-NeoX) RoPE in place on n_heads heads of head_dim for each of n_tokens tokens,
// token t at position pos0 + t; row t starts at x + t * row_stride. Only the first n_rot
// dimensions of a head rotate (pairs i, i + n_rot/2; with `interleaved`, pairs 2i, 2i + 1).
// cos/sin: [n_ctx, n_rot/2], the tables the CPU forward builds.
void rope(float* x, const float* cos, const float* sin, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
          int64_t n_rot, int64_t row_stride, int64_t pos0, bool interleaved, cudaStream_t stream);

// Copies k, v ([n_tokens, kv_dim]) to rows pos0 .. pos0 + n_tokens - 1 of one layer's caches
// ([n_ctx, kv_dim] each).
void kv_store(float* k_cache, float* v_cache, const float* k, const float* v, int64_t n_tokens, int64_t kv_dim,
              int64_t pos0, cudaStream_t stream);

// Each of rows * heads heads of src holds [a part (width), b part (width)]: a and b [rows, heads *
// width] get them (a gated attention's queries and gates, q_proj's output).
void split_heads(float* a, float* b, const float* src, int64_t rows, int64_t heads, int64_t width, cudaStream_t stream);
// y[i] *= sigmoid(gate[i]).
void sigmoid_mul(float* y, const float* gate, int64_t n, cudaStream_t stream);

// Its small weights, device f32: conv [conv_dim, kernel], a_log and dt_bias [v_heads], norm [v_dim].
struct DeltaNetWeights {
  const float* conv;
  const float* a_log;
  const float* dt_bias;
  const float* norm;
};
// The Gated DeltaNet (DeviceOps::gated_delta_net) over n_rows consecutive rows of one sequence,
// the first at position pos0 (0: its states start from zero), its inputs where `layout` says
// (kernels/delta_net_layout.h): qkv the rows of in_proj_qkvz or in_proj_qkv, z in_proj_z's or null
// (inside qkvz), b in_proj_ba's (a null) or in_proj_b's with a in_proj_a's; conv_state [kernel - 1,
// conv_dim] and recurrent_state [v_heads, k_dim, v_dim] the sequence's, updated; conv_out [n_rows,
// conv_dim] scratch; out [n_rows, v_heads * v_dim].
void gated_delta_net(float* out, float* conv_out, const float* qkv, const float* z, const float* b, const float* a,
                     const DeltaNetWeights& w, float* conv_state, float* recurrent_state, int64_t n_rows, int64_t pos0,
                     const DeltaNetLayout& layout, int64_t kernel_width, float eps, cudaStream_t stream);

// Causal grouped-query attention for n_tokens queries at positions pos0 + t over one layer's
// caches (keys 0 .. pos0 + t, or the last `window` of them when window > 0). q, out:
// [n_tokens, n_head * head_dim]; caches [n_ctx, n_head_kv * head_dim]; query head h reads kv
// head h / (n_head / n_head_kv); scores scaled by `scale`; softmax in f32 with a
// running max (no score buffer the size of the context). Serves prefill and decode. sinks
// [n_head], when not null: head h's softmax has one more logit, sinks[h], without a value (gpt-oss).
void attention(float* out, const float* q, const float* k_cache, const float* v_cache, int64_t n_tokens, int64_t pos0,
               int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t window, float scale, cudaStream_t stream,
               const float* sinks = nullptr);

// Multi-head latent attention, absorbed (the CPU's CpuOps::attend_latent), for n_tokens rows at
// positions pos0 + t of one sequence: stores each row's latent [n_tokens, rank] and rotary key
// [n_tokens, rope] into cache rows [rank | rope] (cache: [n_ctx, rank + rope]); q_latent
// [n_tokens, n_head, rank + rope] = [uk_h q_nope | q_rot] per head (q [n_tokens, n_head * (nope +
// rope)], uk [n_head, rank, nope]); o_latent [n_tokens, n_head, rank] = the softmax over the cached
// rows up to each row's position (scores scaled by `scale`) of their latents; out [n_tokens, n_head *
// v_dim] = uv_h o_latent per head (uv [n_head, v_dim, rank]). q_latent and o_latent are the
// caller's scratch.
void latent_attention(float* out, const float* q, const float* latent, const float* k_rot, float* cache,
                      float* q_latent, float* o_latent, const float* uk, const float* uv, int64_t n_tokens,
                      int64_t pos0, int64_t n_head, int64_t rank, int64_t rope, int64_t nope, int64_t v_dim,
                      float scale, cudaStream_t stream);

// y[t, :] = W x[t, :] for t < n_tokens: y [n_tokens, w.rows], x [n_tokens, w.cols]. Tuned for
// the small batches of decode (each weight row is read once per 8 tokens); prefill's large
// products go through Blas::gemm.
void matvec(float* y, const float* x, const WeightView& w, int64_t n_tokens, cudaStream_t stream);

// out[r, :] = row row_begin + r of the block-quantized `w` as f32 for r < n_rows (out: [n_rows,
// w.cols]), bit for bit dequantize_row's values. Throws for a non-block dtype.
void dequantize_rows(float* out, const WeightView& w, int64_t row_begin, int64_t n_rows, cudaStream_t stream);

// The group-limited routers (kernels/router_select.h), one thread per token: scores [n_tokens,
// n_expert] logits in, sigmoids (softmax probabilities) out; bias [n_expert] or null.
void router_group(int32_t* ids, float* weights, float* scores, const float* bias, int64_t n_tokens,
                  const GroupRouter& router, cudaStream_t stream);
// Per token: probs = softmax(logits[t, :n_expert]); ids/weights = the k largest probabilities in
// descending order, ties to the lower expert index; weights renormalized to sum 1 when
// norm_topk. probs may alias logits. ids, weights: [n_tokens, k].
void router_topk(int32_t* ids, float* weights, float* probs, const float* logits, int64_t n_tokens, int64_t n_expert,
                 int64_t k, bool norm_topk, cudaStream_t stream);

// dst[r, :] = src[rows[r], :] for r < n_rows, rows of `dim` floats (grouping tokens by expert).
void gather_rows(float* dst, const float* src, const int32_t* rows, int64_t n_rows, int64_t dim, cudaStream_t stream);

// One routed expert's share of a grouped MoE product: rows row_begin .. row_end - 1 of the
// grouped activations go through this expert's weights (device pointers, row-major, the layer's
// expert dtype: gate/up [n_ff, n_embd], down [n_embd, n_ff]).
struct ExpertTask {
  const void* gate;
  const void* up;
  const void* down;
  int32_t row_begin;
  int32_t row_end;
  // The expert's projection biases (gpt-oss), device [n_ff], [n_ff], [n_embd]; null without.
  const float* gate_bias = nullptr;
  const float* up_bias = nullptr;
  const float* down_bias = nullptr;
};

// All experts of one wave in one launch each: h[r, :] = silu(x[r] Wg^T) * (x[r] Wu^T)
// ([rows, n_ff]) for every row r of every task, then y[r, :] = h[r] Wd^T ([rows, n_embd]), each
// product plus the task's bias when it has one. swiglu_limit > 0: gpt-oss's clamped SwiGLU
// (device_math.h clamped_swiglu_value) instead of silu(gate) * up.
// tasks: device array of n_tasks. Rows not covered by a task are left untouched.
void moe_gate_up(float* h, const float* x, const ExpertTask* tasks, int32_t n_tasks, DType dtype, int64_t n_embd,
                 int64_t n_ff, cudaStream_t stream, float swiglu_limit = 0.0f, float swiglu_alpha = 1.702f);
void moe_down(float* y, const float* h, const ExpertTask* tasks, int32_t n_tasks, DType dtype, int64_t n_embd,
              int64_t n_ff, cudaStream_t stream);

// The weighted sum of the selected experts with the soft-gated fallback of DESIGN.md §4, per
// token t (all arrays [n_tokens, k] are indexed t * k + j):
//   out[t] = sum_j (missing[tj] ? 0 : weight[tj] * y[row[tj]])
// then, with a shared expert (shared != nullptr, [n_tokens, n_embd]):
//   out[t] += (sigmoid(shared_gate_logit[t]) or 1 when shared_gate_logit == nullptr
//              + sum_j missing[tj] * weight[tj]) * shared[t]
// and without one, when some but not all of the token's mass is missing, out[t] is scaled by
// total / (total - missing) (all missing: out[t] = 0). out must not alias y or shared.
void moe_combine(float* out, const float* y, const int32_t* row, const float* weight, const uint8_t* missing,
                 const float* shared, const float* shared_gate_logit, int64_t n_tokens, int64_t k, int64_t n_embd,
                 cudaStream_t stream);

// dst[i] = src[i] rounded to `dtype` (kF16 or kBF16, round to nearest even).
void convert_f32(void* dst, DType dtype, const float* src, int64_t n, cudaStream_t stream);
// src[i] ~= hi[i] + lo[i], both in `dtype` (kF16 or kBF16): cuBLAS inputs that keep about 16
// significant bits of the f32 activations.
void split_f32(void* hi, void* lo, DType dtype, const float* src, int64_t n, cudaStream_t stream);

// cuBLAS for the large products of prefill and the LM head.
class Blas {
 public:
  Blas();   // cublasCreate; throws Error
  ~Blas();  // cublasDestroy
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  // y[n, w.rows] = x[n, w.cols] W^T with f32 accumulation and f32 output. For f16/bf16 weights
  // x is split into hi + lo in the weight dtype (split_f32) in `x_converted` (device, 2 * n * w.cols
  // elements of that dtype) and y = W hi + W lo (two tensor-core products); f32 weights use a
  // true-f32 SGEMM (no TF32). Runs on `stream`.
  void gemm(float* y, const float* x, const WeightView& w, int64_t n, void* x_converted, cudaStream_t stream);
  // The same product for any weight dtype. A block-quantized W is dequantized (dequantize_rows,
  // exact) into `weight_tile` (device, tile_floats >= w.cols f32), as many whole rows at a time as
  // fit, and each tile goes through the true-f32 SGEMM of F32 weights into its columns of y: the
  // weights GGUF defines, f32 activations, f32 products. The tile is reused tile after tile, so it
  // must not be shared with work on another stream. Other dtypes ignore the tile.
  void gemm(float* y, const float* x, const WeightView& w, int64_t n, void* x_converted, float* weight_tile,
            int64_t tile_floats, cudaStream_t stream);

 private:
  void* handle_;  // cublasHandle_t
};

}  // namespace chronos::cuda
