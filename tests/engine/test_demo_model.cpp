// The bundled demo model against transformers: tokenizer ids and 64 greedy tokens per reference prompt.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "chronos/model.h"
#include "chronos/thread_pool.h"
#include "chronos/tokenizer.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

const fs::path kDemo = fs::path(CHRONOS_SOURCE_DIR) / "models" / "chronos-demo";

// transformers' reference ran generate(min_new_tokens=64), which masks EOS until 64 tokens exist;
// the same mask here. The saved weights are bf16; Chronos computes in f32, so the reference is
// transformers on the same weights loaded as float32 ("output_ids_f32").
TEST(DemoModel, GreedyTokensMatchTransformers) {
  ASSERT_TRUE(fs::exists(kDemo / "reference.json")) << "the demo model is part of the repository";
  const auto model = Model::load(kDemo);
  const Tokenizer tokenizer = Tokenizer::load(kDemo);
  std::ifstream in(kDemo / "reference.json");
  const auto refs = nlohmann::json::parse(in)["prompts"];
  ASSERT_GE(refs.size(), 3u);
  ThreadPool pool(2);
  const ModelConfig& c = model->config();
  for (const auto& ref : refs) {
    const auto ids = ref["input_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer.encode(ref["prompt"].get<std::string>(), true), ids) << ref["domain"];
    const auto expected = ref["output_ids_f32"].get<std::vector<int32_t>>();
    KvCache kv(c, std::ssize(ids) + std::ssize(expected) + 1);
    auto scratch = model->make_scratch(16, kv.n_ctx());
    std::vector<float> logits(size_t(c.n_vocab));
    model->forward(ids, 0, kv, *scratch, pool, logits.data(), false);
    std::vector<int32_t> got;
    for (size_t i = 0; i < expected.size(); ++i) {
      for (int32_t eos : c.eos_token_ids) logits[size_t(eos)] = -std::numeric_limits<float>::infinity();
      got.push_back(int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
      model->forward(std::span<const int32_t>(&got.back(), 1), std::ssize(ids) + int64_t(i), kv, *scratch, pool,
                     logits.data(), false);
    }
    EXPECT_EQ(got, expected) << ref["domain"] << ": " << ref["prompt"];
  }
}

}  // namespace
}  // namespace chronos
