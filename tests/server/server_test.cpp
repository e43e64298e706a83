// chronos serve's HTTP front in process, driven by an HTTP client: concurrent requests get what each
// gets alone, streamed or whole; a full server answers 503, bad requests 4xx with an error object, a
// client that leaves frees its slot, the API key is checked, /metrics is Prometheus text, a repeated
// prompt reuses its KV. Every wait has a deadline (the client's timeouts).
#include "server/server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "chronos/batch_generate.h"
#include "chronos/error.h"
#include "chronos/generate.h"
#include "chronos/model.h"
#include "chronos/model_runner.h"
#include "chronos/thread_pool.h"
#include "chronos/tokenizer.h"

namespace chronos::server {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

fs::path fixture(const std::string& name) { return fs::path(CHRONOS_TEST_DATA_DIR) / "models" / name; }

// Text as it comes back through JSON: invalid UTF-8 replaced as the server writes it.
std::string through_json(const std::string& text) {
  return Json::parse(Json(text).dump(-1, ' ', false, Json::error_handler_t::replace)).get<std::string>();
}

// Holds the engine at the start of each forward until the test lets a number of steps through, so
// what a client sees between steps does not depend on how fast the fixture runs. Open by default;
// a step waits at most 30 s (a test that forgets to open it fails instead of hanging).
class StepGate {
 public:
  void pass() {
    std::unique_lock lock(m_);
    if (fail_) throw Error("the test failed this step");
    cv_.wait_for(lock, std::chrono::seconds(30), [&] { return permits_ > 0; });
    if (permits_ > 0) --permits_;
  }
  void fail() {
    std::lock_guard lock(m_);
    fail_ = true;
  }
  void allow(int64_t steps) {
    std::lock_guard lock(m_);
    permits_ = steps;
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int64_t permits_ = int64_t(1) << 40;
  bool fail_ = false;
};

// A model, its generator and a server on a free loopback port.
class Serve : public ::testing::Test {
 protected:
  void start(int64_t n_seq, int64_t max_queue, const std::string& api_key = {}, const std::string& chat_template = {},
             int64_t n_ctx = 128) {
    n_ctx_ = n_ctx;
    dir_ = fixture("mixtral-f32");
    model_ = Model::load(dir_);
    tokenizer_.emplace(Tokenizer::load(dir_));
    ForwardHooks hooks;
    hooks.block = [this](int64_t, std::span<const float>, std::span<const int32_t>) { gate_.pass(); };
    hooks.block_last_layer = 0;
    generator_ = std::make_unique<BatchGenerator>(*model_, *tokenizer_,
                                                  make_cpu_runner(*model_, pool_, n_ctx_, 8, hooks, n_seq), n_seq, 8);
    generator_->reuse_prefixes(true);
    ServerOptions options;
    options.port = 0;
    options.api_key = api_key;
    options.model_id = "fixture";
    options.n_seq = n_seq;
    options.max_queue = max_queue;
    options.max_body_bytes = 64 << 10;
    options.defaults.max_new_tokens = 16;
    options.defaults.eos_ids = model_->config().eos_token_ids;
    options.defaults.ignore_eos = true;
    options.chat_template = chat_template;
    server_ = std::make_unique<Server>(*model_, *tokenizer_, *generator_, nullptr, options);
    port_ = server_->start();
  }
  void TearDown() override {
    gate_.allow(int64_t(1) << 40);
    if (server_) server_->stop();
  }

  std::unique_ptr<httplib::Client> client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
    c->set_read_timeout(60, 0);
    c->set_connection_timeout(10, 0);
    return c;
  }
  Json post(const std::string& path, const Json& body, int expected_status = 200) const {
    const httplib::Result res = client()->Post(path, body.dump(), "application/json");
    EXPECT_TRUE(res) << "no answer to " << path;
    if (!res) return {};
    EXPECT_EQ(res->status, expected_status) << res->body;
    return Json::parse(res->body);
  }

  // What Generator::generate gives `prompt` alone, as the server's text.
  std::string alone(const std::vector<int32_t>& prompt, int64_t max_tokens) {
    Generator generator(*model_, *tokenizer_, pool_, n_ctx_, 8);
    GenerateOptions options;
    options.max_new_tokens = max_tokens;
    options.ignore_eos = true;
    std::string text;
    generator.generate(prompt, options, [&](std::string_view piece) {
      text += piece;
      return true;
    });
    return through_json(text);
  }

  int64_t n_ctx_ = 128;
  fs::path dir_;
  ThreadPool pool_{2};
  std::unique_ptr<Model> model_;
  std::optional<Tokenizer> tokenizer_;
  std::unique_ptr<BatchGenerator> generator_;
  std::unique_ptr<Server> server_;
  int port_ = 0;
  StepGate gate_;
};

// The data lines of a server-sent event stream, [DONE] last.
std::vector<std::string> events(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < body.size()) {
    size_t end = body.find("\n\n", at);
    if (end == std::string::npos) end = body.size();
    const std::string event = body.substr(at, end - at);
    if (event.starts_with("data: ")) out.push_back(event.substr(6));
    at = end + 2;
  }
  return out;
}

// Whether `line` is a line of Prometheus' text format: `# HELP name text`, `# TYPE name kind`, or
// `name{label="value",...} number`.
bool prometheus_line(std::string_view line) {
  const auto name_end = [&](size_t i, bool colon) {
    const auto first = [&](char c) { return std::isalpha(uint8_t(c)) || c == '_' || (colon && c == ':'); };
    if (i >= line.size() || !first(line[i])) return std::string_view::npos;
    while (i < line.size() && (first(line[i]) || std::isdigit(uint8_t(line[i])))) ++i;
    return i;
  };
  if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) {
    const size_t end = name_end(7, true);
    return end != std::string_view::npos && end + 1 < line.size() && line[end] == ' ';
  }
  size_t i = name_end(0, true);
  if (i == std::string_view::npos) return false;
  if (i < line.size() && line[i] == '{') {
    do {
      i = name_end(i + 1, false);
      if (i == std::string_view::npos || line.substr(i, 2) != "=\"") return false;
      const size_t close = line.find('"', i + 2);
      if (close == std::string_view::npos) return false;
      i = close + 1;
    } while (i < line.size() && line[i] == ',');
    if (i >= line.size() || line[i++] != '}') return false;
  }
  if (i >= line.size() || line[i++] != ' ') return false;
  const std::string number(line.substr(i));
  char* end = nullptr;
  std::strtod(number.c_str(), &end);
  return !number.empty() && end == number.c_str() + number.size();
}

// The samples of a Prometheus text, by name and labels.
std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] != '#')
      out[line.substr(0, line.rfind(' '))] = std::stod(line.substr(line.rfind(' ') + 1));
  return out;
}

TEST_F(Serve, ConcurrentRequestsGetWhatEachGetsAloneStreamedOrWhole) {
  start(4, 8);
  const std::vector<std::string> prompts = {"The river keeps its own time, and the",
                                            "Once upon a time",
                                            "In the beginning the mill",
                                            "A",
                                            "The old mill stood by the water and the wheel turned slowly",
                                            "Tell me",
                                            "The river",
                                            "Water and stone"};
  struct Reply {
    std::string text;
    std::string finish;
    int64_t completion_tokens = -1;
  };
  std::vector<Reply> replies(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] {
      const bool stream = i % 2 == 1;
      Json body = {{"model", "fixture"}, {"prompt", prompts[i]}, {"max_tokens", 6 + int(i) % 5}, {"temperature", 0}};
      if (!stream) {
        const Json r = post("/v1/completions", body);
        if (!r.contains("choices")) return;
        replies[i] = {r["choices"][0]["text"], r["choices"][0]["finish_reason"], r["usage"]["completion_tokens"]};
        return;
      }
      body["stream"] = true;
      body["stream_options"] = {{"include_usage", true}};
      const httplib::Result res = client()->Post("/v1/completions", body.dump(), "application/json");
      ASSERT_TRUE(res);
      EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
      const std::vector<std::string> data = events(res->body);
      ASSERT_GE(data.size(), 3u) << res->body;
      EXPECT_EQ(data.back(), "[DONE]");
      for (size_t k = 0; k + 1 < data.size(); ++k) {
        const Json chunk = Json::parse(data[k]);
        if (chunk.contains("usage")) {
          replies[i].completion_tokens = chunk["usage"]["completion_tokens"];
          continue;
        }
        EXPECT_EQ(chunk["object"], "text_completion");
        replies[i].text += chunk["choices"][0]["text"].get<std::string>();
        if (!chunk["choices"][0]["finish_reason"].is_null()) replies[i].finish = chunk["choices"][0]["finish_reason"];
      }
    });
  }
  for (auto& c : clients) c.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t max_tokens = 6 + int64_t(i) % 5;
    EXPECT_EQ(replies[i].text, alone(tokenizer_->encode(prompts[i], true), max_tokens)) << "request " << i;
    EXPECT_EQ(replies[i].finish, "length") << "request " << i;
    EXPECT_EQ(replies[i].completion_tokens, max_tokens) << "request " << i;
  }
  // A chat request through the model's template, streamed: the deltas are the reply alone.
  const Json chat = {{"messages", {{{"role", "user"}, {"content", "Tell me about the old mill."}}}},
                     {"max_tokens", 8},
                     {"stream", true}};
  const httplib::Result res = client()->Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(res);
  std::string content;
  const std::vector<std::string> data = events(res->body);
  ASSERT_GE(data.size(), 3u);
  EXPECT_EQ(Json::parse(data[0])["choices"][0]["delta"]["role"], "assistant");
  for (size_t k = 0; k + 1 < data.size(); ++k)
    content += Json::parse(data[k])["choices"][0]["delta"].value("content", "");
  ChatRequest request;
  request.messages = chat["messages"];
  EXPECT_EQ(content, alone(tokenizer_->encode(tokenizer_->apply_chat_template(request), false), 8));
}

TEST_F(Serve, AFullServerAnswers503AndALeavingClientFreesItsSlot) {
  start(1, 0);
  // A long streamed request holds the one slot (three steps go through: its prefill and two
  // tokens); its client reads them, then goes away.
  gate_.allow(3);
  std::atomic<int> events_read{0};
  std::atomic<bool> holding{true};
  std::thread holder([&] {
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = Json({{"prompt", "The river"}, {"max_tokens", 100}, {"stream", true}}).dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      ++events_read;
      return holding.load();
    };
    httplib::Response res;
    httplib::Error error = httplib::Error::Success;
    client()->send(req, res, error);
  });
  for (int i = 0; i < 3000 && events_read < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GE(events_read, 2) << "the streamed request never started";
  const httplib::Result busy =
      client()->Post("/v1/completions", R"({"prompt": "A", "max_tokens": 2})", "application/json");
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->status, 503);
  EXPECT_EQ(busy->get_header_value("Retry-After"), "1");
  EXPECT_EQ(Json::parse(busy->body)["error"]["code"], "server_busy");
  holding = false;  // the client stops reading and closes the connection
  gate_.allow(1);   // a token the client is no longer there to read
  holder.join();
  // One step every 5 ms: the server notices the closed connection at its next write or keep-alive
  // and the sequence ends at the step after.
  for (int i = 0; i < 90; ++i) {
    gate_.allow(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  gate_.allow(int64_t(1) << 40);
  // Its sequence ends within a few steps: a request is then served (the one slot is free again).
  Json after;
  for (int i = 0; i < 200; ++i) {
    const httplib::Result res =
        client()->Post("/v1/completions", R"({"prompt": "A", "max_tokens": 2})", "application/json");
    ASSERT_TRUE(res);
    if (res->status == 200) {
      after = Json::parse(res->body);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(after.is_null()) << "the slot of the client that left was never freed";
  EXPECT_EQ(after["usage"]["completion_tokens"], 2);
  const std::map<std::string, double> metrics = samples(client()->Get("/metrics")->body);
  ASSERT_TRUE(metrics.contains("chronos_generated_tokens_total"));
  EXPECT_LT(metrics.at("chronos_generated_tokens_total"), 60) << "the request that lost its client ran on";
}

TEST_F(Serve, BadRequestsGetAnErrorObject) {
  start(2, 2);
  struct Case {
    const char* path;
    std::string body;
    int status;
    const char* param;
  };
  const std::vector<Case> cases = {
      {"/v1/completions", "{not json", 400, nullptr},
      {"/v1/completions", "[1, 2]", 400, nullptr},
      {"/v1/completions", R"({"max_tokens": 4})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": 7})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": "A", "max_tokens": "many"})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "A", "max_tokens": -1})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "A", "max_tokens": 1000})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "A", "temperature": -1})", 400, "temperature"},
      {"/v1/completions", R"({"prompt": "A", "top_p": 2})", 400, "top_p"},
      {"/v1/completions", R"({"prompt": "A", "n": 2})", 400, "n"},
      {"/v1/completions", R"({"prompt": "A", "stop": [1]})", 400, "stop"},
      {"/v1/completions", R"({"prompt": "A", "stream": "yes"})", 400, "stream"},
      {"/v1/completions", R"({"prompt": "A", "logprobs": 5})", 400, "logprobs"},
      {"/v1/completions", R"({"prompt": [99999999]})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": ""})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": "A", "model": "gpt-4"})", 404, "model"},
      {"/v1/chat/completions", R"({"messages": []})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages": [{"content": "hi"}]})", 400, "messages[0].role"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": 5}]})", 400, "messages[0].content"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "tools": {}})", 400, "tools"},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}})", 400,
       "response_format"},
      {"/v1/completions", std::string(70 << 10, ' '), 413, nullptr},
      {"/v1/nothing", "{}", 404, nullptr},
  };
  // The prompt that fills the context.
  std::string long_prompt;
  for (int i = 0; i < 200; ++i) long_prompt += " mill";
  const Json too_long = {{"prompt", long_prompt}};
  std::vector<Case> all = cases;
  all.push_back({"/v1/completions", too_long.dump(), 400, "prompt"});
  for (const Case& c : all) {
    const httplib::Result res = client()->Post(c.path, c.body, "application/json");
    ASSERT_TRUE(res) << c.body.substr(0, 80);
    EXPECT_EQ(res->status, c.status) << c.body.substr(0, 80) << " -> " << res->body;
    const Json error = Json::parse(res->body, nullptr, false);
    ASSERT_TRUE(error.is_object() && error.contains("error")) << res->body;
    EXPECT_TRUE(error["error"]["message"].is_string() && !error["error"]["message"].get<std::string>().empty());
    EXPECT_TRUE(error["error"]["type"].is_string());
    if (c.param) {
      EXPECT_EQ(error["error"]["param"], c.param) << c.body.substr(0, 80);
    }
  }
  // The server still serves.
  EXPECT_EQ(post("/v1/completions", {{"prompt", "A"}, {"max_tokens", 3}})["usage"]["completion_tokens"], 3);
}

TEST_F(Serve, AnEngineThatFailsAnswers500AndHealthSaysSo) {
  start(2, 2);
  EXPECT_EQ(post("/v1/completions", {{"prompt", "A"}, {"max_tokens", 2}})["usage"]["completion_tokens"], 2);
  gate_.fail();
  for (int i = 0; i < 2; ++i) {  // the request in flight, then one after
    const Json r = post("/v1/completions", {{"prompt", "The river"}, {"max_tokens", 2}}, 500);
    EXPECT_EQ(r["error"]["code"], "engine_stopped") << r;
    EXPECT_NE(r["error"]["message"].get<std::string>().find("the test failed this step"), std::string::npos) << r;
  }
  const httplib::Result health = client()->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  EXPECT_EQ(Json::parse(health->body)["status"], "error");
}

TEST_F(Serve, AnApiKeyIsRequiredWhenSet) {
  start(1, 1, "s3cret");
  auto c = client();
  EXPECT_EQ(c->Get("/health")->status, 200) << "health stays open for load balancers";
  const httplib::Result none = c->Get("/v1/models");
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(Json::parse(none->body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(
      c->Post("/v1/completions", {{"Authorization", "Bearer s3cre"}}, R"({"prompt": "A"})", "application/json")->status,
      401);
  EXPECT_EQ(c->Post("/v1/completions", {{"Authorization", "Bearer s3cret!"}}, R"({"prompt": "A"})", "application/json")
                ->status,
            401);
  c->set_bearer_token_auth("s3cret");
  const Json models = Json::parse(c->Get("/v1/models")->body);
  EXPECT_EQ(models["data"][0]["id"], "fixture");
  EXPECT_EQ(c->Post("/v1/completions", R"({"prompt": "A", "max_tokens": 2})", "application/json")->status, 200);
}

TEST_F(Serve, MetricsArePrometheusTextAndCountWhatRan) {
  start(2, 2);
  post("/v1/completions", {{"prompt", "The river"}, {"max_tokens", 5}});
  post("/v1/completions", {{"prompt", 3}}, 400);
  const httplib::Result res = client()->Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  std::istringstream lines(res->body);
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n) EXPECT_TRUE(prometheus_line(line)) << line;
  EXPECT_GT(n, 20);
  std::map<std::string, double> values = samples(res->body);
  EXPECT_EQ(values["chronos_requests_total{endpoint=\"completions\",status=\"200\"}"], 1);
  EXPECT_EQ(values["chronos_requests_total{endpoint=\"completions\",status=\"400\"}"], 1);
  EXPECT_EQ(values["chronos_generated_tokens_total"], 5);
  EXPECT_EQ(values["chronos_requests_running"], 0);
  EXPECT_GT(values["chronos_steps_total"], 4);
}

TEST_F(Serve, ARepeatedPromptReusesItsKv) {
  start(2, 2);
  const Json body = {{"prompt", "The old mill stood by the water"}, {"max_tokens", 6}};
  const Json first = post("/v1/completions", body);
  const Json second = post("/v1/completions", body);
  const int64_t n = first["usage"]["prompt_tokens"];
  EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], n - 1);
  EXPECT_EQ(second["choices"][0]["text"], first["choices"][0]["text"]);
}

TEST_F(Serve, ToolsReachTheTemplate) {
  std::ifstream in(fs::path(CHRONOS_TEST_DATA_DIR) / "chat_templates" / "qwen3.jinja");
  const std::string qwen3((std::istreambuf_iterator<char>(in)), {});
  ASSERT_FALSE(qwen3.empty());
  start(1, 1, {}, qwen3, 1024);
  const Json messages = {{{"role", "user"}, {"content", "Weather in Paris?"}}};
  const Json tools = {{{"type", "function"},
                       {"function",
                        {{"name", "get_weather"},
                         {"description", "The weather in a city"},
                         {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}};
  const Json plain = post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 1}});
  const Json with_tools = post("/v1/chat/completions", {{"messages", messages}, {"tools", tools}, {"max_tokens", 1}});
  const Json none = post("/v1/chat/completions",
                         {{"messages", messages}, {"tools", tools}, {"tool_choice", "none"}, {"max_tokens", 1}});
  ChatRequest request;
  request.messages = messages;
  request.tools = tools;
  const int64_t rendered = std::ssize(tokenizer_->encode(tokenizer_->apply_chat_template(request, qwen3), false));
  EXPECT_EQ(with_tools["usage"]["prompt_tokens"], rendered);
  EXPECT_GT(rendered, plain["usage"]["prompt_tokens"].get<int64_t>());
  EXPECT_EQ(none["usage"]["prompt_tokens"], plain["usage"]["prompt_tokens"]);
}

}  // namespace
}  // namespace chronos::server
