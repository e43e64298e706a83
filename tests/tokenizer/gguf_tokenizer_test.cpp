// The tokenizer built from GGUF tokenizer.* key-values against the Hugging Face references of the
// same fixture (cases.json), and one clear error per kind of bad metadata.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "chronos/error.h"
#include "chronos/gguf.h"
#include "chronos/tokenizer.h"
#include "tokenizer/fixture_util.h"

namespace chronos {
namespace {

using nlohmann::json;

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

std::string shown(const std::string& text) { return text.size() > 80 ? text.substr(0, 80) + "..." : text; }

std::filesystem::path temp_path(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  auto file = std::string("chronos_gguf_tok_") + info->test_suite_name() + "_" + info->name() + "_" + name;
  std::replace(file.begin(), file.end(), '/', '_');  // parameterized names hold slashes
  return std::filesystem::temp_directory_path() / file;
}

// A key-value-only GGUF v3 writer, enough for tokenizer metadata.
class KvWriter {
 public:
  void string(const std::string& key, const std::string& value) { begin(key, 8), str(value); }
  void u32(const std::string& key, uint32_t value) { begin(key, 4), pod(value); }
  void i32(const std::string& key, int32_t value) { begin(key, 5), pod(value); }
  void boolean(const std::string& key, bool value) { begin(key, 7), pod(static_cast<uint8_t>(value)); }
  void strings(const std::string& key, const std::vector<std::string>& values) {
    begin(key, 9), pod(uint32_t{8}), pod(static_cast<uint64_t>(values.size()));
    for (const auto& v : values) str(v);
  }
  void i32s(const std::string& key, const std::vector<int32_t>& values) { array(key, 5, values); }
  void f32s(const std::string& key, const std::vector<float>& values) { array(key, 6, values); }

  std::filesystem::path write(const std::filesystem::path& path) const {
    std::ofstream out(path, std::ios::binary);
    out.write("GGUF", 4);
    const uint32_t version = 3;
    const uint64_t n_tensors = 0;
    out.write(reinterpret_cast<const char*>(&version), 4);
    out.write(reinterpret_cast<const char*>(&n_tensors), 8);
    out.write(reinterpret_cast<const char*>(&n_kv_), 8);
    out.write(body_.data(), static_cast<std::streamsize>(body_.size()));
    EXPECT_TRUE(out.good()) << "cannot write " << path;
    return path;
  }

 private:
  template <typename T>
  void pod(T value) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &value, sizeof(T));
    body_.append(bytes, sizeof(T));
  }
  void str(const std::string& s) { pod(static_cast<uint64_t>(s.size())), body_ += s; }
  void begin(const std::string& key, uint32_t type) { ++n_kv_, str(key), pod(type); }
  template <typename T>
  void array(const std::string& key, uint32_t type, const std::vector<T>& values) {
    begin(key, 9), pod(type), pod(static_cast<uint64_t>(values.size()));
    for (const T v : values) pod(v);
  }
  uint64_t n_kv_ = 0;
  std::string body_;
};

std::filesystem::path gguf_fixture(const std::string& name) {
  return std::filesystem::path(CHRONOS_TEST_DATA_DIR) / "gguf" / ("tokenizer-" + name + ".gguf");
}

Tokenizer load_gguf(const std::filesystem::path& path) { return Tokenizer::from_gguf(*GgufFile::open(path)); }

// The real vocabularies' GGUF forms (qwen2 5.9 MB, deepseek_v3 5.6 MB, kimi_k2 and gpt_oss about 6-7 MB) are too
// large to commit: the
// test writes them from the tokenizer.json the way tools/gguf_vocab.py does (the byte-level path:
// tokens by id, added tokens as their text, CONTROL when special or "<|...|>", merges as "a b"),
// with the architecture and tokenizer.ggml.pre llama.cpp's converter gives the family.
struct RealVocab {
  const char* arch;
  const char* pre;
};
const std::map<std::string, RealVocab> kRealVocabs = {
    {"qwen2", {"qwen2moe", "qwen2"}},       {"deepseek_v3", {"deepseek2", "deepseek-v3"}},
    {"kimi_k2", {"deepseek2", "kimi-k2"}},  {"gpt_oss", {"gpt-oss", "gpt-4o"}},
    {"synth_o200k", {"gpt-oss", "gpt-4o"}}, {"synth_glm4", {"glm4moe", "glm4"}}};

// A token named by tokenizer_config.json: a string, or an AddedToken object with its content.
std::string config_token(const json& config, const char* key) {
  const auto& node = config.at(key);
  return node.is_string() ? node.get<std::string>() : node.at("content").get<std::string>();
}

std::filesystem::path write_real_gguf(const std::string& name) {
  const RealVocab& family = kRealVocabs.at(name);
  const auto path = temp_path(name + ".gguf");  // per test: ctest may run the cases in parallel
  const auto folder = test::tokenizer_fixture(name);
  const auto root = test::read_json(folder / "tokenizer.json");
  const auto config = test::read_json(folder / "tokenizer_config.json");
  std::map<int32_t, std::pair<std::string, int32_t>> by_id;  // id -> (text, type)
  for (const auto& [text, id] : root["model"]["vocab"].items()) by_id[id.get<int32_t>()] = {text, 1};
  for (const auto& added : root["added_tokens"]) {
    const auto text = added["content"].get<std::string>();
    const bool looks_special = text.starts_with("<|") && text.ends_with("|>");
    by_id[added["id"].get<int32_t>()] = {text, added["special"].get<bool>() || looks_special ? 3 : 4};
  }
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::map<std::string, int32_t> ids;
  for (const auto& [id, entry] : by_id) {
    EXPECT_EQ(static_cast<size_t>(id), tokens.size());
    ids[entry.first] = id;
    tokens.push_back(entry.first);
    types.push_back(entry.second);
  }
  KvWriter w;
  w.string("general.architecture", family.arch);
  w.string("tokenizer.ggml.model", "gpt2");
  w.string("tokenizer.ggml.pre", family.pre);
  w.strings("tokenizer.ggml.tokens", tokens);
  w.i32s("tokenizer.ggml.token_type", types);
  std::vector<std::string> merges;  // "a b", from either tokenizer.json form
  for (const auto& merge : root["model"]["merges"])
    merges.push_back(merge.is_string() ? merge.get<std::string>()
                                       : merge[0].get<std::string>() + " " + merge[1].get<std::string>());
  w.strings("tokenizer.ggml.merges", merges);
  if (config.contains("bos_token") && !config["bos_token"].is_null()) {
    w.u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(ids.at(config_token(config, "bos_token"))));
  }
  w.u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(ids.at(config_token(config, "eos_token"))));
  w.u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(ids.at(config_token(config, "pad_token"))));
  w.boolean("tokenizer.ggml.add_bos_token", false);
  std::ifstream jinja(folder / "chat_template.jinja");
  w.string("tokenizer.chat_template",
           jinja ? std::string(std::istreambuf_iterator<char>(jinja), {}) : config["chat_template"].get<std::string>());
  return w.write(path);
}

// Texts the GGUF form cannot tokenize as tokenizer.json does: GGUF records no lstrip, rstrip or
// single_word flag on added tokens (llama.cpp matches every added token exactly), so a text holding
// an added token with one of them set differs around that token.
std::set<std::string> flagged_added_tokens(const std::string& fixture) {
  std::set<std::string> out;
  const auto root = test::read_json(test::tokenizer_fixture(fixture) / "tokenizer.json");
  for (const auto& added : root["added_tokens"]) {
    if (added.value("lstrip", false) || added.value("rstrip", false) || added.value("single_word", false)) {
      out.insert(added["content"].get<std::string>());
    }
  }
  return out;
}

class GgufReference : public ::testing::TestWithParam<std::string> {
 protected:
  void EncodeMatchesTokenizerJsonIds();
  void DecodeMatchesHf();
  void RoundTripsWhereHfDoes();
  void SpecialIdsVocabSizeAndChatTemplateCarryOver();
  void SetUp() override {
    const bool written = kRealVocabs.contains(GetParam());
    const auto path = written ? write_real_gguf(GetParam()) : gguf_fixture(GetParam());
    tokenizer_ = std::make_unique<Tokenizer>(load_gguf(path));
    if (written) std::filesystem::remove(path);
    cases_ = test::read_json(test::tokenizer_fixture(GetParam()) / "cases.json");
    flagged_ = flagged_added_tokens(GetParam());
  }
  bool reproducible(const std::string& text) const {
    for (const auto& token : flagged_) {
      if (text.find(token) != std::string::npos) return false;
    }
    return true;
  }
  std::unique_ptr<Tokenizer> tokenizer_;
  json cases_;
  std::set<std::string> flagged_;
};

void GgufReference::EncodeMatchesTokenizerJsonIds() {
  int compared = 0, not_reproducible = 0;
  for (const auto& c : cases_["cases"]) {
    const auto text = c["text"].get<std::string>();
    if (!reproducible(text)) {
      ++not_reproducible;
      continue;
    }
    ++compared;
    EXPECT_EQ(tokenizer_->encode(text, true), c["ids"].get<std::vector<int32_t>>()) << shown(text);
    EXPECT_EQ(tokenizer_->encode(text, false), c["ids_no_special"].get<std::vector<int32_t>>()) << shown(text);
  }
  EXPECT_GE(compared, 30);
  // Only synth_bytelevel has flagged added tokens (<mask> lstrip, [SEP] rstrip, hello_world
  // single_word), all in one text.
  EXPECT_EQ(not_reproducible, GetParam() == "synth_bytelevel" ? 1 : 0);
}

void GgufReference::DecodeMatchesHf() {
  for (const auto& c : cases_["cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer_->decode(ids, false), c["decoded"].get<std::string>()) << shown(c["text"]);
    EXPECT_EQ(tokenizer_->decode(ids, true), c["decoded_skip_special"].get<std::string>()) << shown(c["text"]);
    const auto raw = c["ids_no_special"].get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer_->decode(raw, false), c["decoded_no_special"].get<std::string>()) << shown(c["text"]);
  }
}

void GgufReference::RoundTripsWhereHfDoes() {
  int round_trips = 0;
  for (const auto& c : cases_["cases"]) {
    const auto text = c["text"].get<std::string>();
    if (c["decoded_no_special"].get<std::string>() != text || !reproducible(text)) continue;
    ++round_trips;
    EXPECT_EQ(tokenizer_->decode(tokenizer_->encode(text, false)), text) << shown(text);
  }
  EXPECT_GT(round_trips, 0);  // synth_bytelevel adds a prefix space, so few of its texts round-trip
}

void GgufReference::SpecialIdsVocabSizeAndChatTemplateCarryOver() {
  const auto hf = Tokenizer::load(test::tokenizer_fixture(GetParam()));
  EXPECT_EQ(tokenizer_->vocab_size(), cases_["vocab_size"].get<int32_t>());
  EXPECT_EQ(tokenizer_->bos_id(), hf.bos_id());
  EXPECT_EQ(tokenizer_->eos_ids(), hf.eos_ids());
  EXPECT_FALSE(tokenizer_->eos_ids().empty());
  EXPECT_EQ(tokenizer_->chat_template(), hf.chat_template());
  ASSERT_TRUE(tokenizer_->has_chat_template());
  for (const auto& chat : cases_["chats"]) {
    if (chat.contains("error")) continue;
    std::vector<ChatMessage> messages;
    for (const auto& m : chat["messages"]) messages.push_back({m["role"], m["content"]});
    EXPECT_EQ(tokenizer_->apply_chat_template(messages, chat["add_generation_prompt"].get<bool>()),
              chat["rendered"].get<std::string>());
  }
  for (int32_t id = 0; id < tokenizer_->vocab_size(); id += 97) {
    EXPECT_EQ(tokenizer_->is_special(id), hf.is_special(id)) << id;
    EXPECT_EQ(tokenizer_->id_to_token(id), hf.id_to_token(id)) << id;
  }
}

// One test per fixture, its checks in turn: building a real vocabulary's tokenizer (160K tokens and
// merges) is most of the time, and each test runs in its own process.
TEST_P(GgufReference, MatchesTokenizerJsonAndTransformers) {
  {
    SCOPED_TRACE("EncodeMatchesTokenizerJsonIds");
    EncodeMatchesTokenizerJsonIds();
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
    SCOPED_TRACE("SpecialIdsVocabSizeAndChatTemplateCarryOver");
    SpecialIdsVocabSizeAndChatTemplateCarryOver();
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufReference,
                         ::testing::Values("synth_bytelevel", "mistral", "qwen2", "deepseek_v3", "kimi_k2", "gpt_oss",
                                           "synth_o200k", "synth_glm4"),
                         [](const auto& info) { return info.param; });

TEST(GgufTokenizer, SentencePieceMergesAreTheConvertersMerges) {
  // The merges derived from the scores are the ones transformers wrote into Mixtral's tokenizer.json.
  const auto files = tokenizer_files_from_gguf(*GgufFile::open(gguf_fixture("mistral")));
  const auto derived = json::parse(files.tokenizer_json)["model"]["merges"];
  const auto reference = test::read_json(test::tokenizer_fixture("mistral") / "tokenizer.json")["model"]["merges"];
  ASSERT_EQ(derived.size(), reference.size());
  EXPECT_EQ(derived, reference);
}

// A minimal valid gpt2 vocabulary: a b ab <|end|>, one merge.
KvWriter tiny(const std::string& model = "gpt2") {
  KvWriter w;
  w.string("general.architecture", "olmoe");
  w.string("tokenizer.ggml.model", model);
  w.string("tokenizer.ggml.pre", "olmo");
  return w;
}

void tiny_vocab(KvWriter& w, std::vector<std::string> tokens = {"a", "b", "ab", "<|end|>"},
                std::vector<int32_t> types = {1, 1, 1, 3}) {
  w.strings("tokenizer.ggml.tokens", tokens);
  w.i32s("tokenizer.ggml.token_type", types);
  w.strings("tokenizer.ggml.merges", {"a b"});
}

TEST(GgufTokenizer, TinyVocabularyWorks) {
  auto w = tiny();
  tiny_vocab(w);
  w.u32("tokenizer.ggml.eos_token_id", 3);
  const auto path = w.write(temp_path("ok.gguf"));
  const auto tokenizer = load_gguf(path);
  std::filesystem::remove(path);
  EXPECT_EQ(tokenizer.encode("abba<|end|>", false), (std::vector<int32_t>{2, 1, 0, 3}));
  EXPECT_EQ(tokenizer.eos_ids(), std::vector<int32_t>{3});
  EXPECT_TRUE(tokenizer.is_special(3));
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{2, 3}, true), "ab");
}

// A GGUF file's named tool_use template (llama.cpp's converter writes tokenizer.chat_template.NAME)
// is chosen when tools are given, as transformers chooses it.
TEST(GgufTokenizer, ToolUseTemplateIsRead) {
  auto w = tiny();
  tiny_vocab(w);
  w.u32("tokenizer.ggml.eos_token_id", 3);
  w.string("tokenizer.chat_template", "{{ eos_token }} plain");
  w.string("tokenizer.chat_template.tool_use", "{{ tools|length }} tools");
  const auto path = w.write(temp_path("tool_use.gguf"));
  const auto tokenizer = load_gguf(path);
  std::filesystem::remove(path);
  ChatRequest request;
  request.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(tokenizer.apply_chat_template(request), "<|end|> plain");
  request.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}, {}])");
  EXPECT_EQ(tokenizer.apply_chat_template(request), "2 tools");
}

std::string gguf_error(KvWriter& w, const std::string& name) {
  const auto path = w.write(temp_path(name));
  auto message = error_of([&] { load_gguf(path); });
  std::filesystem::remove(path);
  const auto prefix = path.string() + ": ";
  EXPECT_TRUE(message.starts_with(prefix)) << message;
  return message.starts_with(prefix) ? message.substr(prefix.size()) : message;
}

TEST(GgufTokenizer, WrongModelNameIsRefusedByName) {
  auto w = tiny("bert");
  tiny_vocab(w);
  EXPECT_EQ(gguf_error(w, "bert.gguf"), "tokenizer.ggml.model 'bert' is not supported (gpt2 and llama are)");
  KvWriter none;
  none.string("general.architecture", "olmoe");
  EXPECT_EQ(gguf_error(none, "none.gguf"), "no tokenizer.ggml.model (the file carries no tokenizer)");
}

TEST(GgufTokenizer, UnknownPreTokenizerIsRefusedByName) {
  KvWriter w;
  w.string("tokenizer.ggml.model", "gpt2");
  w.string("tokenizer.ggml.pre", "jais");
  tiny_vocab(w);
  EXPECT_EQ(gguf_error(w, "pre.gguf"),
            "tokenizer.ggml.pre 'jais' is not supported (qwen2, deepseek-v3, kimi-k2, gpt-4o, minimax-m2, glm4, glm5, "
            "chatglm-bpe, olmo, gpt-2, llama-bpe, default are)");
}

TEST(GgufTokenizer, MismatchedArrayLengthsNameTheKey) {
  auto w = tiny();
  tiny_vocab(w, {"a", "b", "ab", "<|end|>"}, {1, 1, 1});
  EXPECT_EQ(gguf_error(w, "types.gguf"), "tokenizer.ggml.token_type has 3 values for 4 tokens");
  auto s = tiny("llama");
  tiny_vocab(s);
  s.f32s("tokenizer.ggml.scores", {0.0f, 0.0f});
  EXPECT_EQ(gguf_error(s, "scores.gguf"), "tokenizer.ggml.scores has 2 values for 4 tokens");
}

TEST(GgufTokenizer, TokenIdOutOfRangeNamesTheKey) {
  auto w = tiny();
  tiny_vocab(w);
  w.u32("tokenizer.ggml.bos_token_id", 4);
  EXPECT_EQ(gguf_error(w, "bos.gguf"), "tokenizer.ggml.bos_token_id 4 is outside the vocabulary (4 tokens)");
  auto e = tiny();
  tiny_vocab(e);
  e.i32("tokenizer.ggml.eos_token_id", -1);
  EXPECT_EQ(gguf_error(e, "eos.gguf"), "tokenizer.ggml.eos_token_id -1 is outside the vocabulary (4 tokens)");
}

TEST(GgufTokenizer, OtherBadValuesNameTheKey) {
  auto missing = tiny();
  EXPECT_EQ(gguf_error(missing, "missing.gguf"), "tokenizer.ggml.tokens is missing or empty");

  auto type = tiny();
  tiny_vocab(type, {"a", "b", "ab", "<|end|>"}, {1, 1, 7, 3});
  EXPECT_EQ(gguf_error(type, "type.gguf"), "tokenizer.ggml.token_type[2] is 7 (1 normal .. 6 byte)");

  auto merge = tiny();
  merge.strings("tokenizer.ggml.tokens", {"a", "b"});
  merge.strings("tokenizer.ggml.merges", {"a b"});
  EXPECT_EQ(gguf_error(merge, "merge.gguf"), "tokenizer.ggml.merges[0] 'a b': 'ab' is not a token");

  auto duplicate = tiny();
  tiny_vocab(duplicate, {"a", "b", "ab", "a"}, {1, 1, 1, 1});
  EXPECT_EQ(gguf_error(duplicate, "duplicate.gguf"), "tokenizer.ggml.tokens[3] 'a' repeats token 0");

  auto no_merges = tiny();
  no_merges.strings("tokenizer.ggml.tokens", {"a"});
  EXPECT_EQ(gguf_error(no_merges, "no_merges.gguf"),
            "tokenizer.ggml.merges is missing (a gpt2 tokenizer needs its merges)");

  auto bos = tiny();
  tiny_vocab(bos);
  bos.boolean("tokenizer.ggml.add_bos_token", true);
  EXPECT_EQ(gguf_error(bos, "add_bos.gguf"),
            "tokenizer.ggml.add_bos_token is true but there is no tokenizer.ggml.bos_token_id");

  auto wrong_type = tiny();
  tiny_vocab(wrong_type);
  wrong_type.string("tokenizer.ggml.bos_token_id", "1");
  const auto path = wrong_type.write(temp_path("wrong_type.gguf"));
  const auto message = error_of([&] { load_gguf(path); });
  std::filesystem::remove(path);
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("tokenizer.ggml.bos_token_id"), std::string::npos) << message;
}

}  // namespace
}  // namespace chronos
