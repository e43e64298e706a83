// Expert predictors: gradients against finite differences, learning a learnable trace, determinism,
// save/load, header checks, and evaluation metrics on a hand-computed case.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>

#include "chronos/dtype.h"
#include "chronos/error.h"
#include "chronos/model.h"
#include "chronos/pack_format.h"
#include "chronos/predictors.h"
#include "chronos/thread_pool.h"
#include "chronos/trace.h"
#include "chronos/trace_file.h"
#include "predict/evaluate.h"
#include "predict/mlp.h"
#include "predict/pack.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;
using predict::Mlp;
using predict::MlpWork;

class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fs::temp_directory_path() / fmt::format("chronos_predictors_{}_{}", name, ::getpid())) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void expect_error(const std::function<void()>& action, std::initializer_list<std::string_view> fragments) {
  try {
    action();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (auto fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
  }
}

// Central differences of the loss in double: the truncation error is O(eps^2) ~ 1e-12 and the
// rounding error ~ 1e-16 / eps ~ 1e-10, so 1e-7 separates a right gradient from a wrong one.
void check_gradient(Mlp<double>& net, const std::vector<double>& x, const std::vector<double>& target,
                    const std::vector<uint8_t>& mask, int64_t n) {
  MlpWork<double> work;
  std::vector<double> grad(size_t(net.n_params()), 0.0);
  const uint8_t* m = mask.empty() ? nullptr : mask.data();
  predict::mlp_loss_and_grad(net, x.data(), target.data(), m, n, work, grad.data());
  const double eps = 1e-6;
  double max_error = 0, max_grad = 0;
  for (int64_t i = 0; i < net.n_params(); ++i) {
    const double saved = net.params[size_t(i)];
    net.params[size_t(i)] = saved + eps;
    const double plus = predict::mlp_loss(net, x.data(), target.data(), m, n, work);
    net.params[size_t(i)] = saved - eps;
    const double minus = predict::mlp_loss(net, x.data(), target.data(), m, n, work);
    net.params[size_t(i)] = saved;
    const double numeric = (plus - minus) / (2 * eps);
    EXPECT_NEAR(grad[size_t(i)], numeric, 1e-7) << "parameter " << i;
    max_error = std::max(max_error, std::abs(grad[size_t(i)] - numeric));
    max_grad = std::max(max_grad, std::abs(numeric));
  }
  EXPECT_GT(max_grad, 1e-3);  // the check is not vacuous
}

// A network with non-trivial input normalization and random parameters, random inputs and soft targets.
struct GradCase {
  Mlp<double> net;
  std::vector<double> x, target;
  std::vector<uint8_t> mask;
  int64_t n;
};

GradCase make_grad_case(int64_t n_in, int64_t hidden, int64_t groups, int64_t group, int64_t n, bool masked,
                        uint64_t seed) {
  GradCase c{Mlp<double>(n_in, hidden, groups * group, group), {}, {}, {}, n};
  c.net.init(seed);
  predict::SplitMix64 rng(seed + 1);
  for (int64_t j = 0; j < n_in; ++j) {
    c.net.in_mean[size_t(j)] = rng.uniform() - 0.5;
    c.net.in_scale[size_t(j)] = 0.5 + rng.uniform();
  }
  for (double& p : c.net.params) p *= 3.0;  // larger weights: saturated softmaxes and SiLUs are checked too
  for (int64_t i = 0; i < n * n_in; ++i) c.x.push_back(4.0 * rng.uniform() - 2.0);
  for (int64_t i = 0; i < n * groups; ++i) {
    std::vector<double> p(static_cast<size_t>(group));
    double sum = 0;
    for (double& v : p) sum += (v = rng.uniform() < 0.3 ? 0.0 : rng.uniform());
    if (sum == 0) p[0] = sum = 1;
    for (double v : p) c.target.push_back(v / sum);
  }
  if (masked)
    for (int64_t i = 0; i < n * groups; ++i) c.mask.push_back(i % 3 == 1 ? 0 : 1);
  return c;
}

TEST(PredictorMlp, LookaheadShapedGradientMatchesFiniteDifferences) {
  // n_embd 6 -> rank 5 -> 4 slots of 5 experts, some (token, slot) terms masked out.
  GradCase c = make_grad_case(6, 5, 4, 5, 3, true, 7);
  check_gradient(c.net, c.x, c.target, c.mask, c.n);
}

TEST(PredictorMlp, IntentShapedGradientMatchesFiniteDifferences) {
  // pooled [2 * n_embd = 8] -> hidden 6 -> 3 layers of 4 experts, no mask.
  GradCase c = make_grad_case(8, 6, 3, 4, 2, false, 11);
  check_gradient(c.net, c.x, c.target, c.mask, c.n);
}

TEST(PredictorMlp, FloatPathAgreesWithDouble) {
  GradCase c = make_grad_case(24, 16, 3, 8, 5, true, 3);
  Mlp<float> f(c.net.n_in, c.net.n_hidden, c.net.n_out, c.net.group);
  const auto narrow = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  f.params = narrow(c.net.params);
  f.in_mean = narrow(c.net.in_mean);
  f.in_scale = narrow(c.net.in_scale);
  MlpWork<double> wd;
  MlpWork<float> wf;
  std::vector<double> gd(size_t(c.net.n_params()), 0.0);
  std::vector<float> gf(size_t(f.n_params()), 0.0f);
  const double ld = predict::mlp_loss_and_grad(c.net, c.x.data(), c.target.data(), c.mask.data(), c.n, wd, gd.data());
  const double lf =
      predict::mlp_loss_and_grad(f, narrow(c.x).data(), narrow(c.target).data(), c.mask.data(), c.n, wf, gf.data());
  EXPECT_NEAR(lf, ld, 1e-4 * std::abs(ld));
  for (size_t i = 0; i < gd.size(); ++i) EXPECT_NEAR(gf[i], gd[i], 1e-4 * (1 + std::abs(gd[i]))) << i;
}

// ---------------------------------------------------------------------------------------------
// A synthetic model whose routing is a deterministic function of h0: token t carries a class c_t
// (h0 = embedding of c_t + noise), c_{t+1} = (3 c_t + 1) mod 8, and layer l routes to experts
// (c_t + l) mod 8 and (c_t + l + 3) mod 8. Every horizon is learnable from h0_t; the previous
// token's experts are mostly wrong.

constexpr int kEmbd = 16, kExperts = 8, kUsed = 2;

TraceHeader synthetic_header() {
  TraceHeader h;
  h.fingerprint = "00112233445566778899aabbccddeeff";
  h.n_embd = kEmbd;
  h.n_expert = kExperts;
  h.n_expert_used = kUsed;
  h.moe_layers = {0, 1, 3};
  return h;
}

void write_synthetic_traces(const fs::path& dir, int n_sequences, uint64_t seed, int n_files = 2) {
  fs::create_directories(dir);
  const TraceHeader h = synthetic_header();
  predict::SplitMix64 embed_rng(12345);  // the same class embeddings for every file
  std::vector<float> embedding(size_t(kExperts * kEmbd));
  for (float& v : embedding) v = float(2.0 * embed_rng.uniform() - 1.0);
  predict::SplitMix64 rng(seed);
  for (int f = 0; f < n_files; ++f) {
    TraceWriter writer(dir / fmt::format("trace_{}.ctrace", f), h);
    for (int s = f; s < n_sequences; s += n_files) {
      TraceSequence seq;
      seq.prompt_id = fmt::format("s{}", s);
      int c = int(rng.below(kExperts));
      for (int t = 0; t < 24; ++t) {
        TraceToken tok;
        tok.generated = t >= 6;
        tok.token_id = c;
        for (int j = 0; j < kEmbd; ++j)
          tok.h0.push_back(f32_to_f16(embedding[size_t(c * kEmbd + j)] + float(0.2 * (rng.uniform() - 0.5))));
        for (int64_t l = 0; l < h.n_moe_layers(); ++l) {
          const int a = int((c + l) % kExperts), b = int((c + l + 3) % kExperts);
          tok.top_ids.push_back(a);
          tok.top_ids.push_back(b);
          for (int e = 0; e < kExperts; ++e)
            tok.probs.push_back(f32_to_f16(e == a ? 0.5f : e == b ? 0.3f : 0.2f / float(kExperts - 2)));
        }
        seq.tokens.push_back(std::move(tok));
        c = (3 * c + 1) % kExperts;
      }
      writer.add(seq);
    }
    writer.finish();
  }
}

PredictorTrainOptions small_options() {
  PredictorTrainOptions o;
  o.rank = 32;
  o.intent_hidden = 16;
  o.epochs = 40;
  o.batch = 64;
  o.lr = 1e-2f;
  o.patience = 40;
  o.intent_epochs = 60;
  o.intent_patience = 60;
  o.seed = 5;
  return o;
}

const MethodScores& row(const std::vector<MethodScores>& rows, const std::string& method, int32_t horizon) {
  for (const MethodScores& r : rows)
    if (r.method == method && r.horizon == horizon) return r;
  throw std::runtime_error("no row " + method);
}

TEST(PredictorTraining, LearnsADeterministicRoutingAndBeatsThePreviousToken) {
  TempDir tmp("learn");
  write_synthetic_traces(tmp.path() / "train", 48, 1);
  write_synthetic_traces(tmp.path() / "test", 12, 2, 1);
  ThreadPool pool(2);
  const PredictorTrainSummary summary =
      train_predictors(open_traces(tmp.path() / "train"), tmp.path() / "pack", small_options(), pool);
  EXPECT_EQ(summary.train_sequences + summary.heldout_sequences, 48);
  EXPECT_EQ(summary.heldout_sequences, 5);  // round(0.1 * 48)
  auto predictors = Predictors::load(tmp.path() / "pack");
  ASSERT_NE(predictors, nullptr);
  const PredictorEvaluation ev = evaluate_predictors(*predictors, open_traces(tmp.path() / "test"), nullptr);
  ASSERT_EQ(ev.lookahead_budgets, (std::vector<int32_t>{2, 4, 8}));
  for (int32_t h = 0; h <= 2; ++h) {
    const double learned = row(ev.lookahead, "lookahead", h).values[0];
    const double previous = row(ev.lookahead, "previous_token", h).values[0];
    EXPECT_GT(learned, 0.98) << "horizon " << h;
    EXPECT_GT(learned, previous + 0.3) << "horizon " << h;
  }
  // Horizon 0 of a model whose block 0 is MoE covers the later MoE layers only.
  std::vector<ExpertScore> out;
  predictors->lookahead(std::vector<float>(kEmbd, 0.1f), 1, out);
  ASSERT_EQ(out.size(), 2u + 3u + 3u);
  EXPECT_EQ(out[0].horizon, 0);
  EXPECT_EQ(out[0].key.layer, 1);
  EXPECT_EQ(out[1].key.layer, 3);
  EXPECT_EQ(out[2].horizon, 1);
  EXPECT_EQ(out[2].key.layer, 0);
  // The class cycle (of 4) is fixed by the prompt: the intent is learnable too.
  const double intent = row(ev.intent, "intent", kIntentHorizon).values[1];
  const double oracle = row(ev.intent, "oracle", kIntentHorizon).values[1];
  EXPECT_GT(intent, oracle - 0.05);
  EXPECT_GT(intent, row(ev.intent, "frequency", kIntentHorizon).values[1] + 0.2);
}

TEST(PredictorTraining, SameSeedGivesIdenticalBytesForAnyThreadCount) {
  TempDir tmp("determinism");
  write_synthetic_traces(tmp.path() / "train", 20, 3);
  PredictorTrainOptions o = small_options();
  o.epochs = 4;
  o.intent_epochs = 5;
  const auto traces = open_traces(tmp.path() / "train");
  ThreadPool two(2), one(1), three(3);
  train_predictors(traces, tmp.path() / "a", o, two);
  train_predictors(traces, tmp.path() / "b", o, two);
  train_predictors(traces, tmp.path() / "c", o, one);
  train_predictors(traces, tmp.path() / "e", o, three);
  o.seed += 1;
  train_predictors(traces, tmp.path() / "d", o, two);
  const auto bytes = [&](const char* dir, const char* file) { return read_bytes(tmp.path() / dir / file); };
  EXPECT_EQ(bytes("a", "predictors.safetensors"), bytes("b", "predictors.safetensors"));
  EXPECT_EQ(bytes("a", "predictors.json"), bytes("b", "predictors.json"));
  EXPECT_EQ(bytes("a", "predictors.safetensors"), bytes("c", "predictors.safetensors"));
  EXPECT_EQ(bytes("a", "predictors.safetensors"), bytes("e", "predictors.safetensors"));
  EXPECT_NE(bytes("a", "predictors.safetensors"), bytes("d", "predictors.safetensors"));
}

TEST(PredictorPack, SaveLoadRoundTripGivesIdenticalPredictions) {
  TempDir tmp("roundtrip");
  auto pack = std::make_unique<predict::PredictorPack>();
  pack->shape = {kEmbd, kExperts, kUsed, {1, 2, 4}};  // block 0 not MoE: horizon 0 covers all three
  pack->model_fingerprint = "fp";
  pack->horizon = 2;
  pack->slots = predict::lookahead_slots(pack->shape, 2);
  ASSERT_EQ(pack->slots.size(), 9u);
  pack->lookahead = Mlp<float>(kEmbd, 12, 9 * kExperts, kExperts);
  pack->lookahead.init(1);
  pack->intent = Mlp<float>(2 * kEmbd, 10, 3 * kExperts, kExperts);
  pack->intent.init(2);
  for (int j = 0; j < kEmbd; ++j) pack->lookahead.in_mean[size_t(j)] = 0.1f * float(j);
  pack->frequency.assign(3 * kExperts, 1.0f / kExperts);
  predict::save_pack(*pack, tmp.path());
  Predictors original(std::move(pack));
  auto loaded = Predictors::load(tmp.path());
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(loaded->horizon(), 2);
  EXPECT_EQ(loaded->moe_layers(), (std::vector<int32_t>{1, 2, 4}));
  EXPECT_EQ(Predictors::load(tmp.path() / "absent"), nullptr);

  predict::SplitMix64 rng(9);
  std::vector<float> h0(size_t(5 * kEmbd));
  for (float& v : h0) v = float(rng.uniform() * 2 - 1);
  std::vector<ExpertScore> a, b;
  for (int t = 0; t < 5; ++t) {
    const std::span<const float> row_h0(h0.data() + t * kEmbd, kEmbd);
    original.lookahead(row_h0, 3, a);
    const ExpertScore* data_before = a.data();
    loaded->lookahead(row_h0, 3, b);
    ASSERT_EQ(a.size(), 9u * 3u);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].key, b[i].key);
      EXPECT_EQ(a[i].horizon, b[i].horizon);
      EXPECT_EQ(a[i].score, b[i].score);  // bit-identical
    }
    original.lookahead(row_h0, 3, a);
    EXPECT_EQ(a.data(), data_before);  // the output buffer is reused, not reallocated

    // The runtime's top-3 per slot are the largest probabilities of the network's forward pass.
    MlpWork<float> work;
    predict::mlp_forward(original.pack().lookahead, row_h0.data(), 1, work);
    for (size_t s = 0; s < 9; ++s) {
      std::vector<float> probs(work.out.begin() + int64_t(s) * kExperts, work.out.begin() + int64_t(s + 1) * kExperts);
      std::sort(probs.rbegin(), probs.rend());
      for (size_t j = 0; j < 3; ++j) EXPECT_EQ(a[s * 3 + j].score, probs[j]);
      EXPECT_EQ(a[s * 3].horizon, original.pack().slots[s].horizon);
    }
  }
  original.intent(h0, 5, a);
  loaded->intent(h0, 5, b);
  ASSERT_EQ(a.size(), 3u * kExperts);
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].key, b[i].key);
    EXPECT_EQ(a[i].score, b[i].score);
    EXPECT_EQ(a[i].horizon, kIntentHorizon);
    if (i < kExperts) sum += a[i].score;
  }
  EXPECT_NEAR(sum, 1.0, 1e-5);  // shares of one layer
  expect_error([&] { original.intent({}, 0, a); }, {"no tokens"});
}

TEST(PredictorPack, DamagedFilesAreErrors) {
  TempDir tmp("damaged");
  write_synthetic_traces(tmp.path() / "train", 6, 4);
  PredictorTrainOptions o = small_options();
  o.epochs = 1;
  o.intent_epochs = 1;
  ThreadPool pool(1);
  train_predictors(open_traces(tmp.path() / "train"), tmp.path() / "pack", o, pool);
  std::string json = read_bytes(tmp.path() / "pack" / "predictors.json");
  const size_t at = json.find("\"rank\": 32");
  ASSERT_NE(at, std::string::npos);
  json.replace(at, 10, "\"rank\": 31");
  std::ofstream(tmp.path() / "pack" / "predictors.json", std::ios::binary | std::ios::trunc) << json;
  expect_error([&] { Predictors::load(tmp.path() / "pack"); },
               {"lookahead.fc1.weight", "shape [32,16], expected [31,16]"});
  // Crafted numbers are refused before anything is allocated from them (a rank of INT32_MAX
  // allocated until out of memory), and a number where an integer belongs is named, not cast.
  for (const auto& [text, fragment] : {std::pair<std::string, std::string>{"\"rank\": 2147483647", "lookahead.rank"},
                                       {"\"rank\": 4.3e84", "lookahead.rank is not an integer"},
                                       {"\"rank\": -3", "lookahead.rank"}}) {
    std::string crafted = json;
    crafted.replace(at, 10, text);
    std::ofstream(tmp.path() / "pack" / "predictors.json", std::ios::binary | std::ios::trunc) << crafted;
    expect_error([&] { Predictors::load(tmp.path() / "pack"); }, {"predictors.json", fragment});
  }
  fs::remove(tmp.path() / "pack" / "predictors.json");
  expect_error([&] { Predictors::load(tmp.path() / "pack"); }, {"predictors.json", "missing"});
}

TEST(PredictorTraining, MismatchedTraceHeadersAreErrors) {
  TempDir tmp("mismatch");
  write_synthetic_traces(tmp.path() / "train", 4, 1, 1);
  TraceHeader other = synthetic_header();
  other.n_expert = 6;
  {
    TraceWriter writer(tmp.path() / "train" / "trace_9.ctrace", other);
    writer.finish();
  }
  ThreadPool pool(1);
  expect_error([&] { train_predictors(open_traces(tmp.path() / "train"), tmp.path() / "pack", small_options(), pool); },
               {"trace_9.ctrace", "6 experts per layer does not match 8"});
  EXPECT_FALSE(fs::exists(tmp.path() / "pack" / "predictors.safetensors"));

  // Evaluation traces must match the predictors.
  fs::remove(tmp.path() / "train" / "trace_9.ctrace");
  PredictorTrainOptions o = small_options();
  o.epochs = 1;
  o.intent_epochs = 1;
  train_predictors(open_traces(tmp.path() / "train"), tmp.path() / "pack", o, pool);
  auto predictors = Predictors::load(tmp.path() / "pack");
  other = synthetic_header();
  other.moe_layers = {0, 1, 2};
  fs::create_directories(tmp.path() / "eval");
  {
    TraceWriter writer(tmp.path() / "eval" / "trace_0.ctrace", other);
    writer.finish();
  }
  expect_error([&] { evaluate_predictors(*predictors, open_traces(tmp.path() / "eval"), nullptr); },
               {"trace_0.ctrace", "MoE layers [0,1,2] do not match [0,1,3]"});
}

// ---------------------------------------------------------------------------------------------
// Evaluation on a case small enough to compute by hand (see the comments for each number).

TEST(PredictorEvaluationTest, MetricsMatchHandComputedValues) {
  TempDir tmp("handmade");
  TraceHeader h;
  h.fingerprint = "hand";
  h.n_embd = 2;
  h.n_expert = 4;
  h.n_expert_used = 1;
  h.moe_layers = {1};  // block 0 dense: horizon 0 covers layer 1
  // Layer-1 expert of tokens 0..4: 3, 0 (prompt), 2, 2, 1 (generated).
  const int ids[5] = {3, 0, 2, 2, 1};
  {
    fs::create_directories(tmp.path() / "eval");
    TraceWriter writer(tmp.path() / "eval" / "t.ctrace", h);
    TraceSequence seq;
    seq.prompt_id = "only";
    for (int t = 0; t < 5; ++t) {
      TraceToken tok;
      tok.generated = t >= 2;
      tok.h0 = {f32_to_f16(float(t)), f32_to_f16(1.0f)};
      tok.top_ids = {ids[t]};
      for (int e = 0; e < 4; ++e) tok.probs.push_back(f32_to_f16(e == ids[t] ? 0.7f : 0.1f));
      seq.tokens.push_back(tok);
    }
    writer.add(seq);
    writer.finish();
  }
  // Constant predictions: fc2 weights zero, the biases rank the experts.
  auto pack = std::make_unique<predict::PredictorPack>();
  pack->shape = {2, 4, 1, {1}};
  pack->model_fingerprint = "hand";
  pack->horizon = 1;
  pack->slots = predict::lookahead_slots(pack->shape, 1);  // (0, layer 1), (1, layer 1)
  pack->lookahead = Mlp<float>(2, 3, 2 * 4, 4);
  pack->lookahead.init(1);
  std::fill(pack->lookahead.params.begin() + pack->lookahead.w2_offset(),
            pack->lookahead.params.begin() + pack->lookahead.b2_offset(), 0.0f);
  const float look_bias[8] = {2, 1, 3, 0,   // horizon 0: order 2, 0, 1, 3
                              0, 3, 1, 2};  // horizon 1: order 1, 3, 2, 0
  std::copy(look_bias, look_bias + 8, pack->lookahead.params.begin() + pack->lookahead.b2_offset());
  pack->intent = Mlp<float>(4, 3, 4, 4);
  pack->intent.init(2);
  std::fill(pack->intent.params.begin() + pack->intent.w2_offset(),
            pack->intent.params.begin() + pack->intent.b2_offset(), 0.0f);
  const float intent_bias[4] = {0, 1, 3, 2};  // order 2, 3, 1, 0
  std::copy(intent_bias, intent_bias + 4, pack->intent.params.begin() + pack->intent.b2_offset());
  pack->frequency = {0.1f, 0.2f, 0.3f, 0.4f};  // frequency order 3, 2, 1, 0
  predict::save_pack(*pack, tmp.path() / "pack");
  auto predictors = Predictors::load(tmp.path() / "pack");
  const PredictorEvaluation ev = evaluate_predictors(*predictors, open_traces(tmp.path() / "eval"), nullptr);

  ASSERT_EQ(ev.lookahead_budgets, (std::vector<int32_t>{1, 2, 4}));
  EXPECT_EQ(ev.positions, (std::vector<int64_t>{3, 2}));  // h0: tokens 2, 3, 4; h1: tokens 2, 3
  const auto expect_row = [&](const std::vector<MethodScores>& rows, const std::string& method, int32_t horizon,
                              std::vector<double> expected, double tolerance = 1e-12) {
    const MethodScores& r = row(rows, method, horizon);
    ASSERT_EQ(r.values.size(), expected.size()) << method;
    for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(r.values[i], expected[i], tolerance) << method << " " << i;
  };
  // Horizon 0, truths 2, 2, 1. Learned [2,0,..]: hits, hits, misses at B = 1 and 2.
  expect_row(ev.lookahead, "lookahead", 0, {2.0 / 3, 2.0 / 3, 1});
  // Previous token (t - 1): 0 -> miss, 2 -> hit, 2 -> miss; at B = 2 filled by frequency (3): no change.
  expect_row(ev.lookahead, "previous_token", 0, {1.0 / 3, 1.0 / 3, 1});
  // Frequency [3, 2]: B = 1 never; B = 2 catches the two 2s.
  expect_row(ev.lookahead, "frequency", 0, {0, 2.0 / 3, 1});
  expect_row(ev.lookahead, "oracle", 0, {1, 1, 1});
  // Horizon 1, truths 2 (t=2), 1 (t=3). Learned [1,3,..]: miss, hit.
  expect_row(ev.lookahead, "lookahead", 1, {0.5, 0.5, 1});
  // Previous token (token t): 2 -> hit; 2 -> miss, and [2, 3] misses 1.
  expect_row(ev.lookahead, "previous_token", 1, {0.5, 0.5, 1});
  expect_row(ev.lookahead, "frequency", 1, {0, 0.5, 1});
  // Intent: generated shares [0, 1/3, 2/3, 0] (held as f32); budgets 25% and 50% of 4 experts = 1, 2.
  ASSERT_EQ(ev.intent_budgets, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(ev.intent_sequences, 1);
  expect_row(ev.intent, "intent", kIntentHorizon, {2.0 / 3, 2.0 / 3}, 1e-6);  // [2, 3]
  expect_row(ev.intent, "prompt_experts", kIntentHorizon, {0, 0}, 1e-6);      // prompt used 3 and 0
  expect_row(ev.intent, "frequency", kIntentHorizon, {0, 2.0 / 3}, 1e-6);     // [3, 2]
  expect_row(ev.intent, "oracle", kIntentHorizon, {2.0 / 3, 1}, 1e-6);        // [2, 1]
  EXPECT_EQ(ev.frequency_source, "training traces");
  // B = 1 at horizon 1: learned 0.5 ties previous_token 0.5, which is not "beating" it.
  bool found = false;
  for (const std::string& v : ev.verdicts)
    if (v.rfind("horizon 1 B=1:", 0) == 0) {
      found = true;
      EXPECT_NE(v.find("does NOT beat"), std::string::npos) << v;
    }
  EXPECT_TRUE(found);
  const std::string table = format_evaluation(ev);
  EXPECT_NE(table.find("previous_token"), std::string::npos);
  EXPECT_NE(evaluation_json(ev).find("\"positions\""), std::string::npos);
}

// The gate baseline uses layer l's own router and post-attention norm weights: on a trace whose
// layer-2 experts are, by construction, the top-2 of that gate (scalar reference below), it has
// recall 1; on one whose experts are the gate's bottom 2, recall 0 even at B = 4.
TEST(PredictorEvaluationTest, GateBaselineUsesTheLaterLayersRouter) {
  const fs::path model_dir = fs::path(CHRONOS_TEST_DATA_DIR) / "models" / "qwen2_moe-f32";
  const auto model = Model::load(model_dir);
  const ModelConfig& c = model->config();
  ASSERT_EQ(c.n_embd, 64);
  ASSERT_TRUE(c.is_moe_layer(0) && !c.is_moe_layer(1) && c.is_moe_layer(2));
  const LayerWeights& layer2 = model->weights().layers[2];
  ASSERT_EQ(layer2.router.dtype, DType::kF32);
  const auto* router = static_cast<const float*>(layer2.router.data);  // [8, 64]

  TempDir tmp("gate");
  TraceHeader h;
  h.fingerprint = model_fingerprint(model_dir);
  h.n_embd = 64;
  h.n_expert = 8;
  h.n_expert_used = 2;
  h.moe_layers = {0, 2};
  predict::SplitMix64 rng(17);
  for (const bool top : {true, false}) {
    const fs::path dir = tmp.path() / (top ? "top" : "bottom");
    fs::create_directories(dir);
    TraceWriter writer(dir / "t.ctrace", h);
    TraceSequence seq;
    seq.prompt_id = "gate";
    for (int t = 0; t < 12; ++t) {
      TraceToken tok;
      tok.generated = t >= 2;
      std::vector<double> x(64);
      for (int j = 0; j < 64; ++j) {
        tok.h0.push_back(f32_to_f16(float(2 * rng.uniform() - 1)));
        x[size_t(j)] = f16_to_f32(tok.h0.back()) * double(layer2.ffn_norm[size_t(j)]);
      }
      std::vector<std::pair<double, int>> logits;
      for (int e = 0; e < 8; ++e) {
        double z = 0;
        for (int j = 0; j < 64; ++j) z += double(router[e * 64 + j]) * x[size_t(j)];
        logits.push_back({top ? -z : z, e});  // ascending sort: the gate's top (or bottom) first
      }
      std::sort(logits.begin(), logits.end());
      tok.top_ids = {0, 1, logits[0].second, logits[1].second};  // layer 0, then layer 2
      for (int i = 0; i < 16; ++i) tok.probs.push_back(f32_to_f16(0.125f));
      seq.tokens.push_back(tok);
    }
    writer.add(seq);
    writer.finish();
  }
  auto pack = std::make_unique<predict::PredictorPack>();
  pack->shape = {64, 8, 2, {0, 2}};
  pack->model_fingerprint = h.fingerprint;
  pack->horizon = 1;
  pack->slots = predict::lookahead_slots(pack->shape, 1);
  pack->lookahead = Mlp<float>(64, 4, std::ssize(pack->slots) * 8, 8);
  pack->lookahead.init(3);
  pack->intent = Mlp<float>(128, 4, 16, 8);
  pack->intent.init(4);
  Predictors predictors(std::move(pack));
  const PredictorEvaluation top = evaluate_predictors(predictors, open_traces(tmp.path() / "top"), model.get());
  EXPECT_EQ(row(top.lookahead, "gate", 0).values, (std::vector<double>{1, 1, 1}));
  const PredictorEvaluation bottom = evaluate_predictors(predictors, open_traces(tmp.path() / "bottom"), model.get());
  EXPECT_EQ(row(bottom.lookahead, "gate", 0).values, (std::vector<double>{0, 0, 1}));
  EXPECT_EQ(bottom.positions[0], 10);
  EXPECT_GT(bottom.layer_flops, 0);
  // Without a model the gate row is absent and the table says why.
  const PredictorEvaluation none = evaluate_predictors(predictors, open_traces(tmp.path() / "top"), nullptr);
  for (const MethodScores& r : none.lookahead) EXPECT_NE(r.method, "gate");
  EXPECT_NE(format_evaluation(none).find("gate baseline not computed"), std::string::npos);
}

}  // namespace
}  // namespace chronos
