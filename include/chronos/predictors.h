// The expert predictors (DESIGN.md §6): LookaheadRouter and IntentClassifier at run time, and their
// training and evaluation on routing traces.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chronos/expert_key.h"

namespace chronos {

class Model;
class ThreadPool;
class TraceReader;

namespace predict {
struct PredictorPack;  // the networks and their metadata (src/predict/pack.h)
}

// One predicted expert. `horizon` is 0 for later layers of the current token, h for token t+h,
// and kIntentHorizon for the IntentClassifier's whole-generation share. `key.layer` is the
// model's own layer index (as in the Hugging Face tensor names).
struct ExpertScore {
  ExpertKey key;
  int32_t horizon;
  float score;
};
inline constexpr int32_t kIntentHorizon = -1;

// The trained predictors of a pack folder (<dir>/predictors.safetensors + predictors.json).
// Not thread-safe: lookahead() and intent() use scratch owned by the object.
class Predictors {
 public:
  // nullptr if the folder has no predictors.safetensors; Error if the files are malformed.
  static std::unique_ptr<Predictors> load(const std::filesystem::path& pack_dir);
  explicit Predictors(std::unique_ptr<predict::PredictorPack> pack);
  ~Predictors();
  Predictors(const Predictors&) = delete;
  Predictors& operator=(const Predictors&) = delete;

  int32_t horizon() const;  // K
  int32_t n_embd() const;
  int32_t n_expert() const;
  int32_t n_expert_used() const;
  const std::vector<int32_t>& moe_layers() const;  // the model's own indices of its MoE layers
  // The fingerprint of the model whose traces they were trained on (predictors.json).
  const std::string& model_fingerprint() const;

  // LookaheadRouter on one h0 [n_embd] (f32): for each horizon 0..K and each MoE layer that
  // horizon covers, the top `per_layer` experts with their probabilities. Ordered by horizon,
  // then layer, then decreasing score. Allocation-free after the first call (scratch owned;
  // `out` keeps its capacity).
  void lookahead(std::span<const float> h0, int32_t per_layer, std::vector<ExpertScore>& out);

  // IntentClassifier on the prompt's h0 rows [n_tokens * n_embd] (the first 512 are used): the
  // predicted share of the generation's expert activations for every (MoE layer, expert),
  // horizon kIntentHorizon, ordered by layer then decreasing share. Error if n_tokens < 1.
  void intent(std::span<const float> h0_rows, int64_t n_tokens, std::vector<ExpertScore>& out);

  // FLOPs of one lookahead() call (multiply-adds count 2), to set against one layer's compute.
  double lookahead_flops() const;

  const predict::PredictorPack& pack() const { return *pack_; }

 private:
  struct Scratch;
  std::unique_ptr<predict::PredictorPack> pack_;
  std::unique_ptr<Scratch> scratch_;
};

struct PredictorTrainOptions {
  int32_t horizon = 2;  // K: tokens ahead the LookaheadRouter predicts
  int32_t rank = 256;   // R: LookaheadRouter hidden width
  int32_t epochs = 30;  // LookaheadRouter epochs (at most; early stopping)
  int32_t batch = 256;  // LookaheadRouter tokens per step
  float lr = 1e-3f;
  int32_t patience = 4;  // epochs without a better held-out loss before stopping
  int32_t intent_hidden = 256;
  int32_t intent_epochs = 300;  // IntentClassifier epochs (one example per sequence: many short epochs)
  int32_t intent_batch = 16;
  int32_t intent_patience = 30;
  double holdout = 0.1;  // share of sequences held out (by sequence, seeded)
  uint64_t seed = 0;
};

struct TrainEpoch {
  std::string_view predictor;  // "lookahead" or "intent"
  int32_t epoch = 0;           // 1-based
  double train_loss = 0;       // mean soft cross-entropy over the epoch's steps
  double heldout_loss = 0;     // NaN without held-out sequences
  bool best = false;           // the parameters kept so far come from this epoch
};

struct TrainStep {
  std::string_view predictor;
  int32_t epoch = 0, epochs = 0;
  int64_t step = 0, steps = 0;  // within the epoch
};

struct TrainCallbacks {
  std::function<void(const TrainStep&)> on_step;    // after every optimizer step
  std::function<void(const TrainEpoch&)> on_epoch;  // after every epoch
};

struct PredictorTrainSummary {
  int64_t train_sequences = 0, heldout_sequences = 0, train_tokens = 0, heldout_tokens = 0;
  int32_t lookahead_epochs = 0, lookahead_best_epoch = 0, intent_epochs = 0, intent_best_epoch = 0;
  double lookahead_heldout_loss = 0, intent_heldout_loss = 0;
  std::vector<double> heldout_recall_at_k;  // [K + 1] LookaheadRouter recall at B = k per horizon
  double heldout_intent_coverage_half = 0;  // IntentClassifier coverage at B = 50% of E
  std::string data_fingerprint;
};

// Trains both predictors on `traces` (all from one model: every header must match the first,
// else Error) and writes <out_dir>/predictors.safetensors and predictors.json. The result is a
// function of the trace bytes and the options only: the minibatch is split into fixed shards of
// examples whose gradients are reduced in shard order, so neither the thread count nor the
// scheduling changes a bit of the output.
PredictorTrainSummary train_predictors(std::span<const TraceReader> traces, const std::filesystem::path& out_dir,
                                       const PredictorTrainOptions& options, ThreadPool& pool,
                                       const TrainCallbacks& callbacks = {});

// One method's scores, one value per budget.
struct MethodScores {
  std::string method;
  int32_t horizon = 0;  // kIntentHorizon for IntentClassifier rows
  std::vector<double> values;
};

struct PredictorEvaluation {
  int32_t horizon = 0;
  int32_t n_expert = 0, n_expert_used = 0;
  int64_t n_sequences = 0, n_tokens = 0;
  // LookaheadRouter: recall of the real top-k set of token t+h when B experts per layer may be
  // named, over decode positions t (generated tokens) with t+h inside the sequence.
  std::vector<int32_t> lookahead_budgets;  // k, 2k, 4k (capped at E)
  std::vector<int64_t> positions;          // [K + 1] evaluated tokens per horizon
  std::vector<MethodScores> lookahead;     // methods x horizons
  // IntentClassifier: share of the generated tokens' expert activations covered by the top-B
  // experts per layer, averaged over layers then sequences.
  std::vector<int32_t> intent_budgets;  // 25% and 50% of E
  int64_t intent_sequences = 0;
  std::vector<MethodScores> intent;
  std::string frequency_source;  // "training traces" or "evaluation traces"
  double lookahead_flops = 0;
  double layer_flops = 0;             // one MoE layer's per-token compute, 0 when no model was given
  std::vector<std::string> notes;     // approximations and missing baselines
  std::vector<std::string> verdicts;  // learned predictor vs. the best baseline, per horizon and budget
};

// Evaluates `predictors` on `traces` (headers must match the predictors, else Error) against
// the baselines: previous token's experts, global frequency, the later layer's gate on h0
// (when `model` is given: its routers are used), and the oracle.
PredictorEvaluation evaluate_predictors(Predictors& predictors, std::span<const TraceReader> traces,
                                        const Model* model);

std::string format_evaluation(const PredictorEvaluation& evaluation);  // the table, for a terminal
std::string evaluation_json(const PredictorEvaluation& evaluation);    // everything, as JSON

}  // namespace chronos
