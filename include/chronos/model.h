// Model: weights bound from a checkpoint by the architecture's tensor table, and the forward pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "chronos/model_config.h"
#include "chronos/ops.h"
#include "chronos/safetensors.h"

namespace chronos {

class GgufFile;
struct PackManifest;
class ThreadPool;
class Stream;
struct GgufTensors;
class DeviceOps;
struct ForwardState;

// One SwiGLU FFN: down(silu(gate(x)) * up(x)).
struct FfnWeights {
  WeightView gate;  // [n_ff, n_embd]
  WeightView up;    // [n_ff, n_embd]
  WeightView down;  // [n_embd, n_ff]
  bool present() const { return gate.data != nullptr; }
  int64_t n_bytes() const;
};

struct LayerWeights {
  std::vector<float> attn_norm;       // [n_embd]
  std::vector<float> ffn_norm;        // [n_embd]
  WeightView wq, wk, wv, wo;          // [q_dim, n_embd], [kv_dim, n_embd] x2, [n_embd, q_dim]
  std::vector<float> bq, bk, bv;      // [q_dim], [kv_dim], [kv_dim]; empty without biases
  std::vector<float> bo;              // [n_embd] o_proj's bias; empty without
  std::vector<float> sinks;           // [n_head] gpt-oss's attention sinks; empty without
  std::vector<float> q_norm, k_norm;  // [head_dim] (per head) or [q_dim]/[kv_dim] (full width)
  // Multi-head latent attention (ModelConfig::mla()): wq is q_proj, or null with q_lora_rank's
  // wq_a -> q_a_norm -> wq_b; wkv_a gives the latent and the rotary key, kv_a_norm the latent's norm,
  // wkv_b each head's key and value from the latent. mla_uk [n_head, kv_lora_rank, qk_nope_dim] and
  // mla_uv [n_head, v_head_dim, kv_lora_rank] are wkv_b's key and value rows in f32, the key rows
  // transposed: the absorbed attention's per-head matrices, built at load.
  WeightView wq_a, wq_b, wkv_a, wkv_b;
  std::vector<float> q_a_norm, kv_a_norm;
  std::vector<float> mla_uk, mla_uv;
  // Gated DeltaNet (AttentionKind::kGatedDeltaNet; out_proj is wo): in_proj_qkvz and in_proj_ba,
  // rows grouped per key head, or in_proj_qkv, in_proj_z, in_proj_b and in_proj_a (ModelConfig's
  // lin_qkvz_grouped and lin_ba_grouped); the convolution [conv_dim, kernel], A_log and dt_bias [v_heads], and the
  // gated RMSNorm's weight [v_dim].
  WeightView lin_qkv, lin_z, lin_b, lin_a;
  std::vector<float> lin_conv, lin_a_log, lin_dt_bias, lin_norm;
  WeightView router;                     // [n_expert, n_embd]
  std::vector<float> router_bias;        // [n_expert] a sigmoid router's selection bias; empty otherwise
  std::vector<float> router_logit_bias;  // [n_expert] added to the router's logits (gpt-oss); empty otherwise
  std::vector<FfnWeights> experts;       // [n_expert]
  // gpt-oss: every routed expert's projection biases, [n_expert, n_ff] x2 and [n_expert, n_embd],
  // resident whether the experts are or not; empty otherwise.
  std::vector<float> expert_gate_bias, expert_up_bias, expert_down_bias;
  FfnWeights shared;       // shared expert (Qwen2-MoE), absent otherwise
  WeightView shared_gate;  // [1, n_embd]
  FfnWeights dense;        // dense MLP of non-MoE layers
};

struct ModelWeights {
  WeightView tok_embd;               // [n_vocab, n_embd]
  std::vector<float> output_norm;    // [n_embd]
  WeightView output;                 // [n_vocab, n_embd] (tok_embd when tied)
  std::vector<LayerWeights> layers;  // [n_layer]
};

// Byte and parameter counts, for inspect and for the expert-cache budget.
struct ModelSizes {
  int64_t dense_params = 0, dense_bytes = 0;    // everything but routed experts
  int64_t expert_params = 0, expert_bytes = 0;  // all routed experts
  int64_t bytes_per_expert = 0;                 // one (layer, expert)
  DType expert_dtype = DType::kF32;
};

// Per-sequence attention state in slots: a slot holds one sequence's keys and values of every layer
// for up to n_ctx positions (f32: [n_layer, n_ctx, key_width] keys, then [n_layer, n_ctx,
// value_width] values; ModelConfig::kv_key_width: grouped-query attention's kv_dim each, MLA's
// latent and rotary key with no values), allocated once for n_slots sequences. A Gated DeltaNet
// layer keeps no positions but a recurrent state of ModelConfig::lin_state_floats per slot
// (state()). A sequence is its slot index: allocate() hands out a free slot, empty, and free()
// returns it for reuse. length(slot) is how many positions the slot holds; a forward may append at
// that length or rewind to an earlier position (a model with recurrent layers only to position 0:
// its state cannot be taken back).
class KvStore {
 public:
  // max_rows > 0: the most rows one forward chunk holds; a layer with its own sliding window
  // (LayerKind::window, gpt-oss) then keeps only the last window + max_rows - 1 positions of each
  // sequence, in a ring (position p at p modulo that). 0: every layer keeps n_ctx positions.
  KvStore(const ModelConfig& cfg, int64_t n_ctx, int64_t n_slots, int64_t max_rows = 0);
  // The same slots in memory the caller owns and keeps alive (a device's): `k` and `v` hold the
  // keys' and the values' share of n_bytes() (key_bytes() and the rest; v may be null without
  // values), laid out as k() and v() address them, and `state` the recurrent layers' states
  // (state_bytes(); null without recurrent layers).
  KvStore(const ModelConfig& cfg, int64_t n_ctx, int64_t n_slots, float* k, float* v, float* state = nullptr);
  KvStore(const KvStore&) = delete;  // k()/v() point into the memory: a move keeps it, a copy would not
  KvStore& operator=(const KvStore&) = delete;
  KvStore(KvStore&&) = default;
  KvStore& operator=(KvStore&&) = default;
  // Bytes of one slot of n_ctx positions; as many slots as fit in `budget` bytes (throws Error
  // naming both sizes when not even one does).
  static int64_t bytes_per_slot(const ModelConfig& cfg, int64_t n_ctx, int64_t max_rows = 0);
  static int64_t slots_for_budget(const ModelConfig& cfg, int64_t n_ctx, int64_t budget);
  // Bytes of one slot's recurrent states (Gated DeltaNet layers; 0 without), part of bytes_per_slot.
  static int64_t state_bytes_per_slot(const ModelConfig& cfg);
  // The positions a slot keeps for `layer`: n_ctx, or a sliding layer's ring (see the constructor).
  static int64_t layer_positions(const ModelConfig& cfg, int64_t layer, int64_t n_ctx, int64_t max_rows);

  // A free slot, with length 0; throws Error when every slot is in use.
  int32_t allocate();
  // Takes the free `slot` keeping its first `keep` positions (and recurrent state): the ones the
  // sequence that last held it left there, as long as nothing wrote the slot since (prefix reuse).
  // Throws Error when the slot is in use or keep is past the context.
  int32_t allocate(int32_t slot, int64_t keep);
  // Returns a slot in use to the free ones; throws Error for any other slot.
  void free(int32_t slot);
  bool in_use(int32_t slot) const { return slot >= 0 && slot < n_slots_ && in_use_[size_t(slot)] != 0; }
  int64_t length(int32_t slot) const { return length_[size_t(slot)]; }

  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_slots() const { return n_slots_; }
  int64_t n_in_use() const;
  int64_t key_width() const { return key_width_; }  // floats from one position's keys to the next's
  int64_t value_width() const { return value_width_; }
  int64_t slot_bytes() const { return slot_bytes_; }
  int64_t n_bytes() const { return n_slots_ * slot_bytes(); }
  int64_t key_bytes() const { return n_slots_ * slot_positions_ * key_width_ * int64_t(sizeof(float)); }
  int64_t max_rows() const { return max_rows_; }
  // Positions `layer` keeps per slot: n_ctx, or its ring's size (positions wrap modulo it).
  int64_t ring(int64_t layer) const { return layer_cap_[size_t(layer)]; }
  // A position's key and value; a ring layer's positions p and p + ring(layer) share the place.
  float* k(int32_t slot, int64_t layer, int64_t pos) { return k_base_ + offset(slot, layer, pos) * key_width_; }
  float* v(int32_t slot, int64_t layer, int64_t pos) { return v_base_ + offset(slot, layer, pos) * value_width_; }
  // A recurrent layer's state in a slot (ModelConfig::lin_state_floats floats; the forward zeroes
  // it at a sequence's position 0); bytes of every slot's states, part of n_bytes().
  float* state(int32_t slot, int64_t layer) {
    return state_base_ + int64_t(slot) * state_per_slot_ + layer_state_[size_t(layer)];
  }
  int64_t state_bytes() const { return n_slots_ * state_per_slot_ * int64_t(sizeof(float)); }
  bool recurrent() const { return state_per_slot_ > 0; }

 private:
  friend class Model;
  void lay_out(const ModelConfig& cfg);
  int64_t offset(int32_t slot, int64_t layer, int64_t pos) const {
    return int64_t(slot) * slot_positions_ + layer_base_[size_t(layer)] + pos % layer_cap_[size_t(layer)];
  }
  int64_t n_layer_, n_ctx_, key_width_, value_width_, n_slots_, max_rows_, slot_bytes_;
  std::vector<int64_t> layer_cap_, layer_base_;  // [n_layer] positions kept, and where the layer's begin
  std::vector<int64_t> layer_state_;             // [n_layer] where a recurrent layer's state begins in a slot's
  int64_t state_per_slot_ = 0;                   // floats of a slot's recurrent states
  std::vector<float> state_;                     // [n_slots, state_per_slot_] when the store owns its memory
  float* state_base_ = nullptr;                  // state_ or the caller's memory
  int64_t slot_positions_ = 0;                   // the sum of layer_cap_
  std::vector<float> k_, v_;                     // [n_slots, sum of layer_cap_, kv_dim] when the store owns its memory
  float* k_base_ = nullptr;                      // k_ or the caller's memory
  float* v_base_ = nullptr;
  std::vector<uint8_t> in_use_;  // [n_slots]
  std::vector<int64_t> length_;  // [n_slots]
  std::vector<int64_t> next_;    // [n_slots] the position a batch's next row of the slot must have; -1: none yet
};

// One sequence's KvStore (slot 0, allocated), for the one-sequence forward.
class KvCache : public KvStore {
 public:
  KvCache(const ModelConfig& cfg, int64_t n_ctx) : KvStore(cfg, n_ctx, 1) { allocate(); }
};

// The rows of one forward step, from any number of sequences: row i runs token(i) of sequence
// seq(i) (a KvStore slot) at position pos(i), and logits are written, in row order, for the rows
// that ask for them. A sequence's rows are at consecutive positions in row order, the first at most
// its length (rows of other sequences may sit between them). Cleared and refilled each step, it
// keeps its capacity.
class Batch {
 public:
  void add(int32_t seq, int64_t pos, int32_t token, bool logits) {
    seqs_.push_back(seq);
    positions_.push_back(pos);
    tokens_.push_back(token);
    logits_.push_back(logits ? 1 : 0);
    n_logits_ += logits ? 1 : 0;
  }
  void clear() {
    seqs_.clear();
    positions_.clear();
    tokens_.clear();
    logits_.clear();
    n_logits_ = 0;
  }
  void reserve(int64_t rows);
  int64_t size() const { return std::ssize(tokens_); }
  int64_t n_logits() const { return n_logits_; }
  int32_t seq(int64_t row) const { return seqs_[size_t(row)]; }
  int64_t pos(int64_t row) const { return positions_[size_t(row)]; }
  int32_t token(int64_t row) const { return tokens_[size_t(row)]; }
  bool logits(int64_t row) const { return logits_[size_t(row)] != 0; }
  std::span<const int32_t> seqs() const { return seqs_; }

 private:
  std::vector<int32_t> seqs_, tokens_;
  std::vector<int64_t> positions_;
  std::vector<uint8_t> logits_;
  int64_t n_logits_ = 0;
};

// RoPE cos/sin tables [n_ctx, n_rot / 2] for positions 0 .. n_ctx - 1, as transformers computes
// them (shared by the CPU forward and the CUDA runner).
void rope_tables(const ModelConfig& c, int64_t n_ctx, std::vector<float>& cos, std::vector<float>& sin);

// Observes named intermediates ("attn_out", "ffn_out", "router_probs", ...): off unless set.
using TraceFn = std::function<void(const char* name, int64_t layer, std::span<const float> values)>;

// Routing decisions of one MoE layer for one token, reported to the RouteFn when set.
struct RouteEvent {
  int64_t layer;
  int64_t token_index;                  // the row within the forward step
  int32_t sequence;                     // the row's sequence (its KvStore slot)
  std::span<const int32_t> expert_ids;  // [n_expert_used]
  std::span<const float> weights;       // [n_expert_used]
  std::span<const float> probs;         // [n_expert] router softmax
};
using RouteFn = std::function<void(const RouteEvent&)>;

// Called after every decoder block with the residual stream of the step's rows ([n_rows, n_embd])
// and each row's sequence ([n_rows]); the expert streamer runs its predictors on block 0's output.
using BlockFn = std::function<void(int64_t layer, std::span<const float> hidden, std::span<const int32_t> sequences)>;

// Supplies the weights of routed experts that are not bound at load (a pack folder streams them).
// acquire() is called once per MoE layer and forward step with the distinct experts the router
// selected for the step's tokens and, for each, the largest routing weight a token of the step gives
// it (weights may be empty: unknown); it sets views[i] to the weights of experts[i] (the full expert
// or a stand-in such as its low-bit copy), or to nullptr when that expert is not usable now, in
// which case the model applies the soft-gated fallback of DESIGN.md §4. Whether acquire() waits for
// a read is the provider's policy (--on-miss, --wait-above). release() follows once the layer's
// experts have been computed.
class ExpertProvider {
 public:
  virtual ~ExpertProvider() = default;
  virtual void acquire(int64_t layer, std::span<const int32_t> experts, std::span<const float> weights,
                       std::span<const FfnWeights*> views) = 0;
  void acquire(int64_t layer, std::span<const int32_t> experts, std::span<const FfnWeights*> views) {
    acquire(layer, experts, {}, views);
  }
  virtual void release(int64_t layer, std::span<const int32_t> experts) = 0;
  // The most experts one acquire() may be asked for (the model computes a layer's experts in
  // waves of this size): a cache of N slots cannot hold more than N experts at once.
  virtual size_t max_experts_per_acquire() const { return SIZE_MAX; }
  // Device compute (CUDA): with a stream set, acquire() does not block the host until an expert's
  // bytes are usable (only until its copy is queued): it makes `stream` wait on the expert's event,
  // and release() records on `stream` that the expert's memory may be overwritten. nullptr (the
  // default, the CPU forward): the host waits, and release means the memory is free.
  virtual void set_compute_stream(Stream* stream) { (void)stream; }
};

// What a run reports to and asks of its caller, given to the runner when it is made (the model
// itself holds none of it, so one loaded model serves several runs). Every member is optional.
struct ForwardHooks {
  TraceFn trace;                         // named intermediates
  RouteFn route;                         // routing decisions
  BlockFn block;                         // residual stream after blocks 0 .. block_last_layer (on CUDA each observed
  int64_t block_last_layer = INT64_MAX;  // block costs a device-to-host copy and a wait)
  ExpertProvider* experts = nullptr;     // routed experts; without one they must be bound at load

  bool observes_block(int64_t layer) const { return block && layer <= block_last_layer; }
};

// Hooks that observe one run together: each callback of `a` runs before the one of `b`, blocks up
// to the later of the two last layers are observed (each callback still sees only its own range).
// At most one of them may provide experts.
ForwardHooks combine(const ForwardHooks& a, const ForwardHooks& b);

// Counts of the MoE blocks, accumulated over forward calls that share a Scratch.
struct MoeCounters {
  int64_t routed_pairs = 0;        // (token, selected expert) pairs
  int64_t fallback_pairs = 0;      // of those, computed through the fallback (expert missing)
  int64_t zero_output_tokens = 0;  // token-layers whose every selected expert was missing (no shared expert)
};

struct ModelLoadOptions {
  // FP8 block-scaled matrices (ModelConfig::fp8_block_rows) stay F8_E4M3 views of the file with
  // their scales, which only weight_row_to_f32 reads (chronos pack converts them expert by expert,
  // inspect counts them). By default they are dequantized to BF16 at load, as transformers does on a
  // CPU, so that the forward runs them.
  bool keep_fp8 = false;
  // A .gguf file: its routed experts are not bound but streamed from the file in place by an
  // ExpertProvider (gguf_experts() describes their slices); the dense tensors stay mapped.
  bool stream_gguf_experts = false;
};

class Model {
 public:
  // Reads config.json and the safetensors of `dir`, checks every tensor against the
  // architecture's table (name, dtype, shape) and binds the weights (memory-mapped, no copy).
  // `dir` may also be a .gguf file: its key-values make the config and its tensors are bound under
  // their Hugging Face names (docs/formats.md, GGUF input).
  // An F8_E4M3 matrix needs its X_scale_inv beside it (F32, BF16 or F8_E8M0, one per block) and
  // config.json's fp8 quantization_config (ModelLoadOptions).
  static std::unique_ptr<Model> load(const std::filesystem::path& dir, const ModelLoadOptions& options = {});
  ~Model();

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const ModelSizes& sizes() const { return sizes_; }
  const TensorStore& tensors() const { return store_; }  // every tensor of the loaded files
  // Every tensor the model was loaded from, under its Hugging Face name, sorted by name: the
  // store's, or for a .gguf file its tensors as mapped (a block-typed one has its block dtype).
  std::vector<const TensorInfo*> all_tensors() const;
  // A model loaded from one .gguf file: that file, opened and checked once, and the config.json
  // text built from its key-values (what a pack of it writes and its fingerprint hashes). Null and
  // empty for a checkpoint or a pack.
  const GgufFile* gguf_file() const;
  const std::string& gguf_config_json() const { return gguf_config_json_; }

  // Scratch for up to max_batch tokens per forward step, sized once (the forward allocates nothing).
  struct Scratch;
  struct ScratchDeleter {
    void operator()(Scratch* scratch) const;
  };
  using ScratchPtr = std::unique_ptr<Scratch, ScratchDeleter>;
  ScratchPtr make_scratch(int64_t max_batch, int64_t n_ctx) const;

  // Runs tokens at positions pos .. pos + n - 1, appending their keys/values to kv, and writes
  // logits: [n, n_vocab] when all_logits, else [1, n_vocab] for the last token. Prompts longer
  // than the scratch batch are processed in chunks. A pack's model needs hooks.experts.
  // Sequence 0 of kv (a KvCache's one sequence), allocated by the first call when it is free.
  void forward(std::span<const int32_t> tokens, int64_t pos, KvStore& kv, Scratch& scratch, ThreadPool& pool,
               float* logits, bool all_logits, const ForwardHooks& hooks = {}) const;
  // Runs the rows of many sequences as one step: their keys/values go to their slots of `kv`, the
  // routed experts of a layer are acquired and computed once for all rows, and logits
  // [batch.n_logits(), n_vocab] are written for the rows that ask. Rows beyond the scratch batch
  // run in chunks. Throws Error, before anything runs, for a row whose sequence is not in use, whose
  // position leaves a gap or exceeds the context, or whose token is outside the vocabulary.
  void forward(const Batch& batch, KvStore& kv, Scratch& scratch, ThreadPool& pool, float* logits,
               const ForwardHooks& hooks = {}) const;
  // The two calls above on any device (src/model/device_ops.h): the one forward, which the CPU
  // calls above and the CUDA runner run. `kv` is in the device's memory; state is the host side.
  void forward(const Batch& batch, KvStore& kv, DeviceOps& device, ForwardState& state, float* logits,
               const ForwardHooks& hooks) const;
  void forward(std::span<const int32_t> tokens, int64_t pos, KvStore& kv, DeviceOps& device, ForwardState& state,
               float* logits, bool all_logits, const ForwardHooks& hooks) const;

  // True when the routed experts were not bound at load (a pack folder, or a .gguf file loaded with
  // stream_gguf_experts): a provider is required.
  bool experts_streamed() const { return experts_streamed_; }
  // A .gguf file loaded with stream_gguf_experts: its routed experts' slices and reads, as the one
  // cluster of a manifest (gguf_expert_manifest); null otherwise.
  const PackManifest* gguf_experts() const { return gguf_experts_.get(); }
  // A tensor stored as FP8 with block scales, as a view that weight_row_to_f32 reads (also after
  // it was dequantized for the forward); null for any other tensor. The name of its scale tensor is
  // the name + "_scale_inv".
  const WeightView* fp8_weight(std::string_view name) const;
  static MoeCounters& counters(Scratch& scratch);

 private:
  Model() = default;
  void check_rows(const Batch& batch, KvStore& kv, int64_t n_ctx) const;
  // Rows begin .. begin + n - 1 of the batch; logits of the rows that ask, in row order.
  void forward_chunk(DeviceOps& dev, ForwardState& st, const Batch& batch, int64_t begin, int64_t n,
                     float* logits) const;
  void attention(DeviceOps& dev, ForwardState& st, int64_t il, int64_t n) const;
  void latent_attention(DeviceOps& dev, ForwardState& st, int64_t il, int64_t n) const;
  void linear_attention(DeviceOps& dev, ForwardState& st, int64_t il, int64_t n) const;
  void moe(DeviceOps& dev, ForwardState& st, int64_t il, int64_t n) const;
  static void dense_ffn(DeviceOps& dev, const FfnWeights& ffn, int64_t n, const float* in, float* out);
  static void trace(DeviceOps& dev, const ForwardState& st, const char* name, int64_t layer, const float* values,
                    int64_t count);

  ModelConfig config_;
  TensorStore store_;
  std::shared_ptr<const GgufTensors> gguf_;  // a model loaded from one .gguf file
  std::string gguf_config_json_;
  std::shared_ptr<const PackManifest> gguf_experts_;  // its experts, when streamed in place
  ModelWeights weights_;
  ModelSizes sizes_;
  bool experts_streamed_ = false;
  std::map<std::string, WeightView, std::less<>> fp8_weights_;  // FP8 tensors by name, with their scales
  std::vector<std::vector<float>> fp8_scales_;                  // their scales in f32
  std::vector<std::vector<std::byte>> dequantized_;             // their BF16 copies, unless keep_fp8
};

}  // namespace chronos
