// Prometheus text for GET /metrics (metrics.h).
#include "server/metrics.h"

#include <fmt/format.h>

namespace chronos::server {
namespace {

void add(std::string& out, const char* name, const char* type, const char* help, double value) {
  out += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n{0} {3}\n", name, help, type, value);
}

}  // namespace

void Metrics::request(const std::string& name, int status) {
  std::lock_guard lock(m_);
  ++requests_[{name, status}];
}

void Metrics::request_queued(int64_t prompt_tokens) {
  std::lock_guard lock(m_);
  ++queued_;
  prompt_tokens_ += prompt_tokens;
}

void Metrics::request_done(const GenerateStats& stats) {
  std::lock_guard lock(m_);
  ++finished_;
  generated_tokens_ += stats.generated_tokens;
  reused_prompt_tokens_ += stats.reused_prompt_tokens;
  first_token_seconds_ += stats.time_to_first_token_seconds;
}

void Metrics::step(const StepReport& step, const std::optional<StreamerStats>& experts) {
  std::lock_guard lock(m_);
  ++steps_;
  decode_rows_ += step.decode_rows;
  prompt_rows_ += step.prompt_rows;
  last_live_ = step.live;
  last_rows_ = step.decode_rows + step.prompt_rows;
  step_seconds_ += step.seconds;
  if (experts) experts_ = experts;
}

std::string Metrics::render(int64_t live, int64_t waiting) const {
  std::lock_guard lock(m_);
  std::string out;
  out +=
      "# HELP chronos_requests_total Requests answered, by endpoint and HTTP status.\n"
      "# TYPE chronos_requests_total counter\n";
  for (const auto& [key, count] : requests_)
    out += fmt::format("chronos_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, count);
  add(out, "chronos_requests_started_total", "counter", "Requests that entered the queue.", double(queued_));
  add(out, "chronos_requests_finished_total", "counter", "Requests that ran to their end.", double(finished_));
  add(out, "chronos_requests_running", "gauge", "Sequences holding a KV slot now.", double(live));
  add(out, "chronos_requests_waiting", "gauge", "Requests in the queue now (queue depth).", double(waiting));
  add(out, "chronos_prompt_tokens_total", "counter", "Prompt tokens of requests that entered the queue.",
      double(prompt_tokens_));
  add(out, "chronos_prompt_tokens_reused_total", "counter", "Prompt tokens whose KV an earlier sequence left.",
      double(reused_prompt_tokens_));
  add(out, "chronos_generated_tokens_total", "counter", "Tokens generated.", double(generated_tokens_));
  add(out, "chronos_time_to_first_token_seconds_total", "counter",
      "Sum over finished requests of queue to first token.", first_token_seconds_);
  add(out, "chronos_steps_total", "counter", "Forward steps.", double(steps_));
  add(out, "chronos_step_seconds_total", "counter", "Wall time of the forward steps.", step_seconds_);
  add(out, "chronos_decode_rows_total", "counter", "Decode rows over all steps.", double(decode_rows_));
  add(out, "chronos_prompt_rows_total", "counter", "Prompt rows over all steps.", double(prompt_rows_));
  add(out, "chronos_batch_sequences", "gauge", "Sequences in the last step.", double(last_live_));
  add(out, "chronos_batch_rows", "gauge", "Rows in the last step.", double(last_rows_));
  if (experts_) {
    const StreamerStats& e = *experts_;
    add(out, "chronos_expert_lookups_total", "counter", "Expert acquisitions (one per expert a step needs).",
        double(e.lookups));
    add(out, "chronos_expert_hits_total", "counter", "Acquisitions whose expert was resident.", double(e.hits));
    add(out, "chronos_expert_misses_total", "counter", "Acquisitions whose expert was neither resident nor loading.",
        double(e.misses));
    add(out, "chronos_expert_byte_hit_ratio", "gauge", "Bytes of acquired experts that were resident, of all acquired.",
        e.lookup_bytes > 0 ? double(e.hit_bytes) / double(e.lookup_bytes) : 0.0);
    add(out, "chronos_expert_bytes_read_total", "counter", "Expert bytes read from storage.",
        double(e.prefetch.bytes_read));
    add(out, "chronos_expert_stall_seconds_total", "counter", "Compute time spent waiting on expert reads.",
        e.stall_seconds);
    add(out, "chronos_expert_lowbit_total", "counter", "Acquisitions served by a low-bit copy.", double(e.lowbit));
    add(out, "chronos_expert_fallbacks_total", "counter", "Acquisitions answered missing (fallback).",
        double(e.fallbacks));
  }
  return out;
}

}  // namespace chronos::server
