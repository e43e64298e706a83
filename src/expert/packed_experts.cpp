// PackedExperts (packed_experts.h): cache lookups for the MoE block, demand reads on a miss, wait,
// low-bit copy or fallback, and the views of the experts in their slots.
#include "chronos/packed_experts.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <fstream>

#include "chronos/error.h"
#include "chronos/gguf.h"

namespace chronos {
namespace {

using Clock = std::chrono::steady_clock;

// A pack folder's manifest, checked against the model; or the experts of a .gguf file streamed in
// place, as the model described them when it loaded.
PackManifest manifest_of(const Model& model, const std::filesystem::path& pack_dir) {
  if (const PackManifest* gguf = model.gguf_experts()) return *gguf;
  PackManifest m = PackManifest::load(pack_dir);
  check_pack_against_config(m, model.config(), pack_dir);
  return m;
}

int64_t largest_extent(const PackManifest& m) {
  int64_t bytes = 0;
  for (const auto& [key, expert] : m.experts) bytes = std::max(bytes, expert.bytes);
  return bytes;
}

}  // namespace

void check_pack_against_config(const PackManifest& m, const ModelConfig& c, const std::filesystem::path& dir) {
  const std::string where = (dir / kManifestFileName).string();
  if (!m.config_fingerprint.empty()) {
    const std::string actual = config_fingerprint(dir / "config.json");
    if (actual != m.config_fingerprint)
      throw_error(
          "{}: config.json is not the one this pack was made with (its fingerprint is {}, {} records {}); "
          "repack the model",
          (dir / "config.json").string(), actual, where, m.config_fingerprint);
  }
  if (m.num_experts != c.n_expert || m.num_moe_layers != c.n_moe_layers())
    throw_error("{}: {} MoE layers x {} experts, but config.json says {} x {}", where, m.num_moe_layers, m.num_experts,
                c.n_moe_layers(), c.n_expert);
  const std::vector<int64_t> in_shape = {c.n_ff_expert, c.n_embd}, out_shape = {c.n_embd, c.n_ff_expert};
  for (int64_t il = 0; il < c.n_layer; ++il) {
    if (!c.is_moe_layer(il)) continue;
    for (int32_t e = 0; e < c.n_expert; ++e) {
      const auto it = m.experts.find(ExpertKey{int32_t(il), e});
      if (it == m.experts.end()) throw_error("{}: layer {} expert {} is missing", where, il, e);
      const PackedExpert& p = it->second;
      if (p.gate.shape != in_shape || p.up.shape != in_shape || p.down.shape != out_shape)
        throw_error("{}: layer {} expert {}: shapes [{}], [{}], [{}] do not match config.json", where, il, e,
                    fmt::join(p.gate.shape, ","), fmt::join(p.up.shape, ","), fmt::join(p.down.shape, ","));
    }
  }
}

PackedExperts::PackedExperts(const Model& model, const std::filesystem::path& pack_dir, Backend& backend,
                             const StreamerOptions& options)
    : model_(model), backend_(backend), manifest_(manifest_of(model, pack_dir)), options_(options) {
  const ModelConfig& c = model.config();
  // The files the experts are read from: the pack folder's, or the .gguf file's own folder.
  const std::filesystem::path files_dir =
      model.gguf_experts() != nullptr ? model.gguf_file()->path().parent_path() : pack_dir;
  ExpertCache::Options cache_options;
  cache_options.budget_bytes = options.budget_bytes;
  cache_options.slot_bytes = largest_extent(manifest_);
  cache_options.policy = options.policy;
  if (options.on_miss == OnMiss::kLowbit) {
    // The copies are resident for the whole run, inside the one expert budget; the rest is slots.
    // A .gguf file read in place has none of its own: they come from a folder (--lowbit DIR).
    if (!options.lowbit_dir.empty()) manifest_.lowbit = load_lowbit_sidecar(options.lowbit_dir, manifest_);
    if (!manifest_.lowbit && model.gguf_experts() != nullptr)
      throw_error(
          "{}: --on-miss lowbit needs low-bit copies of the experts, which a .gguf file does not hold: make them "
          "with chronos pack -m {} --lowbit-type q2_k --lowbit-only -o DIR, then --lowbit DIR",
          pack_dir.string(), pack_dir.string());
    if (!manifest_.lowbit)
      throw_error("{}: --on-miss lowbit needs the pack's low-bit copies (chronos pack --lowbit-type q2_k)",
                  pack_dir.string());
    const int64_t lowbit = manifest_.lowbit->bytes;
    const auto mib = [](int64_t bytes) { return double(bytes) / (1 << 20); };
    if (lowbit + cache_options.slot_bytes > options.budget_bytes)
      throw BudgetTooSmall(
          BudgetTooSmall::Budget::kExpertCache,
          fmt::format("the low-bit copies ({}) take {:.1f} MiB of the {:.1f} MiB budget, leaving less "
                      "than one expert ({:.1f} MiB)",
                      manifest_.lowbit->dtype, mib(lowbit), mib(options.budget_bytes), mib(cache_options.slot_bytes)));
    cache_options.budget_bytes -= lowbit;
  }
  cache_ = std::make_unique<SharedExpertCache>(backend, cache_options);
  prefetcher_ = std::make_unique<AsyncPrefetcher>(manifest_, files_dir, *cache_, backend, options.prefetch);
  views_.resize(size_t(c.n_expert));
  pinned_.assign(size_t(c.n_expert), 0);
  consumed_.assign(size_t(c.n_expert), nullptr);
  record_used_ = options.mode == PrefetchMode::kLru;
  if (options.on_miss == OnMiss::kLowbit)
    load_lowbit_copies(options.lowbit_dir.empty() ? pack_dir : options.lowbit_dir);
}

// Reads lowbit.ctsr (of `dir`) whole into device memory, every copy's checksum verified on the host first.
void PackedExperts::load_lowbit_copies(const std::filesystem::path& dir) {
  const LowbitCopies& lowbit = *manifest_.lowbit;
  const std::filesystem::path path = dir / lowbit.file;
  const size_t bytes = size_t(lowbit.bytes);
  Buffer host = backend_.staging_is_device() ? backend_.alloc_device(bytes) : backend_.alloc_staging(bytes);
  try {
    std::ifstream in(path, std::ios::binary);
    if (!in || !in.read(static_cast<char*>(host.data), std::streamsize(bytes)))
      throw_error("{}: cannot read its {} bytes", path.string(), bytes);
    const auto* base = static_cast<const std::byte*>(host.data);
    for (const auto& [key, copy] : lowbit.experts)
      verify_expert_bytes(copy, lowbit.file, {base + copy.offset, size_t(copy.bytes)});
    if (backend_.staging_is_device()) {
      lowbit_buffer_ = host;
    } else {
      lowbit_buffer_ = backend_.alloc_device(bytes);
      const auto stream = backend_.create_stream();
      backend_.copy_to_device(*stream, lowbit_buffer_.data, host.data, bytes);
      stream->synchronize();
      backend_.free_staging(host);
    }
  } catch (...) {
    if (lowbit_buffer_.data != nullptr && lowbit_buffer_.data != host.data) backend_.free_device(lowbit_buffer_);
    backend_.staging_is_device() ? backend_.free_device(host) : backend_.free_staging(host);
    lowbit_buffer_ = {};
    throw;
  }
  const ModelConfig& c = model_.config();
  lowbit_views_.resize(size_t(c.n_layer * c.n_expert));
  auto* device = static_cast<std::byte*>(lowbit_buffer_.data);
  for (const auto& [key, copy] : lowbit.experts)
    lowbit_views_[size_t(key.layer * c.n_expert + key.expert)] = view_of(copy, device + copy.offset);
}

PackedExperts::~PackedExperts() {
  prefetcher_.reset();
  if (lowbit_buffer_.data != nullptr) backend_.free_device(lowbit_buffer_);
}

FfnWeights PackedExperts::view_of(const PackedExpert& expert, void* data) const {
  auto view = [&](const PackedTensor& t) {
    return WeightView{static_cast<const std::byte*>(data) + expert.slot_offset(t), t.dtype, t.shape[0], t.shape[1]};
  };
  return FfnWeights{view(expert.gate), view(expert.up), view(expert.down)};
}

size_t PackedExperts::max_experts_per_acquire() const { return size_t(std::max<int64_t>(1, cache_->n_slots())); }

void PackedExperts::acquire(int64_t layer, std::span<const int32_t> experts, std::span<const float> weights,
                            std::span<const FfnWeights*> views) {
  // A failed or corrupt read is an error in every miss mode: the stand-ins are for experts that
  // are late, never for experts whose bytes are wrong.
  if (const auto error = prefetcher_->error()) std::rethrow_exception(error);
  const int64_t n_expert = model_.config().n_expert;
  for (size_t i = 0; i < experts.size(); ++i) {
    const int32_t e = experts[i];
    const ExpertKey key{int32_t(layer), e};
    const PackedExpert& packed = manifest_.experts.at(key);
    auto cache = cache_->lock();
    ++stats_.lookups;
    ExpertCache::Lookup slot = cache->acquire(key);
    // A hit is an expert whose bytes are in place now. A ready slot whose copy event has not fired
    // is still arriving: it counts with the loading ones (the non-blocking modes serve it as a miss,
    // so counting it as a hit made hits + lowbit exceed the lookups).
    const bool usable = slot.state == SlotState::kReady && slot.ready->query();
    if (slot.state == SlotState::kEmpty)
      ++stats_.misses;
    else if (!usable)
      ++stats_.hits_loading;
    else
      ++stats_.hits;
    stats_.lookup_bytes += packed.bytes;
    if (usable) stats_.hit_bytes += packed.bytes;

    // Whether this expert is worth waiting for in the non-blocking modes (unknown weight: it is).
    const bool heavy = options_.wait_above && (weights.empty() || weights[i] >= *options_.wait_above);
    if (options_.on_miss != OnMiss::kWait && !heavy) {
      // Never block: only an expert whose bytes are usable right now is computed in full.
      if (!usable) {
        if (slot.state != SlotState::kEmpty) cache->release(key);
        const bool lowbit = options_.on_miss == OnMiss::kLowbit;
        ++(lowbit ? stats_.lowbit : stats_.fallbacks);
        cache.unlock();
        if (slot.state == SlotState::kEmpty) {  // fetched for the tokens that follow
          const FetchRequest request{key, FetchPriority::kDemand, step_};
          prefetcher_->enqueue({&request, 1});
        }
        views[i] = lowbit ? &lowbit_views_[size_t(layer * n_expert + e)] : nullptr;
        pinned_[size_t(e)] = 0;
        continue;
      }
    } else if (slot.state != SlotState::kReady) {
      const auto start = Clock::now();
      const bool requested = slot.state == SlotState::kEmpty;
      const FetchRequest request{key, FetchPriority::kDemand, step_};
      // Every load that finishes or fails wakes this thread (shared_expert_cache.h).
      for (;;) {
        if (prefetcher_->error() != nullptr) break;
        const SlotState state = cache->find(key).state;
        if (state == SlotState::kReady) break;
        // An expert read on demand is not pinned until this thread wakes, so a prefetch may evict
        // it in between; whenever it is absent (not loading, not ready), ask for it (again), under
        // the cache lock, so no load can finish between the request and the sleep. A key is queued
        // once however often it is asked for.
        if (requested && state == SlotState::kEmpty) prefetcher_->enqueue({&request, 1});
        cache.wait();
      }
      if (const auto error = prefetcher_->error()) {
        if (!requested) cache->release(key);
        std::rethrow_exception(error);
      }
      slot = requested ? cache->acquire(key) : cache->find(key);  // pin it (already pinned if it was loading)
      ++stats_.waits;
      if (compute_stream_ == nullptr) {
        cache.unlock();
        slot.ready->wait();
        cache.relock();
      }
      stats_.stall_seconds += std::chrono::duration<double>(Clock::now() - start).count();
    }
    cache.unlock();
    if (compute_stream_ != nullptr) {
      // kReady means the copy into the slot has been queued and its event recorded, so the
      // stream's wait covers that copy (waiting on an event recorded later would be too late).
      if (!slot.ready->query()) {
        compute_stream_->wait_event(*slot.ready);
        cache.relock();
        ++stats_.device_waits;
        cache.unlock();
      }
    } else if (!slot.ready->query()) {  // ready in the cache, the copy event not yet signalled
      const auto start = Clock::now();
      slot.ready->wait();
      cache.relock();
      stats_.stall_seconds += std::chrono::duration<double>(Clock::now() - start).count();
      cache.unlock();
    }
    consumed_[size_t(e)] = slot.consumed;
    views_[size_t(e)] = view_of(packed, slot.data);
    views[i] = &views_[size_t(e)];
    pinned_[size_t(e)] = 1;
    if (record_used_) used_.push_back(key);
  }
}

void PackedExperts::release(int64_t layer, std::span<const int32_t> experts) {
  const auto cache = cache_->lock();
  for (const int32_t e : experts) {
    if (!pinned_[size_t(e)]) continue;
    // Kernels reading the slot may still be queued: the next copy into it waits for this event.
    if (compute_stream_ != nullptr) compute_stream_->record(*consumed_[size_t(e)]);
    cache->release(ExpertKey{int32_t(layer), e});
    pinned_[size_t(e)] = 0;
  }
}

int64_t PackedExperts::begin_step() {
  if (const auto error = prefetcher_->error()) std::rethrow_exception(error);
  int64_t step;
  {
    const auto cache = cache_->lock();
    step = ++step_;
    cache->advance_step(step);
  }
  prefetcher_->cancel_stale(step);
  return step;
}

void PackedExperts::take_used(std::vector<ExpertKey>& out) {
  out.swap(used_);
  used_.clear();
}

void PackedExperts::load_all() {
  std::vector<FetchRequest> all;
  for (const auto& [key, expert] : manifest_.experts) all.push_back({key, FetchPriority::kIntent, step_});
  if (std::ssize(all) > cache_->n_slots())
    throw_error("loading all {} experts needs {} cache slots, the budget holds {}", all.size(), all.size(),
                cache_->n_slots());
  prefetcher_->enqueue(all);
  auto cache = cache_->lock();
  // Woken by every load and by a read error (shared_expert_cache.h).
  cache.wait([&] {
    return prefetcher_->error() != nullptr || std::all_of(all.begin(), all.end(), [&](const FetchRequest& r) {
             return cache->find(r.key).state == SlotState::kReady;
           });
  });
  if (const auto error = prefetcher_->error()) std::rethrow_exception(error);
}

}  // namespace chronos
