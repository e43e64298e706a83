// The prefetch mechanism as the CLI drives it (begin_request at the prompt, begin_step before every
// forward): lru and predict against the resident model, predict against none on hits, the intent
// set's cap, stale-request cancellation, protections expiring, and a deadline-bounded stress of
// wait mode.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "chronos/backend.h"
#include "chronos/expert_streamer.h"
#include "chronos/generate.h"
#include "chronos/model_runner.h"
#include "chronos/pack.h"
#include "chronos/pack_format.h"
#include "chronos/predictors.h"
#include "chronos/thread_pool.h"
#include "chronos/tokenizer.h"
#include "chronos/trace.h"
#include "predict/pack.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

fs::path fixture(const std::string& name) { return fs::path(CHRONOS_TEST_DATA_DIR) / "models" / name; }
const fs::path kDemo = fs::path(CHRONOS_SOURCE_DIR) / "models" / "chronos-demo";

const std::vector<PromptRecord> kPrompts = {{"a", "prose", "The river keeps its own time, and the mill"},
                                            {"b", "code", "int main() { return 0; }"},
                                            {"c", "prose", "Le moulin tourne toujours"},
                                            {"d", "prose", "A mill by the river, and the"}};

int64_t slot_bytes(const fs::path& pack_dir) {
  int64_t bytes = 0;
  for (const auto& [key, e] : PackManifest::load(pack_dir).experts) bytes = std::max(bytes, e.bytes);
  return bytes;
}

// One model folder (checkpoint or pack) ready to generate, resident or through an ExpertStreamer,
// driven as the CLI drives it. Requests run one after another on the same streamer, as in bench.
class Session {
 public:
  Session(const fs::path& dir, const StreamerOptions* streaming, int64_t batch = 16)
      : model_(Model::load(dir)), tokenizer_(Tokenizer::load(dir)), pool_(2) {
    if (streaming != nullptr) {
      backend_ = make_cpu_backend();
      streamer_ = std::make_unique<ExpertStreamer>(*model_, dir, *backend_, *streaming);
    }
    // Wired as the CLI wires it: the runner gets the streamer's hooks, the generator drives it.
    generator_ = std::make_unique<Generator>(*model_, tokenizer_, pool_, 256, batch,
                                             streamer_ ? streamer_->hooks() : ForwardHooks{});
    generator_->stream_experts_with(streamer_.get());
  }

  // Greedy tokens of `prompt`; `before_step` (if set) sees every forward step after the streamer begins it.
  std::vector<int32_t> run(const std::string& prompt, int64_t n_tokens,
                           const std::function<void(int64_t pos)>& before_step = {}) {
    GenerateOptions options;
    options.max_new_tokens = n_tokens;
    options.ignore_eos = true;
    options.on_step = [&](int64_t pos) {
      if (before_step) before_step(pos);
    };
    return generator_->generate(tokenizer_.encode(prompt, true), options, [](std::string_view) { return true; }).tokens;
  }

  Model& model() { return *model_; }
  ExpertStreamer& streamer() { return *streamer_; }

 private:
  std::unique_ptr<Model> model_;
  Tokenizer tokenizer_;
  ThreadPool pool_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ExpertStreamer> streamer_;
  std::unique_ptr<Generator> generator_;
};

std::vector<std::vector<int32_t>> resident_tokens(const fs::path& model_dir, int64_t n_tokens) {
  Session session(model_dir, nullptr);
  std::vector<std::vector<int32_t>> out;
  for (const PromptRecord& p : kPrompts) out.push_back(session.run(p.text, n_tokens));
  return out;
}

class PrefetchMechanism : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : name)
      if (c == '/') c = '_';
    work_ = fs::temp_directory_path() / ("chronos_prefetch_mechanism_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(work_);
    fs::create_directories(work_);
  }
  void TearDown() override { fs::remove_all(work_); }

  // Greedy traces of kPrompts, a pack without clustering, and predictors trained on those traces.
  fs::path pack_with_predictors(const fs::path& model_dir, const PredictorTrainOptions& train,
                                int64_t trace_tokens = 16) {
    const fs::path traces = work_ / "traces", packed = work_ / "pack";
    ThreadPool pool(2);
    {
      const auto model = Model::load(model_dir);
      const Tokenizer tokenizer = Tokenizer::load(model_dir);
      TraceOptions options;
      options.max_new_tokens = trace_tokens;
      record_traces(*model, tokenizer, model_dir, kPrompts, traces, options, pool, [](const TraceProgress&) {});
      PackOptions pack_options;
      pack_options.method = ClusterMethod::kNone;
      write_pack(*model, model_dir, packed, pack_options, [](int64_t, int64_t) {});
    }
    train_predictors(open_traces(traces), packed, train, pool);
    return packed;
  }

  // Briefly trained: their quality does not matter, only that they make requests.
  static PredictorTrainOptions brief_training() {
    PredictorTrainOptions train;
    train.epochs = 2;
    train.rank = 16;
    train.intent_hidden = 16;
    train.intent_epochs = 4;
    return train;
  }

  fs::path work_;
};

// ---------------------------------------------------------------------------------------------
// lru and predict at a quarter and a half of the experts, on several architectures.

class PrefetchModesAtPartialBudgets : public PrefetchMechanism, public ::testing::WithParamInterface<const char*> {};

TEST_P(PrefetchModesAtPartialBudgets, WaitModeIsTokenIdenticalToTheResidentModel) {
  const fs::path dir = fixture(GetParam());
  const fs::path packed = pack_with_predictors(dir, brief_training());
  const int64_t n_tokens = 32;
  const auto resident = resident_tokens(dir, n_tokens);
  const int64_t all = Model::load(dir)->sizes().expert_bytes;
  for (const int64_t budget : {all / 4, all / 2}) {
    for (const PrefetchMode mode : {PrefetchMode::kLru, PrefetchMode::kPredict}) {
      for (const EvictionPolicy policy : {EvictionPolicy::kLru, EvictionPolicy::kLruFrequency}) {
        StreamerOptions options;
        options.budget_bytes = budget;
        options.mode = mode;
        options.policy = policy;
        Session session(packed, &options);
        for (size_t p = 0; p < kPrompts.size(); ++p) {
          EXPECT_EQ(session.run(kPrompts[p].text, n_tokens), resident[p])
              << "prompt " << kPrompts[p].id << ", budget " << budget << " (" << session.streamer().n_slots()
              << " slots), prefetch " << int(mode) << ", eviction " << int(policy);
        }
        const StreamerStats stats = session.streamer().stats();
        EXPECT_LE(stats.cache.peak_bytes, budget);
        EXPECT_EQ(stats.fallbacks, 0);
        EXPECT_GT(stats.predicted, 0) << "the prefetch mode made no request";
        EXPECT_GT(stats.misses, 0) << "the budget is below the model: some lookups must miss";
        if (mode == PrefetchMode::kPredict) {
          EXPECT_GT(stats.predict_seconds, 0.0);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PrefetchModesAtPartialBudgets,
                         ::testing::Values("qwen2_moe-f32", "mixtral-f32", "olmoe-f32", "qwen3_moe-f32"));

// ---------------------------------------------------------------------------------------------
// predict against none on hits, when the predictors have learned the routing they will see.

// Greedy decoding is deterministic: predictors trained (to convergence, nothing held out) on traces
// of the very prompts generated here have seen every block-0 state and the routing that followed
// it. At half of mixtral's 24 experts, demand loading alone hits about 42% of lookups; the learned
// predictions reach about 70%. Briefly trained predictors (two epochs) reach only about 47%, so
// the margin asserted here is the LookaheadRouter's learning, not merely the extra requests.
TEST_F(PrefetchMechanism, PredictBeatsNoneOnHitsWhereItLearnedTheRouting) {
  const fs::path dir = fixture("mixtral-f32");
  const int64_t n_tokens = 24;
  PredictorTrainOptions train;
  train.epochs = 60;
  train.patience = 60;
  train.rank = 64;
  train.batch = 32;
  train.lr = 3e-3f;
  train.holdout = 0;
  train.intent_hidden = 16;
  train.intent_epochs = 4;
  const fs::path packed = pack_with_predictors(dir, train, n_tokens);
  StreamerStats none, predict;
  for (const PrefetchMode mode : {PrefetchMode::kNone, PrefetchMode::kPredict}) {
    StreamerOptions options;
    options.budget_bytes = 12 * slot_bytes(packed);
    options.mode = mode;
    Session session(packed, &options);
    ASSERT_EQ(session.streamer().n_slots(), 12);
    for (const PromptRecord& p : kPrompts) session.run(p.text, n_tokens);
    (mode == PrefetchMode::kNone ? none : predict) = session.streamer().stats();
  }
  ASSERT_EQ(none.lookups, predict.lookups) << "the same tokens route the same experts";
  const auto hit_rate = [](const StreamerStats& s) { return double(s.hits + s.hits_loading) / double(s.lookups); };
  EXPECT_LT(hit_rate(none), 0.6) << "demand loading alone should miss a lot at this budget";
  EXPECT_GE(hit_rate(predict), hit_rate(none) + 0.15)
      << "none: " << none.hits << " + " << none.hits_loading << " of " << none.lookups << "; predict: " << predict.hits
      << " + " << predict.hits_loading << " of " << predict.lookups << " (" << predict.predicted << " requests)";
  EXPECT_LT(predict.misses, none.misses);
}

// ---------------------------------------------------------------------------------------------
// Prefetch filters: a probability threshold and a cap on bytes read ahead per step.

TEST_F(PrefetchMechanism, PredictionsUnderTheThresholdOrOverTheCapAreNotRead) {
  const fs::path dir = fixture("mixtral-f32");
  const fs::path packed = pack_with_predictors(dir, brief_training());
  const int64_t n_tokens = 16;
  const auto resident = resident_tokens(dir, n_tokens);
  const int64_t slot = slot_bytes(packed);
  struct Run {
    StreamerStats stats;
    int64_t steps = 0;
  };
  const auto run = [&](float min_score, int64_t cap_bytes, PrefetchMode mode = PrefetchMode::kPredict) {
    StreamerOptions options;
    options.budget_bytes = 12 * slot;
    options.mode = mode;
    options.intent_share = 0.0;  // only the per-token predictions are read ahead
    options.prefetch_min_score = min_score;
    options.prefetch_bytes_per_step = cap_bytes;
    Session session(packed, &options);
    Run r;
    for (size_t p = 0; p < kPrompts.size(); ++p)
      EXPECT_EQ(session.run(kPrompts[p].text, n_tokens, [&](int64_t) { ++r.steps; }), resident[p])
          << "prompt " << kPrompts[p].id << ", min score " << min_score << ", cap " << cap_bytes;
    r.stats = session.streamer().stats();
    return r;
  };
  const Run all = run(0.0f, 0);
  EXPECT_EQ(all.stats.predictions_dropped, 0);
  // One absent expert per step at most: no more prefetch reads than steps, where unfiltered
  // predictions read more.
  const Run capped = run(0.0f, slot);
  EXPECT_GT(all.stats.cache.prefetch_loads, capped.steps);
  EXPECT_LE(capped.stats.cache.prefetch_loads, capped.steps);
  EXPECT_GT(capped.stats.predictions_dropped, 0);
  // The default of the CLI: the bytes of half the model's top-k experts (at least one) per step.
  const int64_t top_k = Model::load(packed)->config().n_expert_used;
  const Run half = run(0.0f, StreamerOptions::kPrefetchCapHalfTopK);
  EXPECT_LE(half.stats.cache.prefetch_loads, std::max<int64_t>(1, top_k / 2) * half.steps);
  EXPECT_GT(half.stats.predictions_dropped, 0);
  // The filters are the predictions': the previous token's experts of --prefetch lru are not capped.
  const Run lru = run(0.0f, StreamerOptions::kPrefetchCapHalfTopK, PrefetchMode::kLru);
  EXPECT_EQ(lru.stats.predictions_dropped, 0);
  EXPECT_GT(lru.stats.predicted, top_k * lru.steps);
  // A probability no prediction reaches: nothing is read ahead.
  const Run none = run(1.0f, 0);
  EXPECT_EQ(none.stats.cache.prefetch_loads, 0);
  EXPECT_EQ(none.stats.predictions_dropped, all.stats.predicted);
  EXPECT_EQ(none.stats.predicted, 0);
}

// ---------------------------------------------------------------------------------------------
// The intent set at prefill.

// At the first forward step of a request (the prompt, in one prefill chunk here) the block
// observer makes the intent requests (the IntentClassifier's most used experts) and one
// LookaheadRouter call's requests; stats.predicted counts both. The lookahead's share is the size
// of one lookahead() answer, so what is left is the intent set: floor(intent_share * n_slots), or
// every routed expert when that is more.
TEST_F(PrefetchMechanism, IntentSetAtPrefillRespectsItsCap) {
  const fs::path dir = fixture("mixtral-f32");
  const fs::path packed = pack_with_predictors(dir, brief_training());
  const auto predictors = Predictors::load(packed);
  ASSERT_TRUE(predictors);
  const int64_t n_routed = int64_t(predictors->moe_layers().size()) * predictors->n_expert();  // 24
  std::vector<ExpertScore> scores;
  predictors->lookahead(std::vector<float>(size_t(predictors->n_embd()), 0.5f), predictors->n_expert_used(), scores);
  const auto lookahead_requests = std::ssize(scores);
  ASSERT_GT(lookahead_requests, 0);

  const int64_t slot = slot_bytes(packed);
  struct Case {
    int64_t n_slots;
    double share;
  };
  for (const Case c : {Case{12, 0.5}, Case{12, 0.25}, Case{12, 1.0}, Case{12, 0.0}, Case{7, 0.5}, Case{48, 1.0}}) {
    StreamerOptions options;
    options.budget_bytes = c.n_slots * slot;
    options.mode = PrefetchMode::kPredict;
    options.intent_share = c.share;
    Session session(packed, &options, /*batch=*/64);  // longer than the prompts: one block-0 call
    ASSERT_EQ(session.streamer().n_slots(), c.n_slots);
    const int64_t cap = std::min(int64_t(double(c.n_slots) * c.share), n_routed);
    for (const PromptRecord& p : {kPrompts[0], kPrompts[1]}) {  // every request has its own intent set
      int64_t calls = 0, before = -1, after = -1;
      session.run(p.text, 4, [&](int64_t) {
        if (calls == 0) before = session.streamer().stats().predicted;  // before begin_request
        if (calls == 1) after = session.streamer().stats().predicted;   // after the first forward step
        ++calls;
      });
      ASSERT_GE(calls, 2);
      const int64_t intent_requests = after - before - lookahead_requests;
      EXPECT_EQ(intent_requests, cap) << c.n_slots << " slots, intent share " << c.share << ", prompt " << p.id;
      EXPECT_LE(double(intent_requests), std::max(double(c.n_slots) * c.share, 0.0));
    }
  }
}

// Many sequences in one step: each sequence whose request began gets its own intent set from its
// rows, and each sequence's newest row its own lookahead, all queued together. (Reading the step's
// last row only, as one sequence does, would make one lookahead per step and lose the others.)
TEST_F(PrefetchMechanism, EachSequenceOfABatchGetsItsIntentSetAndLookahead) {
  const fs::path packed = pack_with_predictors(fixture("mixtral-f32"), brief_training());
  const auto predictors = Predictors::load(packed);
  ASSERT_TRUE(predictors);
  std::vector<ExpertScore> scores;
  predictors->lookahead(std::vector<float>(size_t(predictors->n_embd()), 0.5f), predictors->n_expert_used(), scores);
  const auto lookahead = std::ssize(scores);
  const int64_t n_routed = int64_t(predictors->moe_layers().size()) * predictors->n_expert();

  const auto model = Model::load(packed);
  const auto backend = make_cpu_backend();
  StreamerOptions options;
  options.budget_bytes = 12 * slot_bytes(packed);
  options.mode = PrefetchMode::kPredict;
  options.intent_share = 0.5;
  const int64_t intent = std::min<int64_t>(6, n_routed);  // each sequence's set: half of 12 slots
  ExpertStreamer streamer(*model, packed, *backend, options);
  ThreadPool pool(2);
  auto runner = make_cpu_runner(*model, pool, 64, 32, streamer.hooks(), 3);
  std::vector<float> logits(size_t(3 * model->config().n_vocab));
  const int32_t a = runner->add_sequence(), b = runner->add_sequence(), c = runner->add_sequence();
  const auto step = [&](const Batch& batch) {
    const int64_t before = streamer.stats().predicted;
    streamer.begin_step();
    runner->forward(batch, logits.data());
    return streamer.stats().predicted - before;
  };
  Batch batch;
  // A and B prefill together (their rows interleaved), C is idle: two intent sets, two lookaheads.
  streamer.begin_request(a);
  streamer.begin_request(b);
  for (int32_t t = 0; t < 5; ++t) {
    batch.add(a, t, 3 + t, t == 4);
    if (t < 3) batch.add(b, t, 20 + t, t == 2);
  }
  EXPECT_EQ(step(batch), 2 * intent + 2 * lookahead);
  // A and B decode while C prefills: C's intent set, three lookaheads.
  streamer.begin_request(c);
  batch.clear();
  batch.add(a, 5, 7, true);
  batch.add(c, 0, 9, false);
  batch.add(c, 1, 10, true);
  batch.add(b, 3, 11, true);
  EXPECT_EQ(step(batch), intent + 3 * lookahead);
  // Decode rows only: one lookahead each, no intent set.
  batch.clear();
  batch.add(c, 2, 12, true);
  batch.add(a, 6, 13, true);
  EXPECT_EQ(step(batch), 2 * lookahead);
}

// ---------------------------------------------------------------------------------------------
// Stale requests.

// Holds every read at the fault injector until opened, so that what is queued stays queued. With
// io_uring the injector runs on the prefetcher's I/O thread; with pread on a worker, and a queue
// depth of one keeps the I/O thread from taking more. Opened on destruction of its Opener.
struct ReadGate {
  std::mutex mutex;
  std::condition_variable changed;
  bool open = false;
  int entered = 0;

  int hold(const ReadRequest&) {
    std::unique_lock lock(mutex);
    ++entered;
    changed.notify_all();
    changed.wait(lock, [&] { return open; });
    return 0;
  }
  void open_now() {
    std::lock_guard lock(mutex);
    open = true;
    changed.notify_all();
  }
  bool wait_entered(int n) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 20s, [&] { return entered >= n; });
  }
  struct Opener {
    std::shared_ptr<ReadGate> gate;
    ~Opener() { gate->open_now(); }
  };
};

// The AsyncPrefetcher alone on a packed fixture, its reads held at a gate.
class StaleRequests : public PrefetchMechanism {
 protected:
  void SetUp() override {
    PrefetchMechanism::SetUp();
    const fs::path model_dir = fixture("mixtral-f32");
    PackOptions options;
    options.method = ClusterMethod::kNone;
    write_pack(*Model::load(model_dir), model_dir, work_ / "pack", options, [](int64_t, int64_t) {});
    manifest_ = PackManifest::load(work_ / "pack");
    for (const auto& [key, e] : manifest_.experts) keys_.push_back(key);
    backend_ = make_cpu_backend();
  }

  fs::path work_pack() const { return work_ / "pack"; }

  PackManifest manifest_;
  std::vector<ExpertKey> keys_;  // every expert of the pack, sorted
  std::unique_ptr<Backend> backend_;
};

TEST_F(StaleRequests, QueuedRequestsOfAPastStepAreDroppedAndNeverRead) {
  for (const bool force_pread : {false, true}) {  // the injector runs on the I/O thread, or on a pread worker
    SCOPED_TRACE(force_pread ? "pread" : "default I/O backend");
    const int64_t slot = slot_bytes(work_pack());
    SharedExpertCache cache(*backend_, ExpertCache::Options{slot * std::ssize(keys_), slot});
    auto gate = std::make_shared<ReadGate>();
    AsyncPrefetcher::Options options;
    options.queue_depth = 1;
    options.force_pread = force_pread;
    options.fault_injector = [gate](const ReadRequest& r) { return gate->hold(r); };
    AsyncPrefetcher prefetcher(manifest_, work_pack(), cache, *backend_, options);
    const ReadGate::Opener opener{gate};  // before the prefetcher drains

    // keys_[0] occupies the only read; everything below waits in the queue.
    const FetchRequest first{keys_[0], FetchPriority::kDemand, 0};
    prefetcher.enqueue({&first, 1});
    ASSERT_TRUE(gate->wait_entered(1)) << "the first read never reached the disk";
    const std::vector<FetchRequest> queued = {
        {keys_[1], FetchPriority::kSameToken, 1},  // stale at step 2
        {keys_[2], FetchPriority::kNextToken, 1},  // stale
        {keys_[3], FetchPriority::kLater, 1},      // stale
        {keys_[4], FetchPriority::kIntent, 1},     // stale
        {keys_[5], FetchPriority::kDemand, 1},     // a demand is never stale: the compute side waits for it
        {keys_[6], FetchPriority::kNextToken, 2},  // made for step 2: not stale yet
        {keys_[7], FetchPriority::kLater, 3},      // for step 3
        {keys_[8], FetchPriority::kLater, 1},      // predicted, then demanded: the more urgent wins
        {keys_[8], FetchPriority::kDemand, 1},
    };
    prefetcher.enqueue(queued);
    EXPECT_EQ(prefetcher.stats().cancelled, 0);
    prefetcher.cancel_stale(2);
    EXPECT_EQ(prefetcher.stats().cancelled, 4);
    prefetcher.cancel_stale(2);  // nothing more is stale
    EXPECT_EQ(prefetcher.stats().cancelled, 4);

    gate->open_now();
    const std::vector<ExpertKey> kept = {keys_[0], keys_[5], keys_[6], keys_[7], keys_[8]};
    cache.lock().wait_until(std::chrono::steady_clock::now() + 20s,
                            [&] { return prefetcher.stats().reads >= std::ssize(kept); });
    ASSERT_EQ(prefetcher.error(), nullptr);
    EXPECT_EQ(prefetcher.stats().reads, std::ssize(kept));
    const auto locked = cache.lock();
    for (const ExpertKey& key : kept)
      EXPECT_EQ(locked->find(key).state, SlotState::kReady) << "layer " << key.layer << " expert " << key.expert;
    for (size_t i = 1; i <= 4; ++i)
      EXPECT_EQ(locked->find(keys_[i]).state, SlotState::kEmpty)
          << "cancelled, yet read: layer " << keys_[i].layer << " expert " << keys_[i].expert;
  }
}

// The streamer's begin_step is what cancels: requests made for the step that just ended go.
TEST_F(StaleRequests, BeginStepCancelsWhatThePreviousStepLeftQueued) {
  const fs::path packed = work_pack();
  const auto model = Model::load(packed);
  auto gate = std::make_shared<ReadGate>();
  StreamerOptions options;
  options.budget_bytes = slot_bytes(packed) * std::ssize(keys_);
  options.prefetch.queue_depth = 1;
  options.prefetch.fault_injector = [gate](const ReadRequest& r) { return gate->hold(r); };
  ExpertStreamer streamer(*model, packed, *backend_, options);
  const ReadGate::Opener opener{gate};

  streamer.begin_step();
  const int64_t step = streamer.step();
  const FetchRequest first{keys_[0], FetchPriority::kSameToken, step};
  streamer.prefetcher().enqueue({&first, 1});
  ASSERT_TRUE(gate->wait_entered(1));
  const std::vector<FetchRequest> predicted = {{keys_[1], FetchPriority::kSameToken, step},
                                               {keys_[2], FetchPriority::kNextToken, step},
                                               {keys_[3], FetchPriority::kNextToken, step + 1}};
  streamer.prefetcher().enqueue(predicted);
  EXPECT_EQ(streamer.stats().prefetch.cancelled, 0);
  streamer.begin_step();  // step + 1: the first two are stale
  EXPECT_EQ(streamer.stats().prefetch.cancelled, 2);
  streamer.begin_step();  // step + 2: the third too
  EXPECT_EQ(streamer.stats().prefetch.cancelled, 3);
}

// End to end: with a slow disk and one read at a time, every step's demand reads go first and the
// predictions (16 a token here) pile up behind them; those whose step has passed are cancelled, and
// the tokens do not change. Half the experts: a small cache would drop most predictions at once (no
// unprotected slot) instead of queueing them. (lru's requests are cancelled too, but whether any
// is still queued when its step ends depends on the CPU's speed, so it is not asserted.)
TEST_F(PrefetchMechanism, PredictionsLeftBehindBySlowReadsAreCancelledAndTokensHold) {
  const fs::path dir = fixture("qwen3_moe-f32");
  const fs::path packed = pack_with_predictors(dir, brief_training());
  const auto resident = resident_tokens(dir, 12);
  StreamerOptions options;
  options.budget_bytes = Model::load(dir)->sizes().expert_bytes / 2;
  options.mode = PrefetchMode::kPredict;
  options.prefetch.queue_depth = 1;
  options.prefetch.io_latency_ms = 5.0;
  Session session(packed, &options);
  EXPECT_EQ(session.run(kPrompts[0].text, 12), resident[0]);
  const StreamerStats stats = session.streamer().stats();
  EXPECT_GT(stats.prefetch.cancelled, 0) << stats.predicted << " requests, " << stats.prefetch.reads << " reads, "
                                         << stats.prefetch.no_slot << " dropped for want of a slot";
  EXPECT_EQ(stats.fallbacks, 0);
}

// ---------------------------------------------------------------------------------------------
// Protections, at the streamer.

// Predictors whose answer does not depend on the input: zero output weights, and per (horizon,
// layer) block a bias that makes expert `target(horizon)` the top choice. The streamer's block
// observer is called directly with any block-0 state.
void make_predictions_fixed(const fs::path& pack_dir, const std::function<int32_t(int32_t horizon)>& target) {
  auto pack = predict::load_pack(pack_dir);
  ASSERT_TRUE(pack);
  predict::Mlp<float>& net = pack->lookahead;
  const int64_t n_expert = pack->shape.n_expert;
  std::fill(net.params.begin() + net.w2_offset(), net.params.end(), 0.0f);  // fc2 weight and bias
  for (size_t s = 0; s < pack->slots.size(); ++s)
    net.params[size_t(net.b2_offset() + int64_t(s) * n_expert + target(pack->slots[s].horizon))] = 20.0f;
  predict::save_pack(*pack, pack_dir);
}

// A prediction for horizon h made during step s protects its expert until step s + h + 1: demand
// loads of other experts go around it until then (however old it is), and once begin_step reaches
// that step it is the first to go.
TEST_F(PrefetchMechanism, APredictedExpertOutlivesDemandLoadsUntilItsStepThenGoes) {
  const fs::path packed = pack_with_predictors(fixture("mixtral-f32"), brief_training());
  make_predictions_fixed(packed, [](int32_t horizon) { return horizon + 1; });
  const auto model = Model::load(packed);
  const auto backend = make_cpu_backend();
  StreamerOptions options;
  options.budget_bytes = 9 * slot_bytes(packed);
  options.policy = EvictionPolicy::kLru;
  options.mode = PrefetchMode::kPredict;
  options.predict_per_layer = 1;
  ExpertStreamer streamer(*model, packed, *backend, options);
  ASSERT_EQ(streamer.n_slots(), 9);
  const auto predictors = Predictors::load(packed);
  ASSERT_EQ(predictors->horizon(), 2);
  ASSERT_EQ(predictors->moe_layers(), (std::vector<int32_t>{0, 1, 2}));

  // What the observer will request: horizon 0 names expert 1 of the later layers 1 and 2, horizon
  // 1 expert 2 of every layer, horizon 2 expert 3 of every layer. Everything else is demand only.
  std::vector<std::vector<ExpertKey>> by_horizon = {
      {{1, 1}, {2, 1}}, {{0, 2}, {1, 2}, {2, 2}}, {{0, 3}, {1, 3}, {2, 3}}};
  std::vector<ExpertKey> others;
  for (int32_t e : {0, 4, 5, 6, 7})
    for (int32_t layer = 0; layer < 3; ++layer) others.push_back({layer, e});
  size_t next_other = 0;
  // Cycling through more experts than the cache holds: every one is a demand load that must evict.
  const auto demand_load = [&] {
    const ExpertKey key = others[next_other++ % others.size()];
    const FfnWeights* view = nullptr;
    streamer.experts().acquire(key.layer, {&key.expert, 1}, {&view, 1});
    ASSERT_NE(view, nullptr);
    streamer.experts().release(key.layer, {&key.expert, 1});
  };
  const auto resident = [&](ExpertKey key) { return streamer.cache().lock()->find(key).state != SlotState::kEmpty; };

  streamer.begin_step();
  const int64_t s = streamer.step();
  const std::vector<float> h0(size_t(model->config().n_embd), 0.25f);
  const int32_t one_sequence = 0;
  streamer.hooks().block(0, h0, {&one_sequence, 1});
  EXPECT_EQ(streamer.stats().predicted, 8);
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (streamer.stats().prefetch.reads < 8 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  ASSERT_EQ(streamer.stats().prefetch.reads, 8) << "the predicted experts were not all read";

  for (int32_t step_offset = 0; step_offset <= 3; ++step_offset) {
    if (step_offset > 0) streamer.begin_step();
    ASSERT_EQ(streamer.step(), s + step_offset);
    for (int i = 0; i < 3; ++i) demand_load();  // more than the unprotected slots of any step below
    for (int32_t h = 0; h <= 2; ++h) {
      const bool still_protected = s + step_offset < s + h + 1;
      for (const ExpertKey& key : by_horizon[size_t(h)]) {
        EXPECT_EQ(resident(key), still_protected)
            << "step s+" << step_offset << ": layer " << key.layer << " expert " << key.expert << " (horizon " << h
            << ", protected until s+" << h + 1 << ")";
      }
    }
  }
  const StreamerStats stats = streamer.stats();
  EXPECT_GT(stats.cache.protected_skips, 0);
  EXPECT_EQ(stats.misses, 12) << "every demand load missed";
  EXPECT_EQ(stats.prefetch.no_slot, 0);
}

// ---------------------------------------------------------------------------------------------
// Stress: lost wake-ups and evictions in wait mode.

uint64_t mix(uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

enum class StressBudget { kOneSlot, kTwoSlots, kFivePercent };

class WaitModeStress : public PrefetchMechanism,
                       public ::testing::WithParamInterface<std::tuple<PrefetchMode, StressBudget>> {};

// Many short generations on one streamer per eviction policy, at one and two slots of a fixture and
// at 5% of the bundled model (9 of its 192 experts; 5% of a fixture is under one slot), with reads
// delayed at random (the fault injector sleeps on some requests, a fixed latency is added to every
// read) and a second thread spinning on a core throughout. Each generation runs on a worker thread
// and must finish within a deadline: a lost wake-up fails the test instead of hanging it. A worker
// that misses its deadline cannot be joined; it is detached, keeps alive (shared ownership) the
// session it uses, and the test stops there with the failure reported.
TEST_P(WaitModeStress, ManyShortGenerationsFinishInTimeAndMatchTheResidentModel) {
  const auto [mode, budget_kind] = GetParam();
  const bool demo = budget_kind == StressBudget::kFivePercent;
  const fs::path dir = demo ? kDemo : fixture("qwen2_moe-f32");
  const int64_t n_tokens = 12;
  const int generations = demo ? 6 : 30;  // per eviction policy (a demo generation reads ~15x more)
  const auto deadline = 60s;
  const fs::path packed = pack_with_predictors(dir, brief_training(), n_tokens);
  const auto resident = resident_tokens(dir, n_tokens);
  const int64_t slot = slot_bytes(packed);
  const int64_t budget = budget_kind == StressBudget::kOneSlot    ? slot
                         : budget_kind == StressBudget::kTwoSlots ? 2 * slot
                                                                  : Model::load(dir)->sizes().expert_bytes * 5 / 100;

  std::jthread busy([](std::stop_token stop) {
    volatile uint64_t sink = 0;
    while (!stop.stop_requested())
      for (int i = 0; i < 4096; ++i) sink = mix(sink + uint64_t(i));
  });

  for (const EvictionPolicy policy : {EvictionPolicy::kLru, EvictionPolicy::kLruFrequency}) {
    const uint64_t seed = uint64_t(mode) * 131 + uint64_t(budget_kind) * 17 + uint64_t(policy);
    auto draws = std::make_shared<std::atomic<uint64_t>>(seed << 32);
    StreamerOptions options;
    options.budget_bytes = budget;
    options.mode = mode;
    options.policy = policy;
    options.prefetch.io_latency_ms = policy == EvictionPolicy::kLru ? 0.05 : 0.0;
    options.prefetch.queue_depth = policy == EvictionPolicy::kLru ? 16 : 2;
    options.prefetch.force_pread = policy == EvictionPolicy::kLruFrequency;  // both I/O backends
    options.prefetch.fault_injector = [draws](const ReadRequest&) {
      const uint64_t r = mix(draws->fetch_add(1));
      if (r % 3 == 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(r % 500));
      } else if (r % 3 == 1) {
        std::this_thread::yield();
      }
      return 0;
    };
    const auto session = std::make_shared<Session>(packed, &options);
    ASSERT_LE(session->streamer().n_slots(), demo ? 9 : 2);
    for (int g = 0; g < generations; ++g) {
      const size_t p = size_t(g) % kPrompts.size();
      std::packaged_task<std::vector<int32_t>()> task(
          [session, prompt = kPrompts[p].text, n_tokens] { return session->run(prompt, n_tokens); });
      std::future<std::vector<int32_t>> result = task.get_future();
      std::thread worker(std::move(task));
      if (result.wait_for(deadline) != std::future_status::ready) {
        worker.detach();
        const StreamerStats stats = session->streamer().stats();
        ADD_FAILURE() << "generation " << g << " (prefetch " << int(mode) << ", eviction " << int(policy) << ", "
                      << session->streamer().n_slots() << " slots) did not finish within "
                      << std::chrono::duration<double>(deadline).count()
                      << " s: a lost wake-up or a slot that never becomes ready. The streamer so far: " << stats.lookups
                      << " lookups, " << stats.waits << " waits, " << stats.prefetch.reads
                      << " reads; the worker is left detached";
        return;
      }
      worker.join();
      EXPECT_EQ(result.get(), resident[p]) << "generation " << g << ", prompt " << kPrompts[p].id << ", prefetch "
                                           << int(mode) << ", eviction " << int(policy);
    }
    const StreamerStats stats = session->streamer().stats();
    EXPECT_LE(stats.cache.peak_bytes, budget);
    EXPECT_EQ(stats.fallbacks, 0);
    EXPECT_GT(stats.cache.evictions, 0);
    EXPECT_GT(stats.waits, 0);
  }
}

std::string stress_name(const ::testing::TestParamInfo<std::tuple<PrefetchMode, StressBudget>>& info) {
  static const char* const modes[] = {"None", "Lru", "Predict"};
  static const char* const budgets[] = {"OneSlot", "TwoSlots", "FivePercent"};
  return std::string(modes[int(std::get<0>(info.param))]) + budgets[int(std::get<1>(info.param))];
}

INSTANTIATE_TEST_SUITE_P(
    EveryPolicy, WaitModeStress,
    ::testing::Combine(::testing::Values(PrefetchMode::kNone, PrefetchMode::kLru, PrefetchMode::kPredict),
                       ::testing::Values(StressBudget::kOneSlot, StressBudget::kTwoSlots, StressBudget::kFivePercent)),
    stress_name);

}  // namespace
}  // namespace chronos
