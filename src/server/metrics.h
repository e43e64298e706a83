// chronos serve's counters and gauges, rendered as Prometheus text for GET /metrics. Written by the
// engine thread (steps, finished requests) and the HTTP threads (requests by status), read by
// whoever asks.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "chronos/batch_generate.h"
#include "chronos/expert_streamer.h"
#include "chronos/generate.h"

namespace chronos::server {

class Metrics {
 public:
  // A request answered with HTTP `status` by endpoint `name`.
  void request(const std::string& name, int status);
  // A request entered the queue with a prompt of n tokens.
  void request_queued(int64_t prompt_tokens);
  void request_done(const GenerateStats& stats);
  // After each step, with the streamer's counters (a pack).
  void step(const StepReport& step, const std::optional<StreamerStats>& experts);
  // The Prometheus text exposition, with the live and waiting requests now.
  std::string render(int64_t live, int64_t waiting) const;

 private:
  mutable std::mutex m_;
  std::map<std::pair<std::string, int>, int64_t> requests_;  // (endpoint, status) -> count
  int64_t queued_ = 0, finished_ = 0;
  int64_t prompt_tokens_ = 0, reused_prompt_tokens_ = 0, generated_tokens_ = 0;
  int64_t steps_ = 0, decode_rows_ = 0, prompt_rows_ = 0, last_live_ = 0, last_rows_ = 0;
  double step_seconds_ = 0.0, first_token_seconds_ = 0.0;
  std::optional<StreamerStats> experts_;
};

}  // namespace chronos::server
