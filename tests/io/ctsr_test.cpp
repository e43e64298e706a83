// .ctsr cluster files and cluster_manifest.json: layout, round trip, checksums, and every way a
// pack can disagree with its manifest.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>

#include "chronos/error.h"
#include "chronos/pack_format.h"
#include "chronos/safetensors.h"
#include "io/io_test_util.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;
using test::kFixtures;

WeightView view_of(const TensorInfo& tensor) {
  EXPECT_EQ(tensor.shape.size(), 2u) << tensor.name;
  return WeightView{tensor.data, tensor.dtype, tensor.shape[0], tensor.shape[1]};
}

std::string bytes_of(const WeightView& view) {
  return std::string(static_cast<const char*>(view.data), size_t(view.rows * view.cols * dtype_size(view.dtype)));
}

void expect_error(const std::function<void()>& action, std::initializer_list<std::string_view> fragments) {
  try {
    action();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    for (auto fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
  }
}

class CtsrTest : public test::ScratchDir {
 protected:
  void SetUp() override {
    ScratchDir::SetUp();
    store_ = std::make_unique<TensorStore>(TensorStore::open(kFixtures / "models" / "mixtral-f32"));
    // An expert whose 420 bytes are far from a multiple of 4096, so the writer must pad it.
    for (int i = 0; i < 35; ++i) {
      odd_gate_.push_back(float(i) * 0.5f);
      odd_up_.push_back(float(-i));
      odd_down_.push_back(float(i * i));
    }
  }

  ExpertSource fixture_expert(int32_t layer, int32_t expert) const {
    const std::string p = fmt::format("model.layers.{}.block_sparse_moe.experts.{}.", layer, expert);
    return {{layer, expert},
            view_of(store_->get(p + "w1.weight")),
            view_of(store_->get(p + "w3.weight")),
            view_of(store_->get(p + "w2.weight"))};
  }
  ExpertSource odd_expert(int32_t layer, int32_t expert) const {
    return {{layer, expert},
            {odd_gate_.data(), DType::kF32, 5, 7},
            {odd_up_.data(), DType::kF32, 5, 7},
            {odd_down_.data(), DType::kF32, 7, 5}};
  }

  // Two clusters (one with a padded expert) and their manifest, saved in dir_.
  PackManifest write_pack() {
    PackManifest m;
    m.architecture = "Mixtral";
    m.num_moe_layers = 4;
    m.num_experts = 8;
    m.dtype = "F32";
    m.fingerprint = "fp-0123";
    m.clustering_method = "louvain";
    m.clustering_trace = "traces/chunk_000.trace";
    m.clustering_seed = 42;
    const std::vector<std::vector<ExpertSource>> clusters = {
        {fixture_expert(0, 3), odd_expert(3, 1), fixture_expert(2, 0)}, {fixture_expert(1, 5), fixture_expert(0, 7)}};
    for (int32_t id = 0; id < int32_t(clusters.size()); ++id) {
      const std::string file = fmt::format("cluster_{:03}.ctsr", id);
      const auto packed = write_ctsr(dir_ / file, id, m.fingerprint, clusters[size_t(id)]);
      PackCluster cluster{id, file, int64_t(fs::file_size(dir_ / file)), {}};
      for (const PackedExpert& expert : packed) {
        cluster.experts.push_back(expert.key);
        m.experts[expert.key] = expert;
      }
      m.clusters.push_back(cluster);
    }
    m.save(dir_ / kManifestFileName);
    return m;
  }

  nlohmann::json read_manifest_json() const {
    return nlohmann::json::parse(test::read_bytes(dir_ / kManifestFileName));
  }
  void write_manifest_json(const nlohmann::json& json) const {
    test::write_bytes(dir_ / kManifestFileName, json.dump(1));
  }

  std::unique_ptr<TensorStore> store_;
  std::vector<float> odd_gate_, odd_up_, odd_down_;
};

TEST_F(CtsrTest, WritesValidSafetensorsWithAlignedPaddedExtents) {
  const std::vector<ExpertSource> sources = {fixture_expert(0, 3), odd_expert(3, 1), fixture_expert(2, 0)};
  const auto packed = write_ctsr(dir_ / "cluster_007.ctsr", 7, "fp-abc", sources);
  ASSERT_EQ(packed.size(), 3u);
  EXPECT_EQ(test::count_temporaries(dir_), 0);

  // The raw header: its length puts the data buffer on a 4096 boundary, padded with spaces.
  const std::string raw = test::read_bytes(dir_ / "cluster_007.ctsr");
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | uint8_t(raw[size_t(i)]);
  EXPECT_EQ((8 + header_size) % 4096, 0u);
  const std::string header = raw.substr(8, header_size);
  const size_t last_brace = header.find_last_of('}');
  EXPECT_EQ(header.find_first_not_of(' ', last_brace + 1), std::string::npos);

  const auto file = SafetensorsFile::open(dir_ / "cluster_007.ctsr");
  const std::map<std::string, std::string> expected_meta = {
      {"format", "ctsr"}, {"version", "1"}, {"cluster", "7"}, {"fingerprint", "fp-abc"}};
  EXPECT_EQ(file->metadata(), expected_meta);
  std::vector<std::string> names;
  for (const TensorInfo& t : file->tensors()) names.push_back(t.name);
  const std::vector<std::string> expected_names = {"layers.0.experts.3.gate",
                                                   "layers.0.experts.3.up",
                                                   "layers.0.experts.3.down",
                                                   "layers.3.experts.1.gate",
                                                   "layers.3.experts.1.up",
                                                   "layers.3.experts.1.down",
                                                   "__pad.0",
                                                   "layers.2.experts.0.gate",
                                                   "layers.2.experts.0.up",
                                                   "layers.2.experts.0.down"};
  EXPECT_EQ(names, expected_names);

  for (size_t i = 0; i < sources.size(); ++i) {
    const ExpertSource& source = sources[i];
    const PackedExpert& expert = packed[i];
    SCOPED_TRACE(fmt::format("expert {}.{}", source.key.layer, source.key.expert));
    EXPECT_EQ(expert.key, source.key);
    EXPECT_EQ(expert.cluster, 7);
    EXPECT_EQ(expert.offset % 4096, 0);
    EXPECT_EQ(expert.bytes % 4096, 0);
    EXPECT_GE(expert.bytes, expert.payload_bytes());
    EXPECT_LT(expert.bytes - expert.payload_bytes(), 4096);
    EXPECT_EQ(expert.gate.offset, expert.offset);
    EXPECT_EQ(expert.up.offset, expert.gate.offset + expert.gate.bytes);
    EXPECT_EQ(expert.down.offset, expert.up.offset + expert.up.bytes);
    const std::string concatenated = bytes_of(source.gate) + bytes_of(source.up) + bytes_of(source.down);
    EXPECT_EQ(expert.xxh64, XXH64(concatenated.data(), concatenated.size(), 0));
    EXPECT_EQ(raw.substr(size_t(expert.offset), concatenated.size()), concatenated);
    for (const auto& [projection, tensor, view] :
         {std::tuple{"gate", expert.gate, source.gate}, std::tuple{"up", expert.up, source.up},
          std::tuple{"down", expert.down, source.down}}) {
      const TensorInfo* info = file->find(ctsr_tensor_name(source.key, projection));
      ASSERT_NE(info, nullptr) << projection;
      EXPECT_EQ(info->file_offset, tensor.offset);
      EXPECT_EQ(info->shape, (std::vector<int64_t>{view.rows, view.cols}));
      EXPECT_EQ(info->dtype, DType::kF32);
      EXPECT_EQ(tensor.shape, info->shape);
    }
  }
  // The padded expert: 3 * 35 floats, then zeros up to the next 4096 boundary.
  EXPECT_EQ(packed[1].payload_bytes(), 420);
  EXPECT_EQ(packed[1].bytes, 4096);
  const TensorInfo* pad = file->find("__pad.0");
  ASSERT_NE(pad, nullptr);
  EXPECT_EQ(pad->dtype, DType::kU8);
  EXPECT_EQ(pad->shape, (std::vector<int64_t>{4096 - 420}));
  EXPECT_EQ(pad->file_offset, packed[1].offset + 420);
  EXPECT_EQ(raw.substr(size_t(pad->file_offset), size_t(pad->n_bytes)), std::string(size_t(pad->n_bytes), '\0'));
  EXPECT_EQ(int64_t(raw.size()), packed.back().offset + packed.back().bytes);
}

TEST_F(CtsrTest, RefusesDuplicateExperts) {
  const std::vector<ExpertSource> sources = {fixture_expert(0, 3), fixture_expert(0, 3)};
  expect_error([&] { write_ctsr(dir_ / "c.ctsr", 0, "fp", sources); }, {"c.ctsr", "layer 0 expert 3", "twice"});
  EXPECT_FALSE(fs::exists(dir_ / "c.ctsr"));
  EXPECT_EQ(test::count_temporaries(dir_), 0);
}

TEST_F(CtsrTest, ManifestRoundTrip) {
  const PackManifest written = write_pack();
  const nlohmann::json json = read_manifest_json();
  EXPECT_EQ(json["format"], "chronos-cluster-manifest");
  EXPECT_EQ(json["version"], 1);
  EXPECT_EQ(json["experts"]["3.1"]["xxh64"].get<std::string>().size(), 16u);
  EXPECT_EQ(json["clusters"][0]["experts"][1], nlohmann::json::array({3, 1}));

  const PackManifest loaded = PackManifest::load(dir_);
  EXPECT_EQ(loaded.architecture, written.architecture);
  EXPECT_EQ(loaded.num_moe_layers, written.num_moe_layers);
  EXPECT_EQ(loaded.num_experts, written.num_experts);
  EXPECT_EQ(loaded.dtype, written.dtype);
  EXPECT_EQ(loaded.fingerprint, written.fingerprint);
  EXPECT_EQ(loaded.clustering_method, written.clustering_method);
  EXPECT_EQ(loaded.clustering_trace, written.clustering_trace);
  EXPECT_EQ(loaded.clustering_seed, written.clustering_seed);
  ASSERT_EQ(loaded.clusters.size(), written.clusters.size());
  for (size_t i = 0; i < loaded.clusters.size(); ++i) {
    EXPECT_EQ(loaded.clusters[i].id, written.clusters[i].id);
    EXPECT_EQ(loaded.clusters[i].file, written.clusters[i].file);
    EXPECT_EQ(loaded.clusters[i].bytes, written.clusters[i].bytes);
    EXPECT_EQ(loaded.clusters[i].experts, written.clusters[i].experts);
  }
  ASSERT_EQ(loaded.experts.size(), 5u);
  for (const auto& [key, w] : written.experts) {
    SCOPED_TRACE(fmt::format("expert {}.{}", key.layer, key.expert));
    const PackedExpert& l = loaded.experts.at(key);
    EXPECT_EQ(l.key, w.key);
    EXPECT_EQ(l.cluster, w.cluster);
    EXPECT_EQ(l.offset, w.offset);
    EXPECT_EQ(l.bytes, w.bytes);
    EXPECT_EQ(l.xxh64, w.xxh64);
    for (const auto& [lt, wt] : {std::pair{l.gate, w.gate}, std::pair{l.up, w.up}, std::pair{l.down, w.down}}) {
      EXPECT_EQ(lt.offset, wt.offset);
      EXPECT_EQ(lt.shape, wt.shape);
      EXPECT_EQ(lt.dtype, wt.dtype);
      EXPECT_EQ(lt.bytes, wt.bytes);
    }
  }
}

TEST_F(CtsrTest, FlippedByteIsCaughtByChecksum) {
  const PackManifest m = write_pack();
  const PackedExpert& expert = m.experts.at({3, 1});  // in cluster_000.ctsr, padded
  std::string raw = test::read_bytes(dir_ / "cluster_000.ctsr");
  std::string extent = raw.substr(size_t(expert.offset), size_t(expert.bytes));
  const auto as_span = [](const std::string& s) { return std::as_bytes(std::span<const char>(s)); };
  verify_expert_bytes(expert, "cluster_000.ctsr", as_span(extent));  // intact: no error
  // Padding is outside the checksum; a payload byte is not.
  extent[size_t(expert.payload_bytes()) + 10] ^= 0x01;
  verify_expert_bytes(expert, "cluster_000.ctsr", as_span(extent));
  extent[size_t(expert.up.offset - expert.offset) + 3] ^= 0x20;
  expect_error([&] { verify_expert_bytes(expert, "cluster_000.ctsr", as_span(extent)); },
               {"cluster_000.ctsr", "layer 3 expert 1", "checksum mismatch", fmt::format("{:016x}", expert.xxh64)});
  // Too few bytes is an error too, not a read past the span.
  expect_error([&] { verify_expert_bytes(expert, "cluster_000.ctsr", as_span(extent).first(100)); },
               {"cluster_000.ctsr", "layer 3 expert 1", "100 bytes"});
}

TEST_F(CtsrTest, TruncatedClusterFileIsRejected) {
  write_pack();
  const fs::path path = dir_ / "cluster_001.ctsr";
  const auto size = fs::file_size(path);
  fs::resize_file(path, size - 100);
  expect_error([&] { PackManifest::load(dir_); }, {"cluster_001.ctsr", "truncated"});
  expect_error([&] { SafetensorsFile::open(path); }, {"cluster_001.ctsr", "truncated"});
}

TEST_F(CtsrTest, MissingClusterFileIsRejected) {
  write_pack();
  fs::remove(dir_ / "cluster_001.ctsr");
  expect_error([&] { PackManifest::load(dir_); }, {"cluster_001.ctsr", "missing"});
}

TEST_F(CtsrTest, ReplacedClusterFileIsRejected) {
  // Same size, different cluster id in the metadata: the files were swapped.
  PackManifest m = write_pack();
  const std::vector<ExpertSource> sources = {fixture_expert(1, 5), fixture_expert(0, 7)};
  write_ctsr(dir_ / "cluster_001.ctsr", 9, m.fingerprint, sources);
  expect_error([&] { PackManifest::load(dir_); }, {"cluster_001.ctsr", "cluster", "\"9\"", "\"1\""});
}

struct ManifestEdit {
  const char* what;
  std::function<void(nlohmann::json&)> edit;
  std::vector<std::string> fragments;
};

TEST_F(CtsrTest, ManifestThatDisagreesWithTheFileIsRejected) {
  const std::vector<ManifestEdit> edits = {
      {"tensor offset",
       [](nlohmann::json& j) {
         j["experts"]["0.3"]["tensors"]["up"]["offset"] =
             j["experts"]["0.3"]["tensors"]["up"]["offset"].get<int64_t>() + 4;
       },
       {"cluster_000.ctsr", "layer 0 expert 3", "tensor up", "offset"}},
      {"extent offset",
       [](nlohmann::json& j) { j["experts"]["1.5"]["offset"] = j["experts"]["1.5"]["offset"].get<int64_t>() + 4096; },
       {"cluster_001.ctsr", "layer 1 expert 5", "offset"}},
      {"extent bytes",
       [](nlohmann::json& j) { j["experts"]["2.0"]["bytes"] = j["experts"]["2.0"]["bytes"].get<int64_t>() + 4096; },
       {"cluster_000.ctsr", "layer 2 expert 0", "bytes"}},
      {"unaligned bytes",
       [](nlohmann::json& j) { j["experts"]["3.1"]["bytes"] = 420; },
       {"cluster_000.ctsr", "layer 3 expert 1", "aligned"}},
      {"shape",
       [](nlohmann::json& j) {
         j["experts"]["0.7"]["tensors"]["down"]["shape"] = {32, 64};
       },
       {"cluster_001.ctsr", "layer 0 expert 7", "tensor down", "shape [32, 64]", "[64, 32]"}},
      {"dtype",
       [](nlohmann::json& j) { j["experts"]["0.7"]["tensors"]["gate"]["dtype"] = "I32"; },
       {"cluster_001.ctsr", "layer 0 expert 7", "tensor gate", "dtype I32"}},
      {"cluster size", [](nlohmann::json& j) { j["clusters"][1]["bytes"] = 123; }, {"cluster_001.ctsr", "123"}},
      {"fingerprint",
       [](nlohmann::json& j) { j["model"]["fingerprint"] = "other"; },
       {"cluster_000.ctsr", "fingerprint", "fp-0123", "other"}},
      {"expert in wrong cluster",
       [](nlohmann::json& j) { j["experts"]["1.5"]["cluster"] = 0; },
       {"cluster_manifest.json", "layer 1 expert 5", "cluster 0"}},
      {"expert not listed",
       [](nlohmann::json& j) { j["clusters"][1]["experts"].erase(0); },
       {"cluster_manifest.json", "experts.1.5", "does not list"}},
      {"tensor missing from the manifest",
       [](nlohmann::json& j) {
         j["experts"].erase("0.7");
         j["clusters"][1]["experts"].erase(1);
       },
       {"cluster_001.ctsr", "layers.0.experts.7.gate", "not in the manifest"}},
      {"bad checksum text",
       [](nlohmann::json& j) { j["experts"]["0.3"]["xxh64"] = "xyz"; },
       {"cluster_manifest.json", "experts.0.3.xxh64", "16 hex digits"}},
      {"bad key",
       [](nlohmann::json& j) { j["experts"]["0-3"] = j["experts"]["0.3"]; },
       {"cluster_manifest.json", "\"0-3\""}},
      {"path outside the pack",
       [](nlohmann::json& j) { j["clusters"][0]["file"] = "../cluster_000.ctsr"; },
       {"cluster_manifest.json", "clusters[0].file", "plain file name"}},
      {"wrong format", [](nlohmann::json& j) { j["format"] = "something-else"; }, {"cluster_manifest.json", "format"}},
      {"wrong version", [](nlohmann::json& j) { j["version"] = 2; }, {"cluster_manifest.json", "version 2"}},
      {"missing key",
       [](nlohmann::json& j) { j["model"].erase("num_experts"); },
       {"cluster_manifest.json", "model", "num_experts"}},
      {"expert out of range",
       [](nlohmann::json& j) { j["model"]["num_experts"] = 4; },
       {"cluster_manifest.json", "expert 7 out of range"}},
      // Found by the manifest fuzz target: offset + bytes overflowed in the end-of-file check.
      {"extent end beyond int64",
       [](nlohmann::json& j) { j["experts"]["0.7"]["offset"] = INT64_MAX - 4095; },
       {"cluster_001.ctsr", "layer 0 expert 7", "runs past the end"}},
  };
  write_pack();
  const nlohmann::json original = read_manifest_json();
  for (const ManifestEdit& e : edits) {
    SCOPED_TRACE(e.what);
    nlohmann::json json = original;
    e.edit(json);
    write_manifest_json(json);
    try {
      PackManifest::load(dir_);
      ADD_FAILURE() << "accepted";
    } catch (const Error& error) {
      const std::string message = error.what();
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      for (const auto& fragment : e.fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
    }
  }
  write_manifest_json(original);
  EXPECT_NO_THROW(PackManifest::load(dir_));
}

TEST_F(CtsrTest, ModelFingerprintIsCanonicalAndDiscriminating) {
  const fs::path mixtral = kFixtures / "models" / "mixtral-f32";
  const std::string fingerprint = model_fingerprint(mixtral);
  EXPECT_EQ(fingerprint.size(), 32u);
  EXPECT_EQ(model_fingerprint(mixtral), fingerprint);
  EXPECT_NE(model_fingerprint(kFixtures / "models" / "mixtral-bf16"), fingerprint);
  EXPECT_NE(model_fingerprint(kFixtures / "models" / "qwen2_moe-f32"), fingerprint);

  // A copy whose config.json is re-serialized (other key order, no whitespace) is the same model.
  fs::copy_file(mixtral / "model.safetensors", dir_ / "model.safetensors");
  const nlohmann::ordered_json config = nlohmann::ordered_json::parse(test::read_bytes(mixtral / "config.json"));
  std::vector<std::string> keys;
  for (const auto& [key, value] : config.items()) keys.push_back(key);
  nlohmann::ordered_json shuffled;
  for (auto it = keys.rbegin(); it != keys.rend(); ++it) shuffled[*it] = config[*it];
  test::write_bytes(dir_ / "config.json", shuffled.dump());
  EXPECT_EQ(model_fingerprint(dir_), fingerprint);
  shuffled["rms_norm_eps"] = 1e-5;
  test::write_bytes(dir_ / "config.json", shuffled.dump());
  EXPECT_NE(model_fingerprint(dir_), fingerprint);

  // A pack folder answers with the fingerprint of the model it was packed from.
  const fs::path pack = dir_ / "pack";
  fs::create_directories(pack);
  test::write_bytes(pack / kManifestFileName, R"({"model": {"fingerprint": "abc"}})");
  EXPECT_EQ(model_fingerprint(pack), "abc");
}

}  // namespace
}  // namespace chronos
