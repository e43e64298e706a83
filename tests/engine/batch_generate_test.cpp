// BatchGenerator: requests through shared KV slots, continuously batched, each getting exactly what
// Generator::generate gives it alone (f32 fixtures, where batching changes no bit), resident and
// streamed in wait mode; its ends (EOS, stop string, context, the caller) are those of generate.
#include "chronos/batch_generate.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "chronos/backend.h"
#include "chronos/error.h"
#include "chronos/expert_streamer.h"
#include "chronos/generate.h"
#include "chronos/pack.h"
#include "chronos/thread_pool.h"
#include "chronos/tokenizer.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

fs::path fixture(const std::string& name) { return fs::path(CHRONOS_TEST_DATA_DIR) / "models" / name; }

struct Outcome {
  std::vector<int32_t> tokens;
  std::string text;
  StopReason reason = StopReason::kMaxTokens;
  int64_t generated = 0;
  bool operator==(const Outcome&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Outcome& o) {
  os << stop_reason_name(o.reason) << ", " << o.generated << " generated, \"" << o.text << "\", ids";
  for (const int32_t id : o.tokens) os << ' ' << id;
  return os;
}

// The prompts of the fixture's reference (5, 12 and 40 tokens) and its text prompt, with limits
// that end them at different steps, one sampled, one stopped by a string.
std::vector<BatchRequest> requests_for(const fs::path& dir, const Tokenizer& tokenizer, const ModelConfig& c) {
  std::ifstream in(dir / "reference.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  std::vector<BatchRequest> out;
  GenerateOptions base;
  base.eos_ids = c.eos_token_ids;
  base.ignore_eos = true;
  const int64_t limits[] = {7, 19, 11};
  for (size_t i = 0; i < ref["cases"].size(); ++i) {
    BatchRequest r;
    r.prompt = ref["cases"][i]["ids"].get<std::vector<int32_t>>();
    if (r.prompt.size() > 64) continue;  // the recurrent models' long prompt: beyond the tests' context
    r.options = base;
    r.options.max_new_tokens = limits[i % 3];
    out.push_back(r);
  }
  BatchRequest text;
  text.prompt = tokenizer.encode(ref["text_case"]["prompt"].get<std::string>(), true);
  text.options = base;
  text.options.max_new_tokens = 16;
  text.options.sampling.temperature = 0.9f;
  text.options.sampling.top_p = 0.9f;
  text.options.sampling.seed = 5;
  out.push_back(text);
  BatchRequest none = out[0];
  none.options.max_new_tokens = 0;  // prefilled, nothing generated
  out.push_back(none);
  BatchRequest repeat = out[1];  // the same prompt twice in one batch
  repeat.options.max_new_tokens = 5;
  out.push_back(repeat);
  return out;
}

class BatchGenerate : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    work_ = fs::temp_directory_path() / ("chronos_batch_" + std::to_string(::getpid()));
    fs::remove_all(work_);
    fs::create_directories(work_);
  }
  void TearDown() override { fs::remove_all(work_); }

  // Each request alone through Generator::generate.
  std::vector<Outcome> alone(const Model& model, const Tokenizer& tokenizer, std::span<const BatchRequest> requests,
                             int64_t n_ctx) {
    ThreadPool pool(2);
    Generator generator(model, tokenizer, pool, n_ctx, 8);
    std::vector<Outcome> out;
    for (const BatchRequest& r : requests) {
      Outcome o;
      const GenerateStats stats = generator.generate(r.prompt, r.options, [&](std::string_view text) {
        o.text += text;
        return true;
      });
      o.tokens = stats.tokens;
      o.reason = stats.stop_reason;
      o.generated = stats.generated_tokens;
      out.push_back(o);
    }
    return out;
  }

  // All requests through one BatchGenerator of n_seq slots and step_rows rows a step.
  std::vector<Outcome> batched(const Model& model, const Tokenizer& tokenizer, std::span<const BatchRequest> requests,
                               int64_t n_ctx, int64_t n_seq, int64_t step_rows, ExpertStreamer* streamer = nullptr,
                               BatchTotals* totals_out = nullptr) {
    ThreadPool pool(2);
    BatchGenerator generator(
        model, tokenizer,
        make_cpu_runner(model, pool, n_ctx, step_rows, streamer ? streamer->hooks() : ForwardHooks{}, n_seq), n_seq,
        step_rows);
    generator.stream_experts_with(streamer);
    std::vector<Outcome> out(requests.size());
    std::vector<size_t> done_order;
    const BatchTotals totals = generator.run(
        requests,
        [&](size_t i, std::string_view text) {
          EXPECT_LT(i, out.size());
          out[i].text += text;
          return true;
        },
        [&](size_t i, const GenerateStats& stats) {
          out[i].tokens = stats.tokens;
          out[i].reason = stats.stop_reason;
          out[i].generated = stats.generated_tokens;
          done_order.push_back(i);
        });
    EXPECT_EQ(done_order.size(), requests.size()) << "every request ends once";
    EXPECT_EQ(totals.requests, std::ssize(requests));
    EXPECT_LE(totals.max_live, n_seq);
    if (totals_out != nullptr) *totals_out = totals;
    return out;
  }

  fs::path work_;
};

TEST_P(BatchGenerate, EveryRequestGetsWhatItGetsAlone) {
  const fs::path dir = fixture(GetParam());
  const auto model = Model::load(dir);
  const Tokenizer tokenizer = Tokenizer::load(dir);
  std::vector<BatchRequest> requests = requests_for(dir, tokenizer, model->config());
  // A stop string from the middle of request 1's text alone: it ends there in both runs.
  const std::vector<Outcome> unstopped = alone(*model, tokenizer, requests, 128);
  const std::string& text = unstopped[1].text;
  ASSERT_GE(text.size(), 8u) << unstopped[1];
  requests[1].options.stop_strings = {text.substr(text.size() / 2, 3)};

  const std::vector<Outcome> expected = alone(*model, tokenizer, requests, 128);
  EXPECT_EQ(expected[1].reason, StopReason::kStopString) << expected[1];
  EXPECT_EQ(expected[4].generated, 0);
  for (const int64_t n_seq : {1, 2, 3, 6}) {
    // 5 rows a step: the 40-token prompt is prefilled in chunks beside the others' decode rows.
    BatchTotals totals;
    const std::vector<Outcome> got = batched(*model, tokenizer, requests, 128, n_seq, 5, nullptr, &totals);
    for (size_t i = 0; i < requests.size(); ++i)
      EXPECT_EQ(got[i], expected[i]) << GetParam() << ": request " << i << " with " << n_seq << " sequences";
    EXPECT_EQ(totals.max_live, std::min<int64_t>(n_seq, std::ssize(requests)));
    int64_t generated = 0;
    for (const Outcome& o : expected) generated += o.generated;
    EXPECT_EQ(totals.generated_tokens, generated);
    if (n_seq > 1) {
      EXPECT_GT(double(totals.rows) / double(totals.steps), 1.5) << "rows of several sequences a step";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchGenerate,
                         ::testing::Values("mixtral-f32", "qwen2_moe-f32", "glm4_moe-f32", "deepseek_v3-f32",
                                           "gpt_oss-f32", "qwen3_next-f32", "qwen3_5_moe-f32"));

TEST_F(BatchGenerate, StreamedInWaitModeEqualsResidentAlone) {
  const fs::path dir = fixture("qwen2_moe-f32");
  const auto model = Model::load(dir);
  const Tokenizer tokenizer = Tokenizer::load(dir);
  const std::vector<BatchRequest> requests = requests_for(dir, tokenizer, model->config());
  const std::vector<Outcome> expected = alone(*model, tokenizer, requests, 128);

  const fs::path packed = work_ / "pack";
  PackOptions pack_options;
  pack_options.method = ClusterMethod::kNone;
  write_pack(*model, dir, packed, pack_options, [](int64_t, int64_t) {});
  const auto streamed = Model::load(packed);
  const auto backend = make_cpu_backend();
  StreamerOptions options;
  options.budget_bytes = model->sizes().expert_bytes / 6;  // a few slots: most lookups miss and wait
  ExpertStreamer streamer(*streamed, packed, *backend, options);
  const std::vector<Outcome> got = batched(*streamed, tokenizer, requests, 128, 3, 6, &streamer);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(got[i], expected[i]) << "request " << i;
  EXPECT_GT(streamer.stats().misses, 0) << "the budget was meant to be small";
}

TEST_F(BatchGenerate, EndsAsGenerateEnds) {
  const fs::path dir = fixture("mixtral-f32");
  const auto model = Model::load(dir);
  const Tokenizer tokenizer = Tokenizer::load(dir);
  std::vector<BatchRequest> requests = requests_for(dir, tokenizer, model->config());
  // A context of 24: the 12-token prompt fills it; the 40-token one cannot run.
  requests.erase(requests.begin() + 2);
  requests[1].options.max_new_tokens = 50;
  // EOS: request 0 stops at the id it would generate third.
  const std::vector<Outcome> free_run = alone(*model, tokenizer, requests, 24);
  ASSERT_GE(free_run[0].tokens.size(), 3u);
  requests[0].options.ignore_eos = false;
  requests[0].options.eos_ids = {free_run[0].tokens[2]};
  const std::vector<Outcome> expected = alone(*model, tokenizer, requests, 24);
  EXPECT_EQ(expected[0].reason, StopReason::kEos);
  EXPECT_EQ(expected[1].reason, StopReason::kContextFull);
  EXPECT_EQ(batched(*model, tokenizer, requests, 24, 2, 4), expected);

  // The caller ends request 1 after its first piece of text; the others run on.
  ThreadPool pool(2);
  BatchGenerator generator(*model, tokenizer, make_cpu_runner(*model, pool, 24, 4, {}, 2), 2, 4);
  std::map<size_t, StopReason> reasons;
  generator.run(
      requests, [](size_t i, std::string_view) { return i != 1; },
      [&](size_t i, const GenerateStats& stats) { reasons[i] = stats.stop_reason; });
  EXPECT_EQ(reasons[1], StopReason::kCallback);
  EXPECT_EQ(reasons[0], StopReason::kEos);

  // The reader goes away after the first reply: the live one ends at the next step, the rest never start.
  std::map<size_t, StopReason> cut;
  const BatchTotals totals = generator.run(
      requests, [](size_t, std::string_view) { return true; },
      [&](size_t i, const GenerateStats& stats) { cut[i] = stats.stop_reason; }, [&] { return cut.empty(); });
  EXPECT_EQ(cut.size(), 2u) << "the first to end and the one beside it";
  EXPECT_EQ(totals.requests, std::ssize(cut));
  EXPECT_LT(totals.requests, std::ssize(requests));
  int64_t cut_short = 0;
  for (const auto& [i, reason] : cut) cut_short += reason == StopReason::kCallback;
  EXPECT_EQ(cut_short, 1);

  // A prompt that does not fit, or an empty one, is refused by its number before anything runs.
  std::vector<BatchRequest> bad = requests;
  bad[1].prompt.assign(24, bad[1].prompt.front());
  int calls = 0;
  const auto count = [&](size_t, const GenerateStats&) { ++calls; };
  try {
    generator.run(
        bad, [](size_t, std::string_view) { return true; }, count);
    ADD_FAILURE() << "a 24-token prompt in a context of 24 ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("request 2: the prompt is 24 tokens"), std::string::npos) << e.what();
  }
  bad[1].prompt.clear();
  EXPECT_THROW(generator.run(
                   bad, [](size_t, std::string_view) { return true; }, count),
               Error);
  EXPECT_EQ(calls, 0);
}

// Each request's outcome and reused prompt tokens, as a run's callbacks report them.
struct Collected {
  explicit Collected(size_t n) : got(n), reused(n, -1) {}
  BatchGenerator::TextFn text() {
    return [this](size_t i, std::string_view piece) {
      got[i].text += piece;
      return true;
    };
  }
  BatchGenerator::DoneFn done() {
    return [this](size_t i, const GenerateStats& stats) {
      got[i].tokens = stats.tokens;
      got[i].reason = stats.stop_reason;
      got[i].generated = stats.generated_tokens;
      reused[i] = stats.reused_prompt_tokens;
    };
  }
  std::vector<Outcome> got;
  std::vector<int64_t> reused;
};

// Requests that arrive while others run: request k is let in once `arrive[k]` steps have run (or
// at once when nothing is live), as a server's queue lets them in; `leave_after` ends one request
// by its client going away after that many steps.
class ArrivingSource final : public RequestSource {
 public:
  ArrivingSource(std::span<const BatchRequest> requests, std::vector<int64_t> arrive)
      : requests_(requests), arrive_(std::move(arrive)) {}
  std::optional<Next> next() override {
    if (next_ == requests_.size() || arrive_[next_] > steps) return std::nullopt;
    const size_t i = next_++;
    return Next{i, &requests_[i]};
  }
  bool wait() override {
    if (next_ == requests_.size()) return false;
    steps = std::max(steps, arrive_[next_]);
    return true;
  }
  bool wanted(size_t id) override { return !(id == leaving && steps >= leave_after); }
  int64_t steps = 0;
  size_t leaving = SIZE_MAX;
  int64_t leave_after = 0;

 private:
  std::span<const BatchRequest> requests_;
  std::vector<int64_t> arrive_;
  size_t next_ = 0;
};

TEST_F(BatchGenerate, RequestsJoinARunningBatchAndOneLeaves) {
  const fs::path dir = fixture("mixtral-f32");
  const auto model = Model::load(dir);
  const Tokenizer tokenizer = Tokenizer::load(dir);
  const std::vector<BatchRequest> requests = requests_for(dir, tokenizer, model->config());
  const std::vector<Outcome> expected = alone(*model, tokenizer, requests, 128);
  ThreadPool pool(2);
  BatchGenerator generator(*model, tokenizer, make_cpu_runner(*model, pool, 128, 5, {}, 3), 3, 5);
  ArrivingSource source(requests, {0, 3, 4, 9, 10, 30});
  source.leaving = 1;
  source.leave_after = 6;
  Collected run(requests.size());
  std::vector<Outcome>& got = run.got;
  std::vector<int64_t> joined_beside;  // sequences live in each step
  generator.run(source, run.text(), run.done(), [&](const StepReport& step) {
    ++source.steps;
    joined_beside.push_back(step.live);
  });
  for (size_t i = 0; i < requests.size(); ++i) {
    if (i == 1) continue;
    EXPECT_EQ(got[i], expected[i]) << "request " << i;
  }
  // Request 1 left after step 6: what it got is the start of what it gets alone.
  EXPECT_EQ(got[1].reason, StopReason::kCallback);
  EXPECT_LT(got[1].generated, expected[1].generated);
  ASSERT_LE(got[1].tokens.size(), expected[1].tokens.size());
  EXPECT_TRUE(std::equal(got[1].tokens.begin(), got[1].tokens.end(), expected[1].tokens.begin()));
  EXPECT_EQ(*std::max_element(joined_beside.begin(), joined_beside.end()), 3) << "requests joined live ones";
}

// Which of a prompt's tokens a slot that last held `cached` keeps: the shared prefix, at least one
// prompt token left to run; for a model whose slots cannot be rewound, all of it or nothing.
int64_t kept(const std::vector<int32_t>& cached, const std::vector<int32_t>& prompt, bool continue_only) {
  const auto [c, p] = std::mismatch(cached.begin(), cached.end(), prompt.begin(), prompt.end());
  const int64_t keep = std::min<int64_t>(c - cached.begin(), std::ssize(prompt) - 1);
  return continue_only && keep != std::ssize(cached) ? 0 : keep;
}

class PrefixReuse : public BatchGenerate {};

TEST_P(PrefixReuse, EachRequestGetsWhatItGetsAloneAndRunsOnlyWhatIsNew) {
  const fs::path dir = fixture(GetParam());
  const auto model = Model::load(dir);
  const Tokenizer tokenizer = Tokenizer::load(dir);
  const ModelConfig& cfg = model->config();
  const bool continue_only = cfg.has_recurrent_layers() || std::any_of(cfg.layers.begin(), cfg.layers.end(),
                                                                       [](const LayerKind& l) { return l.window > 0; });
  const std::vector<BatchRequest> base = requests_for(dir, tokenizer, cfg);
  // A: a 12-token prompt; B: A's first 9 tokens, then others; C: B again; D: C's prompt and what
  // C generates (a turn that continues the conversation); E: unrelated.
  BatchRequest a = base[1];
  a.options.max_new_tokens = 6;
  BatchRequest b = a;
  b.prompt.resize(9);
  for (int32_t t : base[0].prompt) b.prompt.push_back(t);
  BatchRequest c = b;
  std::vector<BatchRequest> requests = {a, b, c};
  const std::vector<Outcome> first = alone(*model, tokenizer, requests, 128);
  BatchRequest d = c;
  d.prompt.insert(d.prompt.end(), first[2].tokens.begin(), first[2].tokens.end());
  d.prompt.push_back(base[0].prompt.back());
  requests.push_back(d);
  requests.push_back(base[3]);
  const std::vector<Outcome> expected = alone(*model, tokenizer, requests, 128);

  // One slot: each request takes the slot the one before it left.
  ThreadPool pool(2);
  BatchGenerator generator(*model, tokenizer, make_cpu_runner(*model, pool, 128, 5, {}, 1), 1, 5);
  generator.reuse_prefixes(true);
  Collected run(requests.size());
  generator.run(requests, run.text(), run.done());
  const std::vector<Outcome>& got = run.got;
  const std::vector<int64_t>& reused = run.reused;
  std::vector<int32_t> cached;  // what the slot holds: a request's prompt and all but its last token
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(got[i], expected[i]) << GetParam() << ": request " << i;
    EXPECT_EQ(reused[i], kept(cached, requests[i].prompt, continue_only)) << GetParam() << ": request " << i;
    cached = requests[i].prompt;
    cached.insert(cached.end(), expected[i].tokens.begin(), expected[i].tokens.end() - 1);
  }
  EXPECT_EQ(reused[3], std::ssize(requests[2].prompt) + std::ssize(expected[2].tokens) - 1)
      << "a conversation's next turn continues the last one's KV";
  if (!continue_only) {
    EXPECT_EQ(reused[1], 9);
    EXPECT_EQ(reused[2], std::ssize(requests[2].prompt) - 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PrefixReuse, ::testing::Values("mixtral-f32", "gpt_oss-f32", "qwen3_next-f32"));

}  // namespace
}  // namespace chronos
