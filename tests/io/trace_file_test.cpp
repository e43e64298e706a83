// Routing-trace files: round trip, the documented byte layout, and rejection of damaged files.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <functional>

#include "chronos/dtype.h"
#include "chronos/error.h"
#include "chronos/trace_file.h"
#include "io/io_test_util.h"

namespace chronos {
namespace {

namespace fs = std::filesystem;

TraceHeader small_header() {
  TraceHeader h;
  h.fingerprint = "0123456789abcdef0123456789abcdef";
  h.n_embd = 6;
  h.n_expert = 5;
  h.n_expert_used = 2;
  h.moe_layers = {0, 2, 3};
  return h;
}

// A deterministic token: distinct ids per layer, a proper distribution of probabilities.
TraceToken make_token(const TraceHeader& h, int32_t seed, bool generated) {
  TraceToken t;
  t.generated = generated;
  t.token_id = 100 + seed;
  for (int i = 0; i < h.n_embd; ++i) t.h0.push_back(f32_to_f16(float(seed) * 0.25f - float(i)));
  for (int64_t l = 0; l < h.n_moe_layers(); ++l) {
    for (int64_t k = 0; k < h.n_expert_used; ++k) t.top_ids.push_back(int32_t((seed + l + k) % h.n_expert));
    for (int64_t e = 0; e < h.n_expert; ++e) t.probs.push_back(f32_to_f16(float((e + seed) % h.n_expert + 1) / 15.0f));
  }
  return t;
}

std::vector<TraceSequence> make_sequences(const TraceHeader& h) {
  std::vector<TraceSequence> out(3);
  out[0].prompt_id = "p-0";
  out[0].domain = "code";
  for (int i = 0; i < 4; ++i) out[0].tokens.push_back(make_token(h, i, i >= 2));
  out[1].prompt_id = "p-empty";  // a sequence with no tokens is legal
  out[2].prompt_id = "p-2 \xc3\xa9";
  out[2].domain = "chat";
  for (int i = 0; i < 7; ++i) out[2].tokens.push_back(make_token(h, 10 + i, i >= 3));
  return out;
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

void expect_equal(const TraceSequence& a, const TraceSequence& b) {
  EXPECT_EQ(a.prompt_id, b.prompt_id);
  EXPECT_EQ(a.domain, b.domain);
  ASSERT_EQ(a.tokens.size(), b.tokens.size());
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    EXPECT_EQ(a.tokens[i].generated, b.tokens[i].generated);
    EXPECT_EQ(a.tokens[i].token_id, b.tokens[i].token_id);
    EXPECT_EQ(a.tokens[i].h0, b.tokens[i].h0);
    EXPECT_EQ(a.tokens[i].top_ids, b.tokens[i].top_ids);
    EXPECT_EQ(a.tokens[i].probs, b.tokens[i].probs);
  }
}

class TraceFileTest : public test::ScratchDir {
 protected:
  fs::path write_trace() {
    const fs::path path = dir_ / "chunk.trace";
    TraceWriter writer(path, small_header());
    for (const auto& sequence : make_sequences(small_header())) writer.add(sequence);
    writer.finish();
    return path;
  }
  // The fixed part of the header of small_header(): magic, version, fingerprint, sizes, layers.
  static int64_t header_bytes() { return 8 + 4 + 4 + 32 + 4 * 4 + 3 * 4; }
};

TEST_F(TraceFileTest, RoundTrip) {
  const fs::path path = write_trace();
  EXPECT_EQ(test::count_temporaries(dir_), 0);
  const TraceReader reader = TraceReader::open(path);
  const TraceHeader expected = small_header();
  EXPECT_EQ(reader.header().fingerprint, expected.fingerprint);
  EXPECT_EQ(reader.header().n_embd, 6);
  EXPECT_EQ(reader.header().n_expert, 5);
  EXPECT_EQ(reader.header().n_expert_used, 2);
  EXPECT_EQ(reader.header().moe_layers, expected.moe_layers);
  EXPECT_EQ(reader.n_sequences(), 3);
  EXPECT_EQ(reader.n_tokens(), 11);
  const auto sequences = reader.read_all();
  const auto original = make_sequences(expected);
  ASSERT_EQ(sequences.size(), original.size());
  for (size_t i = 0; i < original.size(); ++i) {
    SCOPED_TRACE(i);
    expect_equal(sequences[i], original[i]);
    expect_equal(reader.read_sequence(int64_t(i)), original[i]);
  }
}

// The layout of docs/formats.md, checked byte by byte on a hand-computed example.
TEST_F(TraceFileTest, LayoutMatchesTheDocumentation) {
  const fs::path path = write_trace();
  const std::string raw = test::read_bytes(path);
  const auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, raw.data() + at, 4);
    return v;
  };
  const auto u64 = [&](size_t at) {
    uint64_t v;
    std::memcpy(&v, raw.data() + at, 8);
    return v;
  };
  EXPECT_EQ(raw.substr(0, 8), "CHRTRACE");
  EXPECT_EQ(u32(8), 1u);
  EXPECT_EQ(u32(12), 32u);
  EXPECT_EQ(raw.substr(16, 32), small_header().fingerprint);
  EXPECT_EQ(u32(48), 6u);  // n_embd
  EXPECT_EQ(u32(52), 5u);  // n_expert
  EXPECT_EQ(u32(56), 2u);  // n_expert_used
  EXPECT_EQ(u32(60), 3u);  // MoE layers
  EXPECT_EQ(u32(64), 0u);
  EXPECT_EQ(u32(68), 2u);
  EXPECT_EQ(u32(72), 3u);
  size_t at = size_t(header_bytes());
  ASSERT_EQ(at, 76u);
  // Token record: flags, id, 6 f16, 3*2 i32, 3*5 f16 = 8 + 12 + 24 + 30 = 74 bytes.
  EXPECT_EQ(small_header().token_record_bytes(), 74);
  EXPECT_EQ(raw.substr(at, 4), "CSEQ");
  EXPECT_EQ(u32(at + 4), 3u);
  EXPECT_EQ(raw.substr(at + 8, 3), "p-0");
  EXPECT_EQ(u32(at + 11), 4u);
  EXPECT_EQ(raw.substr(at + 15, 4), "code");
  EXPECT_EQ(u64(at + 19), 4u);
  const size_t token0 = at + 27;
  EXPECT_EQ(u32(token0), 0u);           // prompt token
  EXPECT_EQ(u32(token0 + 4), 100u);     // token id
  EXPECT_EQ(u32(token0 + 74 * 2), 1u);  // third token is generated
  const TraceToken expected = make_token(small_header(), 0, false);
  uint16_t h0_first;
  std::memcpy(&h0_first, raw.data() + token0 + 8, 2);
  EXPECT_EQ(h0_first, expected.h0[0]);
  EXPECT_EQ(u32(token0 + 8 + 12), uint32_t(expected.top_ids[0]));
  uint16_t prob_first;
  std::memcpy(&prob_first, raw.data() + token0 + 8 + 12 + 24, 2);
  EXPECT_EQ(prob_first, expected.probs[0]);
  // The end record: tag, counts, then the XXH64 of everything before the checksum.
  const size_t end = raw.size() - 28;
  EXPECT_EQ(raw.substr(end, 4), "CEND");
  EXPECT_EQ(u64(end + 4), 3u);
  EXPECT_EQ(u64(end + 12), 11u);
  EXPECT_EQ(u64(end + 20), XXH64(raw.data(), raw.size() - 8, 0));
  // Sizes add up: header, three sequence records, end record.
  const size_t seq_bytes =
      (4 + 4 + 3 + 4 + 4 + 8 + 4 * 74) + (4 + 4 + 7 + 4 + 0 + 8) + (4 + 4 + 6 + 4 + 4 + 8 + 7 * 74);
  EXPECT_EQ(raw.size(), size_t(header_bytes()) + seq_bytes + 28);
}

TEST_F(TraceFileTest, WriterWithoutFinishLeavesNothing) {
  const fs::path path = dir_ / "abandoned.trace";
  {
    TraceWriter writer(path, small_header());
    writer.add(make_sequences(small_header())[0]);
    EXPECT_EQ(test::count_temporaries(dir_), 1);
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(test::count_temporaries(dir_), 0);
}

TEST_F(TraceFileTest, WriterRejectsTokensThatDoNotFitTheHeader) {
  const fs::path path = dir_ / "bad.trace";
  TraceWriter writer(path, small_header());
  TraceSequence sequence;
  sequence.prompt_id = "x";
  sequence.tokens.push_back(make_token(small_header(), 0, false));
  sequence.tokens[0].h0.pop_back();
  expect_error([&] { writer.add(sequence); }, {"bad.trace", "sequence 0", "token 0", "h0"});
  sequence.tokens[0] = make_token(small_header(), 0, false);
  sequence.tokens[0].top_ids[3] = 5;
  expect_error([&] { writer.add(sequence); }, {"bad.trace", "model layer 2", "expert id 5 out of range"});
  sequence.tokens[0] = make_token(small_header(), 0, false);
  sequence.tokens[0].top_ids[1] = sequence.tokens[0].top_ids[0];
  expect_error([&] { writer.add(sequence); }, {"bad.trace", "selected twice"});
  TraceHeader bad = small_header();
  bad.n_expert_used = 6;
  expect_error([&] { TraceWriter(dir_ / "h.trace", bad); }, {"h.trace", "n_expert_used 6"});
  bad = small_header();
  bad.moe_layers = {0, 3, 2};
  expect_error([&] { TraceWriter(dir_ / "h.trace", bad); }, {"h.trace", "increasing"});
}

TEST_F(TraceFileTest, TruncatedFileIsRejectedAtEveryLength) {
  const fs::path path = write_trace();
  const std::string raw = test::read_bytes(path);
  const fs::path cut = dir_ / "cut.trace";
  // A prefix is an error naming the file and an offset, never a crash or a silent success.
  // Every length through the header and the end record; a sample in between.
  for (size_t length = 0; length < raw.size(); ++length) {
    if (length > 120 && length + 60 < raw.size() && length % 7 != 0) continue;
    SCOPED_TRACE(length);
    test::write_bytes(cut, raw.substr(0, length));
    expect_error([&] { TraceReader::open(cut).read_all(); }, {"cut.trace", "offset"});
  }
}

TEST_F(TraceFileTest, BadMagicWrongVersionAndDamagedBytes) {
  const fs::path path = write_trace();
  const std::string raw = test::read_bytes(path);
  const fs::path bad = dir_ / "bad.trace";
  const auto with = [&](size_t at, std::string_view bytes) {
    std::string copy = raw;
    copy.replace(at, bytes.size(), bytes);
    test::write_bytes(bad, copy);
  };
  with(0, "CHRTRACX");
  expect_error([&] { TraceReader::open(bad); }, {"bad.trace", "offset 0", "bad magic"});
  with(8, std::string("\x02\0\0\0", 4));
  expect_error([&] { TraceReader::open(bad); }, {"bad.trace", "offset 8", "version 2"});
  with(48, std::string("\0\0\0\0", 4));
  expect_error([&] { TraceReader::open(bad); }, {"bad.trace", "n_embd 0"});
  with(76, "XSEQ");
  expect_error([&] { TraceReader::open(bad); }, {"bad.trace", "offset 76", "CSEQ"});
  // A flipped h0 byte passes the structure check and is caught by the checksum.
  const size_t token0 = 76 + 27;
  with(token0 + 9, "\x7f");
  EXPECT_NO_THROW(TraceReader::open(bad));
  expect_error([&] { TraceReader::open(bad).read_all(); }, {"bad.trace", "checksum mismatch"});
  // A bad field is named with its offset even where the checksum is not consulted.
  with(token0, std::string("\x04\0\0\0", 4));
  expect_error([&] { TraceReader::open(bad).read_sequence(0); },
               {"bad.trace", fmt::format("offset {}", token0), "flags"});
  with(token0 + 8 + 12, std::string("\x09\0\0\0", 4));
  expect_error([&] { TraceReader::open(bad).read_sequence(0); }, {"bad.trace", "expert id 9 out of range"});
  with(token0 + 8 + 12 + 24, std::string("\x00\x7e", 2));  // NaN probability
  expect_error([&] { TraceReader::open(bad).read_sequence(0); }, {"bad.trace", "probability 0"});
  // Trailing garbage and a miscounted end record.
  test::write_bytes(bad, raw + "x");
  expect_error([&] { TraceReader::open(bad); }, {"bad.trace", "trailing"});
  with(raw.size() - 28 + 4, std::string("\x04\0\0\0\0\0\0\0", 8));
  expect_error([&] { TraceReader::open(bad); }, {"bad.trace", "4 sequences"});
}

}  // namespace
}  // namespace chronos
