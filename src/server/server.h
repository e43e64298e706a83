// chronos serve: the OpenAI API over HTTP in front of one BatchGenerator. Requests join the running
// batch at step boundaries (a bounded queue beyond the KV slots, 503 past it), stream their tokens
// as server-sent events or answer whole, and leave when done or when their client goes away.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "chronos/generate.h"

namespace chronos {
class BatchGenerator;
class ExpertStreamer;
class Model;
class Tokenizer;
}  // namespace chronos

namespace chronos::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;         // 0: any free port (start() returns it)
  std::string api_key;     // when set, every endpoint but /health wants `Authorization: Bearer KEY`
  std::string model_id;    // what /v1/models lists and requests may name
  int64_t n_seq = 4;       // the generator's KV slots: sequences running at once
  int64_t max_queue = 16;  // requests waiting beyond them; more get 503
  int64_t max_body_bytes = int64_t(4) << 20;
  GenerateOptions defaults;   // sampling, stop strings, EOS ids and max_new_tokens of the flags
  bool random_seed = true;    // a request without a seed draws one (false: the defaults' seed)
  std::string chat_template;  // another template than the model's (empty: the model's)
  nlohmann::ordered_json chat_kwargs = nlohmann::ordered_json::object();  // template variables of the flags
};

class Server {
 public:
  // The generator runs on the server's engine thread; the streamer (may be null) is read for /metrics
  // between steps. All must outlive the server.
  Server(const Model& model, const Tokenizer& tokenizer, BatchGenerator& generator, ExpertStreamer* streamer,
         ServerOptions options);
  ~Server();

  // Binds and starts serving (HTTP threads and the engine thread); returns the port. Throws Error
  // when the address cannot be bound.
  int start();
  // Ends every request (streams close, queued requests are answered 503) and joins the threads.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace chronos::server
