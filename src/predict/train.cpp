// train_predictors: seeded held-out split, minibatch Adam over sharded gradients, early stopping,
// and the pack files with their held-out metrics.
#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>

#include "chronos/error.h"
#include "chronos/predictors.h"
#include "chronos/thread_pool.h"
#include "chronos/trace_file.h"
#include "predict/evaluate.h"
#include "predict/pack.h"

namespace chronos {
namespace {

using predict::Mlp;
using predict::MlpWork;

// Examples per gradient shard. Fixed, so that the sum of a minibatch's gradient is computed in
// the same order whatever the number of threads.
constexpr int64_t kShardExamples = 32;

// Gathers example `index` into x[n_in], target[n_out], mask[n_groups]. Called from pool threads.
using FillFn = std::function<void(int64_t index, float* x, float* target, uint8_t* mask)>;

struct Shard {
  std::vector<float> x, target, grad;
  std::vector<uint8_t> mask;
  MlpWork<float> work;
  double loss = 0;
  int64_t terms = 0;
};

struct FitSettings {
  std::string_view name;
  int32_t epochs, batch, patience;
  float lr;
  uint64_t seed;
};

struct FitResult {
  int32_t epochs_run = 0, best_epoch = 0;
  double best_heldout = std::numeric_limits<double>::quiet_NaN();
  nlohmann::json history = nlohmann::json::array();
};

class Trainer {
 public:
  Trainer(Mlp<float>& net, ThreadPool& pool, int32_t batch) : net_(net), pool_(pool) {
    shards_.resize(size_t((std::max<int64_t>(batch, 1) + kShardExamples - 1) / kShardExamples));
    for (Shard& s : shards_) {
      s.x.resize(size_t(kShardExamples * net.n_in));
      s.target.resize(size_t(kShardExamples * net.n_out));
      s.mask.resize(size_t(kShardExamples * net.n_groups()));
      s.grad.resize(size_t(net.n_params()));
    }
    grad_.resize(size_t(net.n_params()));
  }

  // Loss sum and term count of `ids`; with `step`, also one Adam step on their mean gradient.
  std::pair<double, int64_t> run(const FillFn& fill, std::span<const int64_t> ids, predict::Adam* step) {
    double loss = 0;
    int64_t terms = 0;
    const int64_t per_round = std::ssize(shards_) * kShardExamples;
    CHRONOS_CHECK(step == nullptr || std::ssize(ids) <= per_round);
    for (int64_t first = 0; first < std::ssize(ids); first += per_round) {
      const int64_t n = std::min(per_round, std::ssize(ids) - first);
      const int64_t n_shards = (n + kShardExamples - 1) / kShardExamples;
      pool_.run(n_shards, [&](int64_t s) {
        Shard& shard = shards_[size_t(s)];
        const int64_t begin = first + s * kShardExamples, count = std::min(kShardExamples, first + n - begin);
        for (int64_t i = 0; i < count; ++i)
          fill(ids[size_t(begin + i)], shard.x.data() + i * net_.n_in, shard.target.data() + i * net_.n_out,
               shard.mask.data() + i * net_.n_groups());
        shard.terms = std::count(shard.mask.begin(), shard.mask.begin() + count * net_.n_groups(), uint8_t(1));
        if (step != nullptr) {
          std::fill(shard.grad.begin(), shard.grad.end(), 0.0f);
          shard.loss = predict::mlp_loss_and_grad(net_, shard.x.data(), shard.target.data(), shard.mask.data(), count,
                                                  shard.work, shard.grad.data());
        } else {
          shard.loss =
              predict::mlp_loss(net_, shard.x.data(), shard.target.data(), shard.mask.data(), count, shard.work);
        }
      });
      int64_t round_terms = 0;
      for (int64_t s = 0; s < n_shards; ++s) {
        loss += shards_[size_t(s)].loss;
        round_terms += shards_[size_t(s)].terms;
      }
      terms += round_terms;
      if (step == nullptr || round_terms == 0) continue;
      // Shard-ordered sum and the Adam update, element-wise: any split over threads gives the same bits.
      const float inv = 1.0f / float(round_terms);
      step->begin_step(net_.n_params());
      pool_.parallel_for(net_.n_params(), 4096, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          float g = 0;
          for (int64_t s = 0; s < n_shards; ++s) g += shards_[size_t(s)].grad[size_t(i)];
          grad_[size_t(i)] = g * inv;
        }
        step->update(net_.params.data(), grad_.data(), begin, end);
      });
    }
    return {loss, terms};
  }

 private:
  Mlp<float>& net_;
  ThreadPool& pool_;
  std::vector<Shard> shards_;
  std::vector<float> grad_;
};

FitResult fit(Mlp<float>& net, const FillFn& train_fill, int64_t n_train, const FillFn& heldout_fill, int64_t n_heldout,
              const FitSettings& settings, ThreadPool& pool, const TrainCallbacks& callbacks) {
  Trainer trainer(net, pool, settings.batch);
  predict::Adam adam;
  adam.lr = settings.lr;
  std::vector<int64_t> order(static_cast<size_t>(n_train)), heldout(static_cast<size_t>(n_heldout));
  std::iota(heldout.begin(), heldout.end(), 0);
  FitResult result;
  std::vector<float> best = net.params;
  int32_t since_best = 0;
  const int64_t steps = (n_train + settings.batch - 1) / settings.batch;
  for (int32_t epoch = 1; epoch <= settings.epochs; ++epoch) {
    std::iota(order.begin(), order.end(), 0);
    predict::SplitMix64 rng(settings.seed ^ (0x5851f42d4c957f2dull * uint64_t(epoch)));
    predict::seeded_shuffle(order, rng);
    double loss = 0;
    int64_t terms = 0;
    for (int64_t step = 0; step < steps; ++step) {
      const int64_t begin = step * settings.batch, count = std::min<int64_t>(settings.batch, n_train - begin);
      const auto [l, t] = trainer.run(train_fill, std::span(order).subspan(size_t(begin), size_t(count)), &adam);
      loss += l;
      terms += t;
      if (callbacks.on_step) callbacks.on_step({settings.name, epoch, settings.epochs, step + 1, steps});
    }
    TrainEpoch report{settings.name, epoch, loss / double(std::max<int64_t>(terms, 1)),
                      std::numeric_limits<double>::quiet_NaN(), false};
    if (n_heldout > 0) {
      const auto [l, t] = trainer.run(heldout_fill, heldout, nullptr);
      report.heldout_loss = l / double(std::max<int64_t>(t, 1));
    }
    // Without held-out data the last epoch is kept.
    const bool better = n_heldout == 0 || result.best_epoch == 0 || report.heldout_loss < result.best_heldout;
    if (better) {
      result.best_epoch = epoch;
      result.best_heldout = report.heldout_loss;
      best = net.params;
      since_best = 0;
      report.best = true;
    } else {
      ++since_best;
    }
    result.epochs_run = epoch;
    result.history.push_back(
        {{"epoch", epoch},
         {"train_loss", report.train_loss},
         {"heldout_loss", n_heldout > 0 ? nlohmann::json(report.heldout_loss) : nlohmann::json()}});
    if (callbacks.on_epoch) callbacks.on_epoch(report);
    if (since_best >= settings.patience) break;
  }
  net.params = best;
  return result;
}

// The LookaheadRouter's examples: every token; slot (h, l) is masked out when t + h leaves the sequence.
FillFn lookahead_fill(const predict::TraceData& data, const std::vector<predict::Slot>& slots,
                      std::vector<int64_t>& seq_end) {
  seq_end.resize(size_t(data.n_tokens()));
  for (int64_t s = 0; s < data.n_sequences(); ++s)
    for (int64_t t = data.seq_begin[size_t(s)]; t < data.seq_begin[size_t(s) + 1]; ++t)
      seq_end[size_t(t)] = data.seq_begin[size_t(s) + 1];
  return [&data, &slots, &seq_end](int64_t t, float* x, float* target, uint8_t* mask) {
    const int64_t d = data.shape.n_embd, E = data.shape.n_expert, ps = data.probs_stride();
    std::copy(data.h0.begin() + t * d, data.h0.begin() + (t + 1) * d, x);
    for (size_t s = 0; s < slots.size(); ++s) {
      const int64_t future = t + slots[s].horizon;
      const bool valid = future < seq_end[size_t(t)];
      mask[s] = valid ? 1 : 0;
      float* out = target + int64_t(s) * E;
      if (valid) {
        const float* p = data.probs.data() + future * ps + slots[s].moe_index * E;
        std::copy(p, p + E, out);
      } else {
        std::fill(out, out + E, 0.0f);
      }
    }
  };
}

FillFn intent_fill(const predict::IntentExamples& ex, int64_t n_in, int64_t n_out, int64_t n_groups) {
  return [&ex, n_in, n_out, n_groups](int64_t i, float* x, float* target, uint8_t* mask) {
    std::copy(ex.features.begin() + i * n_in, ex.features.begin() + (i + 1) * n_in, x);
    std::copy(ex.target.begin() + i * n_out, ex.target.begin() + (i + 1) * n_out, target);
    std::fill(mask, mask + n_groups, uint8_t(1));
  };
}

void check_options(const PredictorTrainOptions& o) {
  if (o.horizon < 0 || o.horizon > 16)
    throw UsageError(fmt::format("--horizon must be in [0, 16] (got {})", o.horizon));
  if (o.rank < 1 || o.intent_hidden < 1) throw UsageError("--rank and --intent-hidden must be >= 1");
  if (o.epochs < 1 || o.intent_epochs < 0) throw UsageError("--epochs must be >= 1 (--intent-epochs >= 0)");
  if (o.batch < 1 || o.intent_batch < 1) throw UsageError("--batch must be >= 1");
  if (!(o.lr > 0) || !std::isfinite(o.lr)) throw UsageError("--lr must be > 0");
  if (o.patience < 1 || o.intent_patience < 1) throw UsageError("--patience must be >= 1");
  if (!(o.holdout >= 0 && o.holdout < 1))
    throw UsageError(fmt::format("--holdout must be in [0, 1) (got {})", o.holdout));
}

}  // namespace

PredictorTrainSummary train_predictors(std::span<const TraceReader> traces, const std::filesystem::path& out_dir,
                                       const PredictorTrainOptions& options, ThreadPool& pool,
                                       const TrainCallbacks& callbacks) {
  check_options(options);
  const predict::TraceData all = predict::load_trace_data(traces);
  const predict::TraceShape& shape = all.shape;
  const int64_t n_seq = all.n_sequences();
  if (n_seq == 0 || all.n_tokens() == 0) throw_error("{}: the traces hold no tokens", traces.front().path().string());

  // Held-out split by sequence: a seeded permutation, the first share held out.
  std::vector<int64_t> perm(static_cast<size_t>(n_seq));
  std::iota(perm.begin(), perm.end(), 0);
  predict::SplitMix64 split_rng(options.seed ^ 0x9d2c5680a5b3e1f1ull);
  predict::seeded_shuffle(perm, split_rng);
  int64_t n_heldout =
      options.holdout > 0 && n_seq >= 2 ? std::max<int64_t>(1, std::llround(options.holdout * double(n_seq))) : 0;
  n_heldout = std::min(n_heldout, n_seq - 1);
  std::vector<int64_t> heldout_ids(perm.begin(), perm.begin() + n_heldout),
      train_ids(perm.begin() + n_heldout, perm.end());
  std::sort(heldout_ids.begin(), heldout_ids.end());
  std::sort(train_ids.begin(), train_ids.end());
  const predict::TraceData train = predict::select_sequences(all, train_ids);
  const predict::TraceData heldout = predict::select_sequences(all, heldout_ids);

  auto pack = std::make_unique<predict::PredictorPack>();
  pack->shape = shape;
  pack->model_fingerprint = all.model_fingerprint;
  pack->horizon = options.horizon;
  pack->slots = predict::lookahead_slots(shape, options.horizon);
  if (pack->slots.empty())
    throw_error("nothing for the LookaheadRouter to predict: one MoE layer (block 0) and --horizon 0");
  pack->frequency = predict::expert_frequency(train);
  const int64_t d = shape.n_embd, E = shape.n_expert, L = shape.n_moe_layers();

  PredictorTrainSummary summary;
  summary.train_sequences = train.n_sequences();
  summary.heldout_sequences = heldout.n_sequences();
  summary.train_tokens = train.n_tokens();
  summary.heldout_tokens = heldout.n_tokens();
  summary.data_fingerprint = predict::trace_fingerprint(traces);

  // LookaheadRouter.
  pack->lookahead = Mlp<float>(d, options.rank, std::ssize(pack->slots) * E, E);
  pack->lookahead.init(options.seed ^ 0x1111);
  predict::input_statistics(train.h0.data(), train.n_tokens(), d, pack->lookahead.in_mean, pack->lookahead.in_scale);
  std::vector<int64_t> train_end, heldout_end;
  const FitResult look =
      fit(pack->lookahead, lookahead_fill(train, pack->slots, train_end), train.n_tokens(),
          lookahead_fill(heldout, pack->slots, heldout_end), heldout.n_tokens(),
          {"lookahead", options.epochs, options.batch, options.patience, options.lr, options.seed ^ 0x2222}, pool,
          callbacks);

  // IntentClassifier.
  const predict::IntentExamples intent_train = predict::intent_examples(train);
  const predict::IntentExamples intent_heldout = predict::intent_examples(heldout);
  pack->intent = Mlp<float>(2 * d, options.intent_hidden, L * E, E);
  pack->intent.init(options.seed ^ 0x3333);
  predict::input_statistics(intent_train.features.data(), intent_train.size(), 2 * d, pack->intent.in_mean,
                            pack->intent.in_scale);
  FitResult intent;
  if (intent_train.size() > 0 && options.intent_epochs > 0) {
    intent = fit(pack->intent, intent_fill(intent_train, 2 * d, L * E, L), intent_train.size(),
                 intent_fill(intent_heldout, 2 * d, L * E, L), intent_heldout.size(),
                 {"intent", options.intent_epochs, options.intent_batch, options.intent_patience, options.lr,
                  options.seed ^ 0x4444},
                 pool, callbacks);
  }

  summary.lookahead_epochs = look.epochs_run;
  summary.lookahead_best_epoch = look.best_epoch;
  summary.lookahead_heldout_loss = look.best_heldout;
  summary.intent_epochs = intent.epochs_run;
  summary.intent_best_epoch = intent.best_epoch;
  summary.intent_heldout_loss = intent.best_heldout;

  nlohmann::json files = nlohmann::json::array();
  for (const TraceReader& r : traces) files.push_back(r.path().filename().string());
  const auto number_or_null = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  pack->training = {
      {"training",
       {{"trace_files", files},
        {"data_fingerprint", summary.data_fingerprint},
        {"seed", options.seed},
        {"lr", std::stod(fmt::format("{}", options.lr))},  // the flag's decimal value, not its f32 expansion
        {"batch", options.batch},
        {"holdout", options.holdout},
        {"optimizer", "Adam(beta1=0.9, beta2=0.999, eps=1e-8), early stopping on held-out loss"},
        {"loss", "soft cross-entropy against the traced router softmax, mean over (token, horizon, layer) terms"},
        {"sequences", {{"train", summary.train_sequences}, {"heldout", summary.heldout_sequences}}},
        {"tokens", {{"train", summary.train_tokens}, {"heldout", summary.heldout_tokens}}},
        {"lookahead",
         {{"epochs_run", look.epochs_run},
          {"best_epoch", look.best_epoch},
          {"patience", options.patience},
          {"history", look.history}}},
        {"intent",
         {{"examples_train", intent_train.size()},
          {"examples_heldout", intent_heldout.size()},
          {"epochs_run", intent.epochs_run},
          {"best_epoch", intent.best_epoch},
          {"batch", options.intent_batch},
          {"patience", options.intent_patience},
          {"history", intent.history}}}}}};
  pack->training["heldout"] = {{"lookahead_loss", number_or_null(look.best_heldout)},
                               {"intent_loss", number_or_null(intent.best_heldout)}};

  Predictors predictors(std::make_unique<predict::PredictorPack>(*pack));
  if (heldout.n_sequences() > 0) {
    const PredictorEvaluation eval = predict::evaluate_on(predictors, heldout, nullptr, predictors.pack().frequency);
    for (const MethodScores& row : eval.lookahead)
      if (row.method == "lookahead") summary.heldout_recall_at_k.push_back(row.values.at(0));
    for (const MethodScores& row : eval.intent)
      if (row.method == "intent") summary.heldout_intent_coverage_half = row.values.back();
    pack->training["heldout"]["evaluation"] = nlohmann::json::parse(evaluation_json(eval));
  }
  predict::save_pack(*pack, out_dir);
  return summary;
}

}  // namespace chronos
