// Encode/decode/stream against the Hugging Face tokenizers outputs stored in the fixtures.
#include <gtest/gtest.h>

#include "chronos/tokenizer.h"
#include "tokenizer/fixture_util.h"

namespace chronos {
namespace {

class HfReference : public ::testing::TestWithParam<std::string> {
 protected:
  void EncodeMatchesIdsExactly();
  void DecodeMatchesHf();
  void RoundTripsWhereHfDoes();
  void StreamingConcatenationEqualsFullDecode();
  void VocabSizeAndTokenLookupsAgree();
  void SetUp() override {
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(test::tokenizer_fixture(GetParam())));
    cases_ = test::read_json(test::tokenizer_fixture(GetParam()) / "cases.json");
  }
  std::unique_ptr<Tokenizer> tokenizer_;
  nlohmann::json cases_;
};

std::string shown(const std::string& text) { return text.size() > 80 ? text.substr(0, 80) + "..." : text; }

void HfReference::EncodeMatchesIdsExactly() {
  ASSERT_FALSE(cases_["cases"].empty());
  for (const auto& c : cases_["cases"]) {
    const auto text = c["text"].get<std::string>();
    EXPECT_EQ(tokenizer_->encode(text, true), c["ids"].get<std::vector<int32_t>>()) << shown(text);
    EXPECT_EQ(tokenizer_->encode(text, false), c["ids_no_special"].get<std::vector<int32_t>>()) << shown(text);
  }
}

void HfReference::DecodeMatchesHf() {
  for (const auto& c : cases_["cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer_->decode(ids, false), c["decoded"].get<std::string>()) << shown(c["text"]);
    EXPECT_EQ(tokenizer_->decode(ids, true), c["decoded_skip_special"].get<std::string>()) << shown(c["text"]);
    const auto raw = c["ids_no_special"].get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer_->decode(raw, false), c["decoded_no_special"].get<std::string>()) << shown(c["text"]);
  }
}

void HfReference::RoundTripsWhereHfDoes() {
  int round_trips = 0;
  for (const auto& c : cases_["cases"]) {
    const auto text = c["text"].get<std::string>();
    if (c["decoded_no_special"].get<std::string>() != text) continue;
    ++round_trips;
    EXPECT_EQ(tokenizer_->decode(tokenizer_->encode(text, false)), text) << shown(text);
  }
  // Byte-level tokenizers round-trip everything; the rest at least the plain-text cases.
  EXPECT_GT(round_trips, 0);
}

void HfReference::StreamingConcatenationEqualsFullDecode() {
  for (const auto& c : cases_["cases"]) {
    for (const char* key : {"ids", "ids_no_special"}) {
      const auto ids = c[key].get<std::vector<int32_t>>();
      for (const bool skip : {false, true}) {
        TokenStreamDecoder stream(*tokenizer_, skip);
        std::string streamed;
        for (const int32_t id : ids) {
          const auto piece = stream.push(id);
          EXPECT_TRUE(test::is_valid_utf8(piece)) << shown(c["text"]);
          streamed += piece;
        }
        streamed += stream.finish();
        EXPECT_EQ(streamed, tokenizer_->decode(ids, skip)) << shown(c["text"]) << " skip=" << skip;
      }
    }
  }
}

void HfReference::VocabSizeAndTokenLookupsAgree() {
  EXPECT_EQ(tokenizer_->vocab_size(), cases_["vocab_size"].get<int32_t>());
  for (int32_t id = 0; id < tokenizer_->vocab_size(); id += 97) {
    const auto token = tokenizer_->id_to_token(id);
    EXPECT_EQ(tokenizer_->token_to_id(token), id);
  }
}

// One test per fixture, its checks in turn: loading a real vocabulary is most of the time, and each
// test runs in its own process.
TEST_P(HfReference, MatchesTheTokenizersLibrary) {
  {
    SCOPED_TRACE("EncodeMatchesIdsExactly");
    EncodeMatchesIdsExactly();
  }
  {
    SCOPED_TRACE("DecodeMatchesHf");
    DecodeMatchesHf();
  }
  {
    SCOPED_TRACE("RoundTripsWhereHfDoes");
    RoundTripsWhereHfDoes();
  }
  {
    SCOPED_TRACE("StreamingConcatenationEqualsFullDecode");
    StreamingConcatenationEqualsFullDecode();
  }
  {
    SCOPED_TRACE("VocabSizeAndTokenLookupsAgree");
    VocabSizeAndTokenLookupsAgree();
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfReference, ::testing::ValuesIn(test::tokenizer_fixture_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace chronos
