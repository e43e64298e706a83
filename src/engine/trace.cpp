// record_traces: runs prompts with routing and block-0 observers on, one trace file per chunk.
#include "chronos/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "chronos/error.h"
#include "chronos/expert_streamer.h"
#include "chronos/generate.h"
#include "chronos/pack.h"
#include "chronos/pack_format.h"
#include "chronos/thread_pool.h"
#include "chronos/tokenizer.h"

namespace chronos {

std::vector<PromptRecord> read_prompts_jsonl(const std::filesystem::path& path) {
  if (std::filesystem::is_directory(path)) throw_error("{}: is a folder, not a prompt file", path.string());
  std::ifstream in(path);
  if (!in) throw_error("{}: cannot open prompt file", path.string());
  std::vector<PromptRecord> prompts;
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      throw_error("{}:{}: not a JSON object", path.string(), line_no);
    }
    if (!j.is_object()) throw_error("{}:{}: not a JSON object", path.string(), line_no);
    const auto text_field = [&](const char* key) -> std::optional<std::string> {
      const auto it = j.find(key);
      if (it == j.end()) return std::nullopt;
      if (!it->is_string()) throw_error("{}:{}: \"{}\" is not a string", path.string(), line_no, key);
      return it->get<std::string>();
    };
    PromptRecord p;
    const auto text = j.contains("prompt") ? text_field("prompt") : text_field("text");
    if (!text) throw_error("{}:{}: no \"prompt\" (or \"text\") string", path.string(), line_no);
    if (text->empty()) throw_error("{}:{}: the prompt is empty", path.string(), line_no);
    p.text = *text;
    p.id = text_field("id").value_or(fmt::format("line-{}", line_no));
    p.domain = text_field("domain").value_or("");
    prompts.push_back(std::move(p));
  }
  if (prompts.empty()) throw_error("{}: no prompts", path.string());
  return prompts;
}

TraceProgress record_traces(const Model& model, const Tokenizer& tokenizer, const std::filesystem::path& model_dir,
                            std::span<const PromptRecord> prompts, const std::filesystem::path& out_dir,
                            const TraceOptions& options, ThreadPool& pool,
                            const std::function<void(const TraceProgress&)>& on_progress, ExpertStreamer* streamer) {
  const ModelConfig& c = model.config();
  TraceHeader header;
  header.fingerprint = model_fingerprint_of(model, model_dir);
  header.n_embd = int32_t(c.n_embd);
  header.n_expert = int32_t(c.n_expert);
  header.n_expert_used = int32_t(c.n_expert_used);
  std::vector<int32_t> moe_index(size_t(c.n_layer), -1);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    if (!c.is_moe_layer(il)) continue;
    moe_index[size_t(il)] = int32_t(header.moe_layers.size());
    header.moe_layers.push_back(int32_t(il));
  }
  if (header.moe_layers.empty()) throw_error("{}: the model has no MoE layer to trace", model_dir.string());
  std::filesystem::create_directories(out_dir);

  // Per-token rows in arrival order: every layer sees the tokens of a run in order, prefill
  // chunks first, then one decode step at a time.
  std::vector<std::vector<int32_t>> ids_by_layer(header.moe_layers.size());
  std::vector<std::vector<uint16_t>> probs_by_layer(header.moe_layers.size());
  std::vector<uint16_t> h0;
  ForwardHooks hooks;
  hooks.route = [&](const RouteEvent& ev) {
    const int32_t m = moe_index[size_t(ev.layer)];
    for (int32_t id : ev.expert_ids) ids_by_layer[size_t(m)].push_back(id);
    for (float p : ev.probs) probs_by_layer[size_t(m)].push_back(f32_to_f16(p));
  };
  hooks.block = [&](int64_t, std::span<const float> hidden, std::span<const int32_t>) {
    for (float v : hidden) h0.push_back(f32_to_f16(v));
  };
  hooks.block_last_layer = 0;

  // Every prompt must fit with room for at least one generated token; checked before anything is
  // traced, so a long run does not stop half-way (and no prompt is silently cut).
  std::vector<std::vector<int32_t>> prompt_ids;
  prompt_ids.reserve(prompts.size());
  for (const PromptRecord& p : prompts) {
    prompt_ids.push_back(tokenizer.encode(p.text, true));
    if (std::ssize(prompt_ids.back()) + 1 >= options.n_ctx)
      throw_error("prompt '{}' is {} tokens, which does not fit in a context of {} (raise --ctx-size or shorten it)",
                  p.id, prompt_ids.back().size(), options.n_ctx);
  }

  TraceProgress progress;
  progress.prompts_total = std::ssize(prompts);
  if (model.experts_streamed() && streamer == nullptr)
    throw_error("{}: its experts stream: tracing it needs an expert streamer", model_dir.string());
  Generator generator(model, tokenizer, pool, options.n_ctx, 32,
                      streamer != nullptr ? combine(hooks, streamer->hooks()) : hooks);
  generator.stream_experts_with(streamer);
  const int64_t k = c.n_expert_used, E = c.n_expert, d = c.n_embd;
  for (int64_t first = 0; first < std::ssize(prompts); first += options.prompts_per_file) {
    const int64_t count = std::min(options.prompts_per_file, std::ssize(prompts) - first);
    const auto path = out_dir / fmt::format("trace_{:05d}.ctrace", first / options.prompts_per_file);
    if (std::filesystem::exists(path)) {  // finished by an earlier run
      progress.prompts_done += count;
      ++progress.files_skipped;
      on_progress(progress);
      continue;
    }
    TraceWriter writer(path, header);
    for (int64_t i = first; i < first + count; ++i) {
      const PromptRecord& p = prompts[size_t(i)];
      for (auto& v : ids_by_layer) v.clear();
      for (auto& v : probs_by_layer) v.clear();
      h0.clear();
      const std::vector<int32_t>& ids = prompt_ids[size_t(i)];
      GenerateOptions gen;
      gen.max_new_tokens = std::min(options.max_new_tokens, options.n_ctx - std::ssize(ids) - 1);
      gen.sampling = options.sampling;
      gen.sampling.seed = options.sampling.seed + uint64_t(i);
      gen.eos_ids = c.eos_token_ids;
      const GenerateStats stats = generator.generate(ids, gen, [](std::string_view) { return true; });
      // Tokens that went through the model: the prompt, then every generated token but the last.
      std::vector<int32_t> seen = ids;
      seen.insert(seen.end(), stats.tokens.begin(), stats.tokens.end());
      const int64_t n = std::ssize(h0) / d;
      CHRONOS_CHECK_MSG(n <= std::ssize(seen), "traced {} tokens of {}", n, seen.size());
      TraceSequence seq;
      seq.prompt_id = p.id;
      seq.domain = p.domain;
      seq.tokens.resize(size_t(n));
      for (int64_t t = 0; t < n; ++t) {
        TraceToken& tok = seq.tokens[size_t(t)];
        tok.generated = t >= std::ssize(ids);
        tok.token_id = seen[size_t(t)];
        tok.h0.assign(h0.begin() + t * d, h0.begin() + (t + 1) * d);
        for (size_t m = 0; m < header.moe_layers.size(); ++m) {
          tok.top_ids.insert(tok.top_ids.end(), ids_by_layer[m].begin() + t * k, ids_by_layer[m].begin() + (t + 1) * k);
          tok.probs.insert(tok.probs.end(), probs_by_layer[m].begin() + t * E, probs_by_layer[m].begin() + (t + 1) * E);
        }
      }
      writer.add(seq);
      ++progress.prompts_done;
      progress.tokens += n;
      on_progress(progress);
    }
    writer.finish();
  }
  return progress;
}

std::vector<TraceReader> open_traces(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir)) throw_error("{}: trace folder does not exist", dir.string());
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().extension() == ".ctrace") paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) throw_error("{}: no .ctrace files", dir.string());
  std::vector<TraceReader> readers;
  for (const auto& path : paths) {
    readers.push_back(TraceReader::open(path));
    if (readers.back().header().fingerprint != readers.front().header().fingerprint)
      throw_error("{}: traced with another model than {}", path.string(), paths.front().string());
  }
  return readers;
}

}  // namespace chronos
