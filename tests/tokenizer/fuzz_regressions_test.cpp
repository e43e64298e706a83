// Regression tests for what fuzzing found in the tokenizer (tests/fuzz): numbers out of range in
// tokenizer.json, a Metaspace replacement that is not one character, and streaming decodes that
// disagreed with the full decode. Each test failed before its fix.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "chronos/error.h"
#include "chronos/tokenizer.h"
#include "tokenizer/fixture_util.h"

namespace chronos {
namespace {

std::string load_error(const std::string& tokenizer_json) {
  try {
    Tokenizer::from_json(tokenizer_json);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// Byte fallback with a Metaspace decoder, as SentencePiece conversions write it:
// ids 0-3 are the bytes 0x61 ('a'), 0xE2, 0x82, 0xAC (E2 82 AC is U+20AC), 4 is "b", 5 "▁c".
nlohmann::json byte_fallback_tokenizer() {
  return nlohmann::json::parse(R"({
    "version": "1.0",
    "added_tokens": [{"id": 6, "content": "<s>", "special": true}],
    "decoder": {"type": "Sequence", "decoders": [
      {"type": "ByteFallback"}, {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"}]},
    "model": {"type": "BPE", "byte_fallback": true, "merges": [],
              "vocab": {"<0x61>": 0, "<0xE2>": 1, "<0x82>": 2, "<0xAC>": 3, "b": 4, "\u2581c": 5}}})");
}

std::string streamed(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip_special_tokens) {
  TokenStreamDecoder stream(tokenizer, skip_special_tokens);
  std::string text;
  for (const int32_t id : ids) text += stream.push(id);
  return text + stream.finish();
}

// The JSON library's get<int>() of 4.3e84 is undefined behaviour (UBSan: "outside the range of
// representable values"); 1.5 was silently truncated to 1. Every number is checked first.
TEST(TokenizerFuzzRegressions, TokenIdsOutsideTheIntegerRangeAreRefused) {
  const std::vector<std::string> bad_ids = {"4.3e84",     "-4.3e84",   "1.5", "-1", "18446744073709551615",
                                            "4294967296", "2147483648"};
  for (const auto& bad : bad_ids) {
    SCOPED_TRACE(bad);
    auto vocab = byte_fallback_tokenizer();
    vocab["model"]["vocab"]["b"] = nlohmann::json::parse(bad);
    auto message = load_error(vocab.dump());
    EXPECT_NE(message.find("vocab id of 'b'"), std::string::npos) << message;
    EXPECT_NE(message.find("is not a token id"), std::string::npos) << message;

    auto added = byte_fallback_tokenizer();
    added["added_tokens"][0]["id"] = nlohmann::json::parse(bad);
    message = load_error(added.dump());
    EXPECT_NE(message.find("added token '<s>'"), std::string::npos) << message;
    EXPECT_NE(message.find("is not a token id"), std::string::npos) << message;

    auto post = byte_fallback_tokenizer();
    post["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [0]}}})");
    post["post_processor"]["special_tokens"]["<s>"]["ids"][0] = nlohmann::json::parse(bad);
    message = load_error(post.dump());
    EXPECT_NE(message.find("TemplateProcessing '<s>'"), std::string::npos) << message;
    EXPECT_NE(message.find("is not a token id"), std::string::npos) << message;
  }
  // The message quotes the number as the file has it.
  auto vocab = byte_fallback_tokenizer();
  vocab["model"]["vocab"]["b"] = 4.3e84;
  EXPECT_NE(load_error(vocab.dump()).find("4.3e+84"), std::string::npos) << load_error(vocab.dump());
}

// Ids index dense tables: an id of two billion would size them to tens of gigabytes.
TEST(TokenizerFuzzRegressions, TokenIdsBeyondTheTableLimitAreRefused) {
  auto vocab = byte_fallback_tokenizer();
  vocab["model"]["vocab"]["b"] = 2000000000;
  EXPECT_NE(load_error(vocab.dump()).find("is not a token id"), std::string::npos) << load_error(vocab.dump());
  auto added = byte_fallback_tokenizer();
  added["added_tokens"][0]["id"] = 2147483647;
  EXPECT_NE(load_error(added.dump()).find("is not a token id"), std::string::npos) << load_error(added.dump());
  // The largest allowed id loads.
  auto largest = byte_fallback_tokenizer();
  largest["added_tokens"][0]["id"] = (1 << 22) - 1;
  EXPECT_EQ(Tokenizer::from_json(largest.dump()).vocab_size(), 1 << 22);
}

TEST(TokenizerFuzzRegressions, StripCountsMustBeNonNegativeIntegers) {
  for (const auto& bad : {"4.3e84", "-1", "0.5"}) {
    SCOPED_TRACE(bad);
    auto json = byte_fallback_tokenizer();
    json["decoder"] = nlohmann::json::parse(R"({"type": "Strip", "content": " ", "start": 1, "stop": 0})");
    json["decoder"]["stop"] = nlohmann::json::parse(bad);
    const auto message = load_error(json.dump());
    EXPECT_NE(message.find("Strip decoder \"stop\""), std::string::npos) << message;
  }
}

// An empty replacement never advanced the Metaspace decoder (an endless loop growing its output).
// HF's replacement is one character; anything else is refused at load, in the decoder and in the
// pre-tokenizer.
TEST(TokenizerFuzzRegressions, MetaspaceReplacementMustBeOneCharacter) {
  for (const auto* component : {"decoder", "pre_tokenizer"}) {
    for (const auto* replacement : {"", "ab", "\u2581\u2581"}) {
      SCOPED_TRACE(std::string(component) + " '" + replacement + "'");
      auto json = byte_fallback_tokenizer();
      json[component] = {{"type", "Metaspace"}, {"replacement", replacement}, {"prepend_scheme", "always"}};
      const auto message = load_error(json.dump());
      EXPECT_NE(message.find("Metaspace replacement"), std::string::npos) << message;
      EXPECT_NE(message.find("is not one character"), std::string::npos) << message;
    }
  }
  auto legacy = byte_fallback_tokenizer();
  legacy["decoder"] = {{"type", "Metaspace"}, {"str_rep", ""}, {"add_prefix_space", true}};
  EXPECT_NE(load_error(legacy.dump()).find("is not one character"), std::string::npos);
  // One multi-byte character is one character.
  auto good = byte_fallback_tokenizer();
  good["decoder"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}};
  EXPECT_EQ(Tokenizer::from_json(good.dump()).decode(std::vector<int32_t>{4, 5}), "b c");
}

// An id that decodes to nothing (outside the vocabulary, or a skipped special token) inside a
// byte-fallback run ended the run for the streaming decoder, which then emitted the run's valid
// prefix; the full decode, which never sees that id, turned the whole invalid run into U+FFFD.
TEST(TokenizerFuzzRegressions, InvisibleIdInsideAByteRunStreamsLikeTheFullDecode) {
  const auto tokenizer = Tokenizer::from_json(byte_fallback_tokenizer().dump());
  const int32_t a = 0, e2 = 1, x82 = 2, xac = 3, b = 4, bos = 6, outside = 1000;
  const std::vector<std::vector<int32_t>> sequences = {
      {a, outside, e2, b},                 // 61 E2: invalid run, one U+FFFD per byte token
      {a, bos, e2, b},                     // the same with a skipped special token
      {a, outside, e2, x82, xac, b},       // 61 E2 82 AC: valid, "a€"
      {e2, outside, x82, bos, xac},        // a valid run split twice
      {e2, outside, x82, bos, b},          // an invalid run split twice
      {outside, a, outside, outside, e2},  // at the start and the end
      {bos, outside},
  };
  for (const auto& ids : sequences) {
    for (const bool skip : {false, true}) {
      SCOPED_TRACE(::testing::PrintToString(ids) + (skip ? " skip" : ""));
      EXPECT_EQ(streamed(tokenizer, ids, skip), tokenizer.decode(ids, skip));
    }
  }
  // What HF gives: the invalid run 61 E2 is two U+FFFD, not "a" and one U+FFFD.
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{a, outside, e2, b}),
            "\xEF\xBF\xBD\xEF\xBF\xBD"
            "b");
}

// The same on the Mistral fixture, whose byte tokens are real SentencePiece byte fallback.
TEST(TokenizerFuzzRegressions, InvisibleIdInsideAByteRunOnMistral) {
  const auto mistral = Tokenizer::load(test::tokenizer_fixture("mistral"));
  const int32_t x61 = *mistral.token_to_id("<0x61>"), e6 = *mistral.token_to_id("<0xE6>"),
                hello = *mistral.token_to_id("▁Hello");
  const std::vector<int32_t> ids = {hello, x61, 99999, e6, hello};
  for (const bool skip : {false, true}) {
    EXPECT_EQ(streamed(mistral, ids, skip), mistral.decode(ids, skip));
  }
  const std::vector<int32_t> with_bos = {hello, x61, 1, e6, hello};
  EXPECT_EQ(streamed(mistral, with_bos, true), mistral.decode(with_bos, true));
}

// Strip after Fuse strips the ends of the whole text: the stream decoder emitted a first window
// whose text the strip had emptied (so the rest of the strip count was never applied), and
// trailing characters that the end of the sequence strips.
TEST(TokenizerFuzzRegressions, StripAfterFuseStreamsLikeTheFullDecode) {
  const auto tokenizer = Tokenizer::from_json(R"({
    "model": {"type": "BPE", "byte_fallback": true, "merges": [],
              "vocab": {"_": 0, "x": 1, "<0xE2>": 2, "<0x82>": 3, "<0xAC>": 4}},
    "decoder": {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"Regex": "_+"}, "content": " "}, {"type": "ByteFallback"},
      {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 2, "stop": 1}]}})");
  const int32_t space = 0, x = 1, e2 = 2, x82 = 3, xac = 4;
  const std::vector<std::vector<int32_t>> sequences = {
      {space, space, x},  // "  x": both leading spaces go
      {space, space, space, x, space},
      {x, space},         // "x ": the trailing space goes
      {x, space, space},  // "x  ": one of them
      {x, space, x},      // a space in the middle stays
      {space, e2, x82, xac, space},
      {space},
      {x, space, space, e2},  // the end is U+FFFD, the spaces before it stay
  };
  for (const auto& ids : sequences) {
    for (const bool skip : {false, true}) {
      SCOPED_TRACE(::testing::PrintToString(ids));
      EXPECT_EQ(streamed(tokenizer, ids, skip), tokenizer.decode(ids, skip));
    }
  }
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{space, space, space, x, space, space}), " x ");
}

}  // namespace
}  // namespace chronos
