// chronos serve's HTTP front and its engine thread (server.h). The HTTP threads parse, render and
// tokenize a request, put it in the queue and then wait on its job; the engine thread runs the one
// BatchGenerator over the queue and hands each job its text as it comes.
#include "server/server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "chronos/batch_generate.h"
#include "chronos/error.h"
#include "chronos/expert_streamer.h"
#include "chronos/model.h"
#include "chronos/reasoning.h"
#include "chronos/sampler.h"
#include "chronos/tokenizer.h"
#include "server/metrics.h"
#include "server/openai.h"

namespace chronos::server {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

// How often a streaming response with nothing to say writes an SSE comment: a client that went away
// is noticed by the failed write within about this long, even during a long prefill or in the queue.
constexpr auto kKeepAlive = std::chrono::milliseconds(1000);

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_id(std::string_view prefix) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:012x}{:04x}", prefix, rng() & 0xffffffffffffULL, counter++ & 0xffff);
}

// One request from its parse to its last byte. The engine thread appends text and sets done; the
// request's HTTP thread takes the text; either may cancel it.
struct Job {
  size_t id = 0;
  Endpoint endpoint = Endpoint::kChat;
  bool stream = false, include_usage = false, tools = false;
  bool harmony = false;  // gpt-oss: tool calls are harmony messages to functions.NAME
  BatchRequest request;
  std::unique_ptr<ReplySplitter> splitter;  // a chat reply's reasoning apart from its answer
  std::string completion_id;
  int64_t created = 0;

  std::mutex m;
  std::condition_variable cv;
  std::string text;  // generated and not yet taken
  bool done = false;
  bool refused = false;  // never ran: the server stopped first
  GenerateStats stats;
  std::atomic<bool> cancelled{false};
  // The steps it was live in (engine thread only until done): their count, wall time, and the expert
  // reads and stalls of those steps (shared with every sequence of the step).
  int64_t steps = 0;
  double step_seconds = 0.0, stall_seconds = 0.0;
  int64_t bytes_read = 0, expert_lookups = 0, expert_hits = 0;
};

// The requests waiting for a KV slot and those holding one, shared by the HTTP threads (push) and
// the engine thread (the rest) under one lock.
class JobQueue final : public RequestSource {
 public:
  JobQueue(int64_t n_seq, int64_t max_queue) : capacity_(n_seq + max_queue) {}

  // False when the server is full (n_seq running and max_queue waiting) or stopping.
  bool push(std::shared_ptr<Job> job) {
    std::lock_guard lock(m_);
    if (closed_ || std::ssize(waiting_) + std::ssize(live_) >= capacity_) return false;
    waiting_.push_back(std::move(job));
    cv_.notify_one();
    return true;
  }
  std::optional<Next> next() override {
    std::lock_guard lock(m_);
    while (!waiting_.empty()) {
      std::shared_ptr<Job> job = std::move(waiting_.front());
      waiting_.pop_front();
      if (job->cancelled) {  // its client left while it waited
        end_unrun(*job);
        continue;
      }
      const size_t id = job->id;
      live_[id] = job;
      return Next{id, &live_[id]->request};
    }
    return std::nullopt;
  }
  bool wait() override {
    std::unique_lock lock(m_);
    cv_.wait(lock, [&] { return closed_ || !waiting_.empty(); });
    return !closed_;
  }
  bool open() override {
    std::lock_guard lock(m_);
    return !closed_;
  }
  bool wanted(size_t id) override { return !job(id)->cancelled; }

  std::shared_ptr<Job> job(size_t id) {
    std::lock_guard lock(m_);
    return live_.at(id);
  }
  void retire(size_t id) {
    std::lock_guard lock(m_);
    live_.erase(id);
  }
  // Stops taking requests; the waiting ones end unrun.
  void close() {
    std::lock_guard lock(m_);
    closed_ = true;
    for (auto& job : waiting_) end_unrun(*job);
    waiting_.clear();
    cv_.notify_all();
  }
  // After the engine thread failed: the live jobs end too.
  void end_live() {
    std::lock_guard lock(m_);
    for (auto& [id, job] : live_) end_unrun(*job);
    live_.clear();
  }
  template <typename Fn>
  void for_each_live(Fn&& fn) {
    std::lock_guard lock(m_);
    for (auto& [id, job] : live_) fn(*job);
  }
  std::pair<int64_t, int64_t> depth() {
    std::lock_guard lock(m_);
    return {std::ssize(live_), std::ssize(waiting_)};
  }

 private:
  static void end_unrun(Job& job) {
    std::lock_guard lock(job.m);
    job.done = job.refused = true;
    job.cv.notify_all();
  }
  std::mutex m_;
  std::condition_variable cv_;
  int64_t capacity_;
  std::deque<std::shared_ptr<Job>> waiting_;
  std::unordered_map<size_t, std::shared_ptr<Job>> live_;
  bool closed_ = false;
};

const char* finish_reason(StopReason reason) {
  switch (reason) {
    case StopReason::kMaxTokens:
    case StopReason::kContextFull: return "length";
    case StopReason::kEos:
    case StopReason::kStopString:
    case StopReason::kCallback: return "stop";
  }
  return "stop";
}

Json usage_of(const GenerateStats& s) {
  return {{"prompt_tokens", s.prompt_tokens},
          {"completion_tokens", s.generated_tokens},
          {"total_tokens", s.prompt_tokens + s.generated_tokens},
          {"prompt_tokens_details", {{"cached_tokens", s.reused_prompt_tokens}}}};
}

// A request's own counters (llama-server's `timings` names where they exist).
Json timings_of(const Job& job) {
  const GenerateStats& s = job.stats;
  Json t = {{"prompt_n", s.prompt_tokens},
            {"prompt_reused_n", s.reused_prompt_tokens},
            {"prompt_ms", s.prefill_seconds * 1e3},
            {"predicted_n", s.generated_tokens},
            {"predicted_ms", (s.time_to_first_token_seconds - s.prefill_seconds + s.decode_seconds) * 1e3},
            {"predicted_per_second", s.decode_tokens_per_second()},
            {"steps", job.steps},
            {"step_ms", job.step_seconds * 1e3}};
  if (job.expert_lookups > 0) {
    t["expert_lookups"] = job.expert_lookups;
    t["expert_hit_rate"] = double(job.expert_hits) / double(job.expert_lookups);
    t["expert_bytes_read"] = job.bytes_read;
    t["expert_stall_ms"] = job.stall_seconds * 1e3;
  }
  return t;
}

Json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) {
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    Json c = {{"id", random_id("call_")},
              {"type", "function"},
              {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (with_index) c["index"] = i;
    out.push_back(std::move(c));
  }
  return out;
}

std::string sse(const Json& j) {
  return "data: " + j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

void reply_json(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", "application/json");
}

void reply_error(httplib::Response& res, const ApiError& e) {
  if (e.status == 503) res.set_header("Retry-After", "1");
  reply_json(res, e.status, error_body(e));
}

// A streamed reply's answer as it comes: what may be the start of a tool call is held back until
// the reply ends (tools given), when the calls are parsed out of it.
class StreamedAnswer {
 public:
  // harmony: a tool call is a message of its own, known only from the raw reply at its end; with
  // tools the whole answer is held until then.
  StreamedAnswer(bool tools, bool harmony) : tools_(tools), harmony_(harmony) {}
  // The content that can go out now; raw is the reply's text with its markers.
  std::string push(std::string_view content, std::string_view raw) {
    raw_ += raw;
    if (!tools_) return std::string(content);
    held_ += content;
    if (in_call_ || harmony_) return {};
    const size_t start = tool_call_start(held_);
    std::string out = held_.substr(0, start);
    held_.erase(0, start);
    // What is held now begins a marker; once it is whole (its '>' is here) it is a call.
    in_call_ = held_.find('>') != std::string::npos;
    return out;
  }
  ParsedReply finish() {
    ParsedReply r = harmony_ ? parse_harmony_tool_calls(raw_, held_) : parse_tool_calls(held_);
    held_.clear();
    return r;
  }

 private:
  bool tools_, harmony_;
  std::string raw_;
  bool in_call_ = false;
  std::string held_;
};

}  // namespace

struct Server::Impl {
  Impl(const Model& model, const Tokenizer& tokenizer, BatchGenerator& generator, ExpertStreamer* streamer,
       ServerOptions options)
      : model(model),
        tokenizer(tokenizer),
        generator(generator),
        streamer(streamer),
        options(std::move(options)),
        queue(this->options.n_seq, this->options.max_queue) {}

  const Model& model;
  const Tokenizer& tokenizer;
  BatchGenerator& generator;
  ExpertStreamer* streamer;
  ServerOptions options;
  JobQueue queue;
  Metrics metrics;
  httplib::Server http;
  std::thread http_thread, engine_thread;
  std::atomic<size_t> next_id{0};
  std::mutex failure_m;
  std::string failure;  // why the engine thread stopped, if it did
  int listen_socket = -1;
  bool started = false;

  void engine_loop();
  // Why a job ended without running: the engine failed (500) or the server is stopping (503).
  ApiError unrun_error() {
    std::lock_guard lock(failure_m);
    if (!failure.empty()) return ApiError(500, "the engine stopped: " + failure, "server_error", "", "engine_stopped");
    return ApiError(503, "the server is stopping", "server_error", "", "server_stopping");
  }
  void install_routes();
  bool authorized(const httplib::Request& req, httplib::Response& res);
  std::shared_ptr<Job> make_job(Endpoint endpoint, const std::string& body);
  void complete(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  void answer_whole(Job& job, httplib::Response& res);
  void answer_stream(const std::shared_ptr<Job>& job, httplib::Response& res);
};

void Server::Impl::engine_loop() {
  const auto on_text = [&](size_t id, std::string_view text) {
    const std::shared_ptr<Job> job = queue.job(id);
    std::lock_guard lock(job->m);
    job->text += text;
    job->cv.notify_all();
    return !job->cancelled;
  };
  const auto on_done = [&](size_t id, const GenerateStats& stats) {
    // Out of the live set before its client hears it is done (a /metrics after the reply counts it gone).
    const std::shared_ptr<Job> job = queue.job(id);
    metrics.request_done(stats);
    queue.retire(id);
    std::lock_guard lock(job->m);
    job->stats = stats;
    job->done = true;
    job->cv.notify_all();
  };
  StreamerStats before = streamer ? streamer->stats() : StreamerStats{};
  const auto on_step = [&](const StepReport& step) {
    const StreamerStats now = streamer ? streamer->stats() : StreamerStats{};
    queue.for_each_live([&](Job& job) {
      ++job.steps;
      job.step_seconds += step.seconds;
      job.stall_seconds += now.stall_seconds - before.stall_seconds;
      job.bytes_read += now.prefetch.bytes_read - before.prefetch.bytes_read;
      job.expert_lookups += now.lookups - before.lookups;
      job.expert_hits += now.hits - before.hits;
    });
    before = now;
    metrics.step(step, streamer ? std::optional<StreamerStats>(now) : std::nullopt);
  };
  try {
    generator.run(queue, on_text, on_done, on_step);
  } catch (const std::exception& e) {
    spdlog::error("serve: the engine stopped: {}", e.what());
    {
      std::lock_guard lock(failure_m);
      failure = e.what();
    }
    queue.close();
    queue.end_live();
  }
}

bool Server::Impl::authorized(const httplib::Request& req, httplib::Response& res) {
  if (options.api_key.empty() || req.path == "/health") return true;
  const std::string expected = "Bearer " + options.api_key;
  const std::string given = req.get_header_value("Authorization");
  // Compared in time that does not depend on where they differ.
  unsigned diff = given.size() != expected.size() ? 1u : 0u;
  for (size_t i = 0; i < expected.size(); ++i)
    diff |= unsigned(uint8_t(expected[i]) ^ uint8_t(i < given.size() ? given[i] : 0));
  if (diff == 0) return true;
  reply_error(
      res,
      ApiError(401, given.empty() ? "an API key is required (Authorization: Bearer KEY)" : "the API key is not valid",
               "invalid_request_error", "", "invalid_api_key"));
  return false;
}

// Parses, renders and tokenizes a request into a job; throws ApiError.
std::shared_ptr<Job> Server::Impl::make_job(Endpoint endpoint, const std::string& body) {
  const CompletionRequest api = parse_request(endpoint, body);
  if (api.model && *api.model != options.model_id)
    throw ApiError(404,
                   fmt::format("the model '{}' does not exist: this server runs '{}'", *api.model, options.model_id),
                   "invalid_request_error", "model", "model_not_found");
  auto job = std::make_shared<Job>();
  job->id = next_id++;
  job->endpoint = endpoint;
  job->stream = api.stream;
  job->include_usage = api.include_usage;
  job->created = unix_seconds();
  BatchRequest& r = job->request;
  try {
    if (endpoint == Endpoint::kChat) {
      ChatRequest chat;
      chat.messages = api.messages;
      chat.tools = api.tools;
      job->tools = !api.tools.is_null();
      chat.kwargs = options.chat_kwargs;
      for (const auto& [k, v] : api.chat_kwargs.items()) chat.kwargs[k] = v;
      const std::string rendered = tokenizer.apply_chat_template(chat, options.chat_template);
      r.prompt = tokenizer.encode(rendered, /*add_special_tokens=*/false);
      job->splitter = make_reply_splitter(rendered);
      job->harmony = is_harmony_prompt(rendered);
      job->completion_id = random_id("chatcmpl-");
    } else {
      r.prompt = api.prompt ? tokenizer.encode(*api.prompt, /*add_special_tokens=*/true) : api.prompt_ids;
      job->completion_id = random_id("cmpl-");
    }
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "invalid_request_error", endpoint == Endpoint::kChat ? "messages" : "prompt");
  }
  const int64_t n_ctx = generator.n_ctx(), n_prompt = std::ssize(r.prompt), n_vocab = model.config().n_vocab;
  const char* input = endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (n_prompt == 0) throw ApiError(400, "the prompt is empty", "invalid_request_error", input);
  for (int32_t id : r.prompt)
    if (id < 0 || id >= n_vocab)
      throw ApiError(400, fmt::format("token id {} is outside the vocabulary (0 .. {})", id, n_vocab - 1),
                     "invalid_request_error", "prompt");
  if (n_prompt >= n_ctx)
    throw ApiError(
        400,
        fmt::format("the prompt is {} tokens, but the context holds {} (the server's --ctx-size)", n_prompt, n_ctx),
        "invalid_request_error", input, "context_length_exceeded");
  if (api.set.max_tokens && n_prompt + *api.set.max_tokens > n_ctx)
    throw ApiError(400,
                   fmt::format("the prompt ({} tokens) and max_tokens ({}) exceed the context of {} tokens", n_prompt,
                               *api.set.max_tokens, n_ctx),
                   "invalid_request_error", "max_tokens", "context_length_exceeded");
  r.options = options.defaults;
  if (!api.set.seed && options.random_seed) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    r.options.sampling.seed = rng();
  }
  api.set.apply(r.options);
  r.options.max_new_tokens = std::min(r.options.max_new_tokens, n_ctx - n_prompt);
  SamplingParams& p = r.options.sampling;
  try {
    validate_sampling(p);
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
  return job;
}

void Server::Impl::complete(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  const char* name = endpoint == Endpoint::kChat ? "chat" : "completions";
  try {
    std::shared_ptr<Job> job = make_job(endpoint, req.body);
    if (std::lock_guard lock(failure_m); !failure.empty())
      throw ApiError(500, "the engine stopped: " + failure, "server_error", "", "engine_stopped");
    if (!queue.push(job))
      throw ApiError(503, "the server is busy: every sequence slot and the queue are full; retry later", "server_error",
                     "", "server_busy");
    metrics.request_queued(std::ssize(job->request.prompt));
    if (job->stream)
      answer_stream(job, res);
    else
      answer_whole(*job, res);
    metrics.request(name, res.status);
  } catch (const ApiError& e) {
    reply_error(res, e);
    metrics.request(name, e.status);
  }
}

void Server::Impl::answer_whole(Job& job, httplib::Response& res) {
  std::unique_lock lock(job.m);
  job.cv.wait(lock, [&] { return job.done; });
  if (job.refused) throw unrun_error();
  const GenerateStats& s = job.stats;
  Json choice = {{"index", 0}};
  std::string reason = finish_reason(s.stop_reason);
  if (job.endpoint == Endpoint::kChat) {
    ReasoningParts parts = job.splitter->push(job.text);
    const ReasoningParts rest = job.splitter->finish();
    parts.reasoning += rest.reasoning;
    parts.content += rest.content;
    Json message = {{"role", "assistant"}};
    if (job.tools) {
      const ParsedReply parsed =
          job.harmony ? parse_harmony_tool_calls(job.text, parts.content) : parse_tool_calls(parts.content);
      message["content"] = parsed.content;
      if (!parsed.tool_calls.empty()) {
        message["tool_calls"] = tool_calls_json(parsed.tool_calls, false);
        reason = "tool_calls";
      }
    } else {
      message["content"] = parts.content;
    }
    if (!parts.reasoning.empty()) message["reasoning_content"] = parts.reasoning;
    choice["message"] = message;
  } else {
    choice["text"] = job.text;
    choice["logprobs"] = nullptr;
  }
  choice["finish_reason"] = reason;
  const Json body = {{"id", job.completion_id},
                     {"object", job.endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
                     {"created", job.created},
                     {"model", options.model_id},
                     {"choices", Json::array({choice})},
                     {"usage", usage_of(s)},
                     {"timings", timings_of(job)}};
  reply_json(res, 200, body);
}

void Server::Impl::answer_stream(const std::shared_ptr<Job>& job, httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  const bool chat = job->endpoint == Endpoint::kChat;
  auto answer = std::make_shared<StreamedAnswer>(job->tools, job->harmony);
  auto started = std::make_shared<bool>(false);
  // One chunk object with `delta` (chat) or `text` (completions).
  const auto chunk_object = [this, job, chat](const Json& delta, const Json& reason) {
    Json choice = {{"index", 0}};
    if (chat)
      choice["delta"] = delta;
    else
      choice["text"] = delta.value("content", ""), choice["logprobs"] = nullptr;
    choice["finish_reason"] = reason;
    return Json{{"id", job->completion_id},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", job->created},
                {"model", options.model_id},
                {"choices", Json::array({choice})}};
  };
  const auto chunk = [chunk_object](const Json& delta, const Json& reason) { return sse(chunk_object(delta, reason)); };
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, chat, answer, started, chunk, chunk_object, this](size_t, httplib::DataSink& sink) {
        std::string text;
        bool done = false;
        {
          std::unique_lock lock(job->m);
          job->cv.wait_for(lock, kKeepAlive, [&] { return job->done || !job->text.empty(); });
          text.swap(job->text);
          done = job->done;
        }
        std::string out;
        if (job->refused) {
          out = sse(error_body(unrun_error()));
          out += "data: [DONE]\n\n";
          sink.write(out.data(), out.size());
          sink.done();
          return true;
        }
        if (chat && !*started) {
          out += chunk({{"role", "assistant"}, {"content", ""}}, nullptr);
          *started = true;
        }
        const auto add_parts = [&](const ReasoningParts& parts, std::string_view raw) {
          if (!parts.reasoning.empty()) out += chunk({{"reasoning_content", parts.reasoning}}, nullptr);
          const std::string content = answer->push(parts.content, raw);
          if (!content.empty()) out += chunk({{"content", content}}, nullptr);
        };
        if (chat) {
          if (!text.empty()) add_parts(job->splitter->push(text), text);
        } else if (!text.empty()) {
          out += chunk({{"content", text}}, nullptr);
        }
        if (done) {
          std::string reason = finish_reason(job->stats.stop_reason);
          if (chat) {
            add_parts(job->splitter->finish(), {});
            const ParsedReply parsed = answer->finish();
            if (!parsed.content.empty()) out += chunk({{"content", parsed.content}}, nullptr);
            if (!parsed.tool_calls.empty()) {
              out += chunk({{"tool_calls", tool_calls_json(parsed.tool_calls, true)}}, nullptr);
              reason = "tool_calls";
            }
          }
          // The request's own counters beside its last chunk, as llama-server puts its timings.
          Json last = chunk_object(Json::object(), reason);
          last["timings"] = timings_of(*job);
          out += sse(last);
          if (job->include_usage) {
            out += sse({{"id", job->completion_id},
                        {"object", chat ? "chat.completion.chunk" : "text_completion"},
                        {"created", job->created},
                        {"model", options.model_id},
                        {"choices", Json::array()},
                        {"usage", usage_of(job->stats)}});
          }
          out += "data: [DONE]\n\n";
        }
        if (out.empty()) out = ": keep-alive\n\n";
        if (!sink.write(out.data(), out.size())) {
          job->cancelled = true;
          return false;
        }
        if (done) sink.done();
        return true;
      },
      [job](bool success) {
        if (!success) job->cancelled = true;
      });
  res.status = 200;
}

void Server::Impl::install_routes() {
  http.set_payload_max_length(size_t(options.max_body_bytes));
  // The library listens with a backlog of 5: more clients connecting at once lose their SYN and
  // retry a second later. The socket is remembered here and given a real backlog after binding.
  http.set_socket_options([this](int sock) {
    httplib::default_socket_options(sock);
    // A server restarted on its port while the last one's connections linger in TIME_WAIT binds.
    const int on = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    listen_socket = sock;
  });
  // Enough threads that every running and queued request holds one and a few more are left for
  // /health and /metrics, so a full server still answers 503 at once.
  const size_t n_threads = size_t(std::min<int64_t>(options.n_seq + options.max_queue + 4, 1024));
  http.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return authorized(req, res) ? httplib::Server::HandlerResponse::Unhandled
                                : httplib::Server::HandlerResponse::Handled;
  });
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413) {
      reply_error(res, ApiError(413, fmt::format("the request body is larger than {} bytes (--max-body)",
                                                 options.max_body_bytes)));
    } else if (res.status == 404) {
      reply_error(res, ApiError(404, fmt::format("no such endpoint: {} {}", req.method, req.path)));
    } else {
      reply_error(res, ApiError(res.status, fmt::format("the request could not be served (HTTP {})", res.status)));
    }
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    reply_error(res, ApiError(500, "internal error: " + what, "server_error"));
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    std::lock_guard lock(failure_m);
    if (failure.empty())
      reply_json(res, 200, {{"status", "ok"}});
    else
      reply_json(res, 503, {{"status", "error"}, {"message", "the engine stopped: " + failure}});
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const Json model_object = {{"id", options.model_id},
                               {"object", "model"},
                               {"created", 0},
                               {"owned_by", "chronos"},
                               {"meta", {{"n_ctx", generator.n_ctx()}, {"n_seq", options.n_seq}}}};
    reply_json(res, 200, {{"object", "list"}, {"data", Json::array({model_object})}});
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    const auto [live, waiting] = queue.depth();
    res.set_content(metrics.render(live, waiting), "text/plain; version=0.0.4");
  });
  http.Post("/v1/chat/completions",
            [this](const httplib::Request& req, httplib::Response& res) { complete(Endpoint::kChat, req, res); });
  http.Post("/v1/completions",
            [this](const httplib::Request& req, httplib::Response& res) { complete(Endpoint::kCompletion, req, res); });
}

Server::Server(const Model& model, const Tokenizer& tokenizer, BatchGenerator& generator, ExpertStreamer* streamer,
               ServerOptions options)
    : impl_(std::make_unique<Impl>(model, tokenizer, generator, streamer, std::move(options))) {}

Server::~Server() { stop(); }

int Server::start() {
  Impl& s = *impl_;
  CHRONOS_CHECK(!s.started);
  s.install_routes();
  int port = s.options.port;
  if (port == 0) {
    port = s.http.bind_to_any_port(s.options.host);
    if (port < 0) throw_error("serve: cannot listen on {} (any port)", s.options.host);
  } else if (!s.http.bind_to_port(s.options.host, port)) {
    throw_error("serve: cannot listen on {}:{} (in use, or not an address of this machine)", s.options.host, port);
  }
  if (s.listen_socket >= 0) ::listen(s.listen_socket, SOMAXCONN);
  s.started = true;
  s.engine_thread = std::thread([&s] { s.engine_loop(); });
  s.http_thread = std::thread([&s] { s.http.listen_after_bind(); });
  return port;
}

void Server::stop() {
  Impl& s = *impl_;
  if (!s.started) return;
  s.started = false;
  s.queue.close();
  if (s.engine_thread.joinable()) s.engine_thread.join();
  s.http.stop();
  if (s.http_thread.joinable()) s.http_thread.join();
}

}  // namespace chronos::server
