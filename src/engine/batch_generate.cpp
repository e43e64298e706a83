// BatchGenerator (batch_generate.h): a scheduler of KV slots over Engine::forward(batch), with
// each sequence's sampling and stop rules those of Generator::generate.
#include "chronos/batch_generate.h"

#include <algorithm>
#include <chrono>
#include <tuple>
#include <utility>

#include "chronos/error.h"
#include "chronos/model.h"
#include "chronos/sampler.h"
#include "chronos/tokenizer.h"
#include "engine/stop_matcher.h"

namespace chronos {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// One request while it holds a slot.
struct Live {
  Live(size_t index, const BatchRequest& request, int32_t slot, const Tokenizer& tokenizer)
      : index(index),
        request(request),
        slot(slot),
        sampler(request.options.sampling),
        history(request.prompt.begin(), request.prompt.end()),
        decoder(tokenizer, /*skip_special_tokens=*/false),
        matcher(request.options.stop_strings),
        admitted(Clock::now()),
        decode_start(admitted) {
    stats.prompt_tokens = std::ssize(request.prompt);
  }
  size_t index;
  const BatchRequest& request;
  int32_t slot;
  Sampler sampler;
  std::vector<int32_t> history;  // the prompt, then every generated id
  TokenStreamDecoder decoder;
  StopMatcher matcher;
  GenerateStats stats;
  Clock::time_point admitted, decode_start;
  int64_t fed = 0;            // prompt tokens in the cache
  int64_t pos = 0;            // the position of the next row
  int64_t chunk = 0;          // prompt rows in this step
  int64_t logit_row = -1;     // this step's logits row, -1 for none
  bool wants_decode = false;  // the last sampled id is the next row
  bool finished = false;
};

}  // namespace

BatchGenerator::BatchGenerator(const Model& model, const Tokenizer& tokenizer, std::unique_ptr<ModelRunner> runner,
                               int64_t n_seq, int64_t step_rows)
    : model_(model),
      tokenizer_(tokenizer),
      runner_(std::move(runner)),
      engine_(runner_.get()),
      n_seq_(n_seq),
      step_rows_(step_rows) {
  CHRONOS_CHECK(n_seq_ > 0 && step_rows_ > 0);
  slots_.resize(size_t(n_seq_));
}

BatchGenerator::~BatchGenerator() = default;

namespace {

// generate --jsonl's list as a source: in order, then done; keep_going false closes it.
class ListSource final : public RequestSource {
 public:
  ListSource(std::span<const BatchRequest> requests, const std::function<bool()>& keep_going)
      : requests_(requests), keep_going_(keep_going) {}
  std::optional<Next> next() override {
    if (next_ == requests_.size()) return std::nullopt;
    const size_t i = next_++;
    return Next{i, &requests_[i]};
  }
  bool wait() override { return false; }
  bool open() override { return !keep_going_ || keep_going_(); }

 private:
  std::span<const BatchRequest> requests_;
  const std::function<bool()>& keep_going_;
  size_t next_ = 0;
};

}  // namespace

void BatchGenerator::check_prompt(size_t id, const BatchRequest& request) const {
  const int64_t n = std::ssize(request.prompt), n_ctx = runner_->n_ctx();
  if (n == 0) throw_error("request {}: the prompt is empty (no tokens to start from)", id + 1);
  if (n >= n_ctx)
    throw_error("request {}: the prompt is {} tokens, but the context holds {} (raise --ctx-size, at most {})", id + 1,
                n, n_ctx, model_.config().n_ctx_train);
}

std::pair<int32_t, int64_t> BatchGenerator::choose_slot(std::span<const int32_t> prompt) const {
  const ModelConfig& cfg = model_.config();
  const bool continue_only =
      cfg.has_recurrent_layers() ||
      std::any_of(cfg.layers.begin(), cfg.layers.end(), [](const LayerKind& layer) { return layer.window > 0; });
  int32_t best = -1;
  int64_t best_keep = -1;
  for (int32_t slot = 0; slot < int32_t(n_seq_); ++slot) {
    const SlotHistory& s = slots_[size_t(slot)];
    if (s.live) continue;
    const auto [cached, asked] = std::mismatch(s.tokens.begin(), s.tokens.end(), prompt.begin(), prompt.end());
    // At least the prompt's last token runs: its logits are the first sample's.
    int64_t keep = std::min<int64_t>(cached - s.tokens.begin(), std::ssize(prompt) - 1);
    if (continue_only && keep != std::ssize(s.tokens)) keep = 0;
    if (keep > best_keep || (keep == best_keep && s.released < slots_[size_t(best)].released)) {
      best = slot;
      best_keep = keep;
    }
  }
  CHRONOS_CHECK(best >= 0);
  return {best, best_keep};
}

BatchTotals BatchGenerator::run(std::span<const BatchRequest> requests, const TextFn& on_text, const DoneFn& on_done,
                                const std::function<bool()>& keep_going) {
  for (size_t i = 0; i < requests.size(); ++i) check_prompt(i, requests[i]);
  ListSource source(requests, keep_going);
  return run(source, on_text, on_done);
}

BatchTotals BatchGenerator::run(RequestSource& source, const TextFn& on_text, const DoneFn& on_done,
                                const StepFn& on_step) {
  const int64_t n_ctx = runner_->n_ctx(), n_vocab = model_.config().n_vocab;
  BatchTotals totals;
  const auto start = Clock::now();
  std::vector<std::unique_ptr<Live>> live;
  std::vector<float> logits(size_t(n_seq_ * n_vocab));
  Batch batch;
  batch.reserve(step_rows_ + n_seq_);

  // Ends a sequence: the held-back text goes out (unless a stop string or the caller ended it), the
  // caller hears of it and its slot frees.
  const auto finish = [&](Live& l, StopReason reason) {
    l.stats.stop_reason = reason;
    if (reason != StopReason::kStopString && reason != StopReason::kCallback) {
      bool ignored = false;
      std::string rest = l.matcher.push(l.decoder.finish(), ignored);
      rest += l.matcher.flush();
      if (!rest.empty()) on_text(l.index, rest);
    }
    l.stats.decode_seconds = l.stats.generated_tokens > 0 ? seconds_between(l.decode_start, Clock::now()) : 0.0;
    l.finished = true;
    totals.prompt_tokens += l.stats.prompt_tokens;
    totals.generated_tokens += l.stats.generated_tokens;
    SlotHistory& slot = slots_[size_t(l.slot)];
    slot.live = false;
    if (reuse_prefixes_) slot.tokens.assign(l.history.begin(), l.history.begin() + l.pos);
    slot.released = ++releases_;
    engine_.remove_sequence(l.slot);
    on_done(l.index, l.stats);
  };
  // The body of Generator::generate's loop for one sampled row.
  const auto take = [&](Live& l, std::span<float> row) {
    const GenerateOptions& o = l.request.options;
    if (l.stats.generated_tokens >= o.max_new_tokens) return finish(l, StopReason::kMaxTokens);
    const int32_t id = l.sampler.sample(row, l.history);
    if (l.stats.generated_tokens == 0) {
      l.decode_start = Clock::now();
      l.stats.time_to_first_token_seconds = seconds_between(l.admitted, l.decode_start);
    }
    const bool is_eos = std::find(o.eos_ids.begin(), o.eos_ids.end(), id) != o.eos_ids.end();
    if (is_eos && !o.ignore_eos) {
      ++l.stats.generated_tokens;
      return finish(l, StopReason::kEos);
    }
    l.history.push_back(id);
    l.stats.tokens.push_back(id);
    ++l.stats.generated_tokens;
    bool stopped = false;
    const std::string text = l.matcher.push(l.decoder.push(id), stopped);
    if (stopped) {
      if (!text.empty()) on_text(l.index, text);
      return finish(l, StopReason::kStopString);
    }
    if (!text.empty() && !on_text(l.index, text)) return finish(l, StopReason::kCallback);
    if (l.pos + 1 >= n_ctx) return finish(l, StopReason::kContextFull);
    if (l.stats.generated_tokens >= o.max_new_tokens) return finish(l, StopReason::kMaxTokens);
    l.wants_decode = true;
  };

  for (;;) {
    if (!source.open()) {
      for (auto& l : live) finish(*l, StopReason::kCallback);
      break;
    }
    for (auto& l : live)
      if (!source.wanted(l->index)) finish(*l, StopReason::kCallback);
    std::erase_if(live, [](const std::unique_ptr<Live>& l) { return l->finished; });
    while (std::ssize(live) < n_seq_) {
      const std::optional<RequestSource::Next> next = source.next();
      if (!next) break;
      check_prompt(next->id, *next->request);
      int32_t slot = 0;
      int64_t keep = 0;
      if (reuse_prefixes_) {
        std::tie(slot, keep) = choose_slot(next->request->prompt);
        engine_.add_sequence(slot, keep);
      } else {
        slot = engine_.add_sequence();
      }
      slots_[size_t(slot)].live = true;
      live.push_back(std::make_unique<Live>(next->id, *next->request, slot, tokenizer_));
      live.back()->fed = live.back()->pos = keep;
      live.back()->stats.reused_prompt_tokens = keep;
      ++totals.requests;
    }
    if (live.empty()) {
      if (source.wait()) continue;
      break;
    }
    totals.max_live = std::max(totals.max_live, std::ssize(live));
    // Decode rows first, one per sequence; prompt chunks in the order requests came, in the rows left.
    batch.clear();
    int64_t n_logits = 0;
    for (auto& l : live) {
      l->chunk = 0;
      l->logit_row = -1;
      if (!l->wants_decode) continue;
      batch.add(l->slot, l->pos, l->history.back(), true);
      l->logit_row = n_logits++;
    }
    const int64_t n_decode = batch.size();
    int64_t room = std::max<int64_t>(step_rows_ - batch.size(), 1);
    for (auto& l : live) {
      const int64_t left = l->stats.prompt_tokens - l->fed;
      if (left == 0 || room == 0) continue;
      l->chunk = std::min(left, room);
      room -= l->chunk;
      for (int64_t t = 0; t < l->chunk; ++t) {
        const bool last = l->fed + t + 1 == l->stats.prompt_tokens;
        batch.add(l->slot, l->fed + t, l->request.prompt[size_t(l->fed + t)], last);
        if (last) l->logit_row = n_logits++;
      }
    }
    const auto step_start = Clock::now();
    engine_.forward(batch, logits.data());
    if (on_step) {
      StepReport report;
      report.live = std::ssize(live);
      report.decode_rows = n_decode;
      report.prompt_rows = batch.size() - n_decode;
      report.seconds = seconds_between(step_start, Clock::now());
      on_step(report);
    }
    ++totals.steps;
    totals.rows += batch.size();
    for (auto& l : live) {
      if (l->wants_decode) {
        l->wants_decode = false;
        ++l->pos;
      } else if (l->chunk > 0) {
        l->fed += l->chunk;
        l->pos = l->fed;
        if (l->fed == l->stats.prompt_tokens) l->stats.prefill_seconds = seconds_between(l->admitted, Clock::now());
      }
      if (l->logit_row >= 0) take(*l, std::span<float>(logits.data() + l->logit_row * n_vocab, size_t(n_vocab)));
    }
    std::erase_if(live, [](const std::unique_ptr<Live>& l) { return l->finished; });
  }
  totals.seconds = seconds_between(start, Clock::now());
  return totals;
}

}  // namespace chronos
