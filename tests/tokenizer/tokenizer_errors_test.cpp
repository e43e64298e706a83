// Bad input (files, components, UTF-8) and hand-checked behaviour of single components.
#include <gtest/gtest.h>

#include <fstream>

#include "chronos/error.h"
#include "chronos/tokenizer.h"
#include "tokenizer/fixture_util.h"

namespace chronos {
namespace {

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// A tiny byte-level-free BPE: vocab a b c ab abc, merges a+b then ab+c.
nlohmann::json tiny_tokenizer() {
  return nlohmann::json::parse(R"({
    "version": "1.0", "added_tokens": [
      {"id": 5, "content": "<s>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false}],
    "normalizer": null, "pre_tokenizer": null, "post_processor": null,
    "decoder": {"type": "Fuse"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4}, "merges": ["a b", "ab c"]}})");
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("chronos_tok_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path_ / name) << text; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

TEST(TokenizerErrors, InvalidUtf8NamesTheOffset) {
  const auto qwen = Tokenizer::load(test::tokenizer_fixture("qwen2"));
  EXPECT_EQ(error_of([&] { qwen.encode("ab\xC3(", true); }), "prompt is not valid UTF-8 (byte offset 2)");
  EXPECT_EQ(error_of([&] { qwen.encode("\xFF", true); }), "prompt is not valid UTF-8 (byte offset 0)");
  // Overlong encoding and a UTF-16 surrogate are invalid too.
  EXPECT_EQ(error_of([&] { qwen.encode("x\xC0\xAF", true); }), "prompt is not valid UTF-8 (byte offset 1)");
  EXPECT_EQ(error_of([&] { qwen.encode("xy\xED\xA0\x80", true); }), "prompt is not valid UTF-8 (byte offset 2)");
  EXPECT_EQ(error_of([&] { qwen.encode("truncated \xE6\x97", true); }), "prompt is not valid UTF-8 (byte offset 10)");
}

TEST(TokenizerErrors, MissingTokenizerJsonNamesTheFile) {
  TempDir dir;
  const auto message = error_of([&] { Tokenizer::load(dir.path()); });
  EXPECT_NE(message.find((dir.path() / "tokenizer.json").string()), std::string::npos) << message;
}

TEST(TokenizerErrors, CorruptJsonNamesTheFile) {
  TempDir dir;
  dir.write("tokenizer.json", "{\"version\": \"1.0\", \"model\": {");
  const auto message = error_of([&] { Tokenizer::load(dir.path()); });
  EXPECT_NE(message.find("tokenizer.json"), std::string::npos) << message;
  EXPECT_NE(message.find("invalid JSON"), std::string::npos) << message;

  dir.write("tokenizer.json", tiny_tokenizer().dump());
  dir.write("tokenizer_config.json", "[not json");
  const auto config_message = error_of([&] { Tokenizer::load(dir.path()); });
  EXPECT_NE(config_message.find("tokenizer_config.json"), std::string::npos) << config_message;
}

TEST(TokenizerErrors, UnknownComponentTypesAreNamed) {
  const std::vector<std::pair<std::string, nlohmann::json>> cases = {
      {"normalizer", {{"type", "NFKD"}}},
      {"pre_tokenizer", {{"type", "Whitespace"}}},
      {"decoder", {{"type", "WordPiece"}}},
      {"post_processor", {{"type", "RobertaProcessing"}}},
  };
  for (const auto& [key, node] : cases) {
    auto json = tiny_tokenizer();
    json[key] = node;
    const auto message = error_of([&] { Tokenizer::from_json(json.dump()); });
    EXPECT_NE(message.find(fmt::format("'{}'", node["type"].get<std::string>())), std::string::npos) << message;
    EXPECT_NE(message.find("tokenizer.json"), std::string::npos) << message;
  }
  auto json = tiny_tokenizer();
  json["model"]["type"] = "Unigram";
  EXPECT_NE(error_of([&] { Tokenizer::from_json(json.dump()); }).find("'Unigram'"), std::string::npos);
}

TEST(TokenizerErrors, MalformedModelIsRejected) {
  auto json = tiny_tokenizer();
  json["model"]["merges"] = {"a b c"};
  EXPECT_NE(error_of([&] { Tokenizer::from_json(json.dump()); }).find("one space"), std::string::npos);
  json["model"]["merges"] = {"a z"};
  EXPECT_NE(error_of([&] { Tokenizer::from_json(json.dump()); }).find("'z'"), std::string::npos);
  json = tiny_tokenizer();
  json["model"]["unk_token"] = "<unk>";
  EXPECT_NE(error_of([&] { Tokenizer::from_json(json.dump()); }).find("unk_token"), std::string::npos);
}

TEST(Tokenizer, TinyBpeMergesByRank) {
  const auto tok = Tokenizer::from_json(tiny_tokenizer().dump());
  EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{4}));
  EXPECT_EQ(tok.encode("abcab<s>cba"), (std::vector<int32_t>{4, 3, 5, 2, 1, 0}));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{4, 5, 2}, false), "abc<s>c");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{4, 5, 2}, true), "abcc");
  EXPECT_EQ(tok.vocab_size(), 6);
  EXPECT_TRUE(tok.is_special(5));
  EXPECT_FALSE(tok.is_special(4));
  EXPECT_THROW(tok.id_to_token(6), Error);
  EXPECT_THROW(tok.id_to_token(-1), Error);
  // Merges given as ["a", "b"] pairs behave the same.
  auto pairs = tiny_tokenizer();
  pairs["model"]["merges"] =
      nlohmann::json::array({nlohmann::json::array({"a", "b"}), nlohmann::json::array({"ab", "c"})});
  EXPECT_EQ(Tokenizer::from_json(pairs.dump()).encode("abcab"), (std::vector<int32_t>{4, 3}));
}

TEST(Tokenizer, QwenKnownIdsAndSpecials) {
  const auto qwen = Tokenizer::load(test::tokenizer_fixture("qwen2"));
  EXPECT_EQ(qwen.encode("Hello world"), (std::vector<int32_t>{9707, 1879}));
  EXPECT_EQ(qwen.token_to_id("<|im_end|>"), 151645);
  EXPECT_EQ(qwen.vocab_size(), 151669);
  EXPECT_FALSE(qwen.bos_id().has_value());
  EXPECT_EQ(qwen.eos_ids(), (std::vector<int32_t>{151645}));
  EXPECT_TRUE(qwen.is_special(151645));
  EXPECT_FALSE(qwen.is_special(151667));  // <think> is added but not special
  EXPECT_EQ(qwen.id_to_token(151667), "<think>");
}

TEST(Tokenizer, MistralKnownIdsAndSpecials) {
  const auto mistral = Tokenizer::load(test::tokenizer_fixture("mistral"));
  EXPECT_EQ(mistral.vocab_size(), 32000);
  EXPECT_EQ(mistral.bos_id(), 1);
  EXPECT_EQ(mistral.eos_ids(), (std::vector<int32_t>{2}));
  EXPECT_EQ(mistral.token_to_id("<0x0A>"), 13);
  EXPECT_EQ(mistral.encode("Hello world"), (std::vector<int32_t>{1, 22557, 1526}));
  EXPECT_EQ(mistral.encode("Hello world", false), (std::vector<int32_t>{22557, 1526}));
}

TEST(TokenStreamDecoder, HoldsPartialCharactersUntilComplete) {
  const auto qwen = Tokenizer::load(test::tokenizer_fixture("qwen2"));
  // One byte-level token per UTF-8 byte of U+65E5 (E6 97 A5): the three byte characters.
  const std::vector<int32_t> ids = {*qwen.token_to_id("æ"), *qwen.token_to_id("Ĺ"), *qwen.token_to_id("¥")};
  TokenStreamDecoder stream(qwen, false);
  EXPECT_EQ(stream.push(ids[0]), "");
  EXPECT_EQ(stream.push(ids[1]), "");
  EXPECT_EQ(stream.push(ids[2]), "\xE6\x97\xA5");
  EXPECT_EQ(stream.finish(), "");
  // A sequence cut short is flushed as U+FFFD, as the full decode does.
  TokenStreamDecoder cut(qwen, false);
  std::string cut_text = cut.push(ids[0]);
  cut_text += cut.push(ids[1]);
  EXPECT_EQ(cut_text, "");
  EXPECT_EQ(cut.finish(), "\xEF\xBF\xBD");
  EXPECT_EQ(qwen.decode(std::vector<int32_t>{ids[0], ids[1]}), "\xEF\xBF\xBD");
}

TEST(TokenStreamDecoder, ByteFallbackRunsMatchFullDecode) {
  const auto mistral = Tokenizer::load(test::tokenizer_fixture("mistral"));
  const int32_t e6 = *mistral.token_to_id("<0xE6>"), x97 = *mistral.token_to_id("<0x97>"),
                xa5 = *mistral.token_to_id("<0xA5>"), hello = *mistral.token_to_id("▁Hello");
  // A valid run, a run that turns invalid, and a run cut short: HF gives U+FFFD per byte token
  // when the whole run is invalid, so the stream must not have emitted the valid prefix early.
  const std::vector<std::vector<int32_t>> sequences = {
      {1, hello, e6, x97, xa5, hello}, {hello, e6, x97, xa5, e6, hello}, {hello, e6, x97}, {e6, x97, xa5}};
  for (const auto& ids : sequences) {
    for (const bool skip : {false, true}) {
      TokenStreamDecoder stream(mistral, skip);
      std::string streamed;
      for (const int32_t id : ids) streamed += stream.push(id);
      streamed += stream.finish();
      EXPECT_EQ(streamed, mistral.decode(ids, skip));
    }
  }
  EXPECT_EQ(mistral.decode(std::vector<int32_t>{hello, e6, x97, xa5, e6}),
            "Hello\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(mistral.decode(std::vector<int32_t>{e6, x97, xa5, hello}), "\xE6\x97\xA5 Hello");
}

TEST(TokenStreamDecoder, LeadingSpaceRuleAppliesOnlyAtSequenceStart) {
  const auto mistral = Tokenizer::load(test::tokenizer_fixture("mistral"));
  const auto ids = mistral.encode("Hello world again", false);
  TokenStreamDecoder stream(mistral, true);
  std::vector<std::string> pieces;
  for (const int32_t id : ids) pieces.push_back(stream.push(id));
  EXPECT_EQ(pieces.front(), "Hello");
  EXPECT_EQ(pieces.back(), " again");
}

}  // namespace
}  // namespace chronos

namespace chronos {
namespace {

// transformers 5.24 keeps tokenizer.json's post-processor whatever add_bos_token/add_eos_token
// say (checked on the mistral fixture with add_bos_token=false, add_eos_token=true: [1, 22557, 1526]).
TEST(Tokenizer, ConfigAddBosFlagsDoNotOverrideThePostProcessor) {
  TempDir dir;
  std::ifstream in(test::tokenizer_fixture("mistral") / "tokenizer.json");
  dir.write("tokenizer.json", std::string(std::istreambuf_iterator<char>(in), {}));
  dir.write("tokenizer_config.json",
            R"({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": false, "add_eos_token": true})");
  EXPECT_EQ(Tokenizer::load(dir.path()).encode("Hello world"), (std::vector<int32_t>{1, 22557, 1526}));
}

}  // namespace
}  // namespace chronos
