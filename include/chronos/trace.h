// Recording routing traces: prompts run through the model, per-token routing and block-0 states.
#pragma once

#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "chronos/model.h"
#include "chronos/sampler.h"
#include "chronos/trace_file.h"

namespace chronos {

class ExpertStreamer;

class Tokenizer;
class ThreadPool;

struct PromptRecord {
  std::string id;
  std::string domain;
  std::string text;
};

// One JSON object per line with "prompt" (or "text"), optional "id" and "domain". Throws Error
// naming the file and line for anything else.
std::vector<PromptRecord> read_prompts_jsonl(const std::filesystem::path& path);

struct TraceOptions {
  int64_t max_new_tokens = 64;
  SamplingParams sampling;
  int64_t prompts_per_file = 16;  // one trace file per chunk: a rerun skips finished chunks
  int64_t n_ctx = 2048;
};

struct TraceProgress {
  int64_t prompts_done = 0, prompts_total = 0, tokens = 0, files_skipped = 0;
};

// Sets the model's route and trace observers for the run (cleared after).
// Writes <out_dir>/trace_NNNNN.ctrace files (each complete or absent, never partial). Files that
// exist already are kept (a rerun resumes). `on_progress` is called after every prompt. A model
// whose experts stream (a pack, or a .gguf file read in place) needs `streamer`, in wait mode: the
// traces are the exact model's.
TraceProgress record_traces(const Model& model, const Tokenizer& tokenizer, const std::filesystem::path& model_dir,
                            std::span<const PromptRecord> prompts, const std::filesystem::path& out_dir,
                            const TraceOptions& options, ThreadPool& pool,
                            const std::function<void(const TraceProgress&)>& on_progress,
                            ExpertStreamer* streamer = nullptr);

// Every *.ctrace file of a folder (sorted), checked to come from the same model.
std::vector<TraceReader> open_traces(const std::filesystem::path& dir);

}  // namespace chronos
