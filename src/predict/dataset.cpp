// Loading routing traces for the predictors and deriving their examples and statistics.
#include "predict/dataset.h"

#include <fmt/ranges.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>

#include "chronos/dtype.h"
#include "chronos/error.h"

namespace chronos::predict {

void check_trace_shape(const TraceShape& expected, const TraceHeader& header, const std::string& what) {
  const auto layers = [](const std::vector<int32_t>& v) { return fmt::format("[{}]", fmt::join(v, ",")); };
  if (header.n_embd != expected.n_embd)
    throw_error("{}: n_embd {} does not match {}", what, header.n_embd, expected.n_embd);
  if (header.n_expert != expected.n_expert)
    throw_error("{}: {} experts per layer does not match {}", what, header.n_expert, expected.n_expert);
  if (header.n_expert_used != expected.n_expert_used)
    throw_error("{}: top-{} routing does not match top-{}", what, header.n_expert_used, expected.n_expert_used);
  if (header.moe_layers != expected.moe_layers)
    throw_error("{}: MoE layers {} do not match {}", what, layers(header.moe_layers), layers(expected.moe_layers));
}

TraceData load_trace_data(std::span<const TraceReader> traces) {
  if (traces.empty()) throw_error("no routing traces given");
  TraceData data;
  const TraceHeader& first = traces.front().header();
  data.shape = TraceShape{first.n_embd, first.n_expert, first.n_expert_used, first.moe_layers};
  data.model_fingerprint = first.fingerprint;
  if (data.shape.moe_layers.empty())
    throw_error("{}: no MoE layers in the trace header", traces.front().path().string());
  const int64_t d = first.n_embd, E = first.n_expert, L = data.shape.n_moe_layers();
  data.seq_begin.push_back(0);
  for (const TraceReader& reader : traces) {
    check_trace_shape(data.shape, reader.header(),
                      fmt::format("{} (compared with {})", reader.path().string(), traces.front().path().string()));
    for (const TraceSequence& seq : reader.read_all()) {
      for (const TraceToken& tok : seq.tokens) {
        for (uint16_t bits : tok.h0) data.h0.push_back(f16_to_f32(bits));
        for (int64_t l = 0; l < L; ++l) {
          const size_t base = data.probs.size();
          double sum = 0;
          for (int64_t e = 0; e < E; ++e) {
            const float p = f16_to_f32(tok.probs[size_t(l * E + e)]);
            data.probs.push_back(p);
            sum += p;
          }
          if (!(sum > 0))
            throw_error("{}: sequence {}: router probabilities of a token sum to {}", reader.path().string(),
                        seq.prompt_id, sum);
          // f16 storage leaves the sums a little off 1; the loss wants exact distributions.
          for (int64_t e = 0; e < E; ++e) data.probs[base + size_t(e)] = float(data.probs[base + size_t(e)] / sum);
        }
        data.top_ids.insert(data.top_ids.end(), tok.top_ids.begin(), tok.top_ids.end());
        data.generated.push_back(tok.generated ? 1 : 0);
      }
      data.seq_begin.push_back(data.n_tokens());
    }
  }
  CHRONOS_CHECK(std::ssize(data.h0) == data.n_tokens() * d);
  return data;
}

TraceData select_sequences(const TraceData& data, std::span<const int64_t> indices) {
  TraceData out;
  out.shape = data.shape;
  out.model_fingerprint = data.model_fingerprint;
  out.seq_begin.push_back(0);
  const int64_t d = data.shape.n_embd, ps = data.probs_stride(), is = data.ids_stride();
  for (int64_t s : indices) {
    const int64_t b = data.seq_begin[size_t(s)], e = data.seq_begin[size_t(s) + 1];
    out.h0.insert(out.h0.end(), data.h0.begin() + b * d, data.h0.begin() + e * d);
    out.probs.insert(out.probs.end(), data.probs.begin() + b * ps, data.probs.begin() + e * ps);
    out.top_ids.insert(out.top_ids.end(), data.top_ids.begin() + b * is, data.top_ids.begin() + e * is);
    out.generated.insert(out.generated.end(), data.generated.begin() + b, data.generated.begin() + e);
    out.seq_begin.push_back(out.n_tokens());
  }
  return out;
}

std::string trace_fingerprint(std::span<const TraceReader> traces) {
  const std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> state(XXH64_createState(), &XXH64_freeState);
  CHRONOS_CHECK(state != nullptr);
  XXH64_reset(state.get(), 0);
  std::vector<char> buffer(size_t(1) << 20);
  for (const TraceReader& reader : traces) {
    std::ifstream in(reader.path(), std::ios::binary);
    if (!in) throw_error("{}: cannot open trace file", reader.path().string());
    while (in) {
      in.read(buffer.data(), std::streamsize(buffer.size()));
      XXH64_update(state.get(), buffer.data(), size_t(in.gcount()));
    }
  }
  return fmt::format("{:016x}", XXH64_digest(state.get()));
}

std::vector<Slot> lookahead_slots(const TraceShape& shape, int32_t horizon) {
  std::vector<Slot> slots;
  const int32_t L = int32_t(shape.n_moe_layers());
  const int32_t first_h0 = shape.moe_layers.front() == 0 ? 1 : 0;
  for (int32_t l = first_h0; l < L; ++l) slots.push_back({0, l});
  for (int32_t h = 1; h <= horizon; ++h)
    for (int32_t l = 0; l < L; ++l) slots.push_back({h, l});
  return slots;
}

void pool_prompt(const float* h0_rows, int64_t n_tokens, int64_t n_embd, float* out) {
  const int64_t n = std::min(n_tokens, kMaxPromptTokens);
  CHRONOS_CHECK(n > 0);
  float* mean = out;
  float* max = out + n_embd;
  std::fill(mean, mean + n_embd, 0.0f);
  std::copy(h0_rows, h0_rows + n_embd, max);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < n_embd; ++j) {
      const float v = h0_rows[t * n_embd + j];
      mean[j] += v;
      max[j] = std::max(max[j], v);
    }
  for (int64_t j = 0; j < n_embd; ++j) mean[j] /= float(n);
}

IntentExamples intent_examples(const TraceData& data) {
  IntentExamples ex;
  const int64_t d = data.shape.n_embd, E = data.shape.n_expert, k = data.shape.n_expert_used;
  const int64_t L = data.shape.n_moe_layers(), ps = data.probs_stride();
  std::vector<float> prompt_rows;
  std::vector<double> gen_counts(static_cast<size_t>(ps)), prompt_counts(static_cast<size_t>(ps));
  for (int64_t s = 0; s < data.n_sequences(); ++s) {
    const int64_t b = data.seq_begin[size_t(s)], e = data.seq_begin[size_t(s) + 1];
    prompt_rows.clear();
    std::fill(gen_counts.begin(), gen_counts.end(), 0.0);
    std::fill(prompt_counts.begin(), prompt_counts.end(), 0.0);
    int64_t n_gen = 0, n_prompt = 0;
    for (int64_t t = b; t < e; ++t) {
      const bool gen = data.generated[size_t(t)] != 0;
      std::vector<double>& counts = gen ? gen_counts : prompt_counts;
      for (int64_t l = 0; l < L; ++l)
        for (int64_t j = 0; j < k; ++j) counts[size_t(l * E + data.top_ids[size_t(t * L * k + l * k + j)])] += 1;
      if (gen) {
        ++n_gen;
      } else {
        ++n_prompt;
        if (n_prompt <= kMaxPromptTokens)
          prompt_rows.insert(prompt_rows.end(), data.h0.begin() + t * d, data.h0.begin() + (t + 1) * d);
      }
    }
    if (n_gen == 0 || n_prompt == 0) continue;
    ex.sequence.push_back(s);
    const size_t f = ex.features.size();
    ex.features.resize(f + size_t(2 * d));
    pool_prompt(prompt_rows.data(), std::ssize(prompt_rows) / d, d, ex.features.data() + f);
    for (int64_t i = 0; i < ps; ++i) {
      ex.target.push_back(float(gen_counts[size_t(i)] / double(n_gen * k)));
      ex.prompt_share.push_back(float(prompt_counts[size_t(i)] / double(n_prompt * k)));
    }
  }
  return ex;
}

std::vector<float> expert_frequency(const TraceData& data) {
  const int64_t E = data.shape.n_expert, k = data.shape.n_expert_used, L = data.shape.n_moe_layers();
  std::vector<double> counts(size_t(L * E), 0.0);
  for (int64_t t = 0; t < data.n_tokens(); ++t)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t j = 0; j < k; ++j) counts[size_t(l * E + data.top_ids[size_t(t * L * k + l * k + j)])] += 1;
  std::vector<float> freq(counts.size(), 0.0f);
  for (int64_t l = 0; l < L; ++l) {
    double total = 0;
    for (int64_t e = 0; e < E; ++e) total += counts[size_t(l * E + e)];
    for (int64_t e = 0; e < E; ++e)
      freq[size_t(l * E + e)] = total > 0 ? float(counts[size_t(l * E + e)] / total) : 1.0f / float(E);
  }
  return freq;
}

void input_statistics(const float* x, int64_t n, int64_t dim, std::vector<float>& mean, std::vector<float>& scale) {
  std::vector<double> sum(size_t(dim), 0.0), sum_sq(size_t(dim), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < dim; ++j) {
      const double v = x[i * dim + j];
      sum[size_t(j)] += v;
      sum_sq[size_t(j)] += v * v;
    }
  mean.assign(size_t(dim), 0.0f);
  scale.assign(size_t(dim), 1.0f);
  if (n == 0) return;
  std::vector<double> var(static_cast<size_t>(dim));
  double mean_var = 0;
  for (int64_t j = 0; j < dim; ++j) {
    const double m = sum[size_t(j)] / double(n);
    mean[size_t(j)] = float(m);
    var[size_t(j)] = std::max(0.0, sum_sq[size_t(j)] / double(n) - m * m);
    mean_var += var[size_t(j)] / double(dim);
  }
  const double floor = std::max(1e-4 * mean_var, 1e-12);
  for (int64_t j = 0; j < dim; ++j) scale[size_t(j)] = float(1.0 / std::sqrt(var[size_t(j)] + floor));
}

}  // namespace chronos::predict
