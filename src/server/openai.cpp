// The OpenAI request parser and the tool-call reader (openai.h).
#include "server/openai.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace chronos::server {
namespace {

using Json = nlohmann::ordered_json;

constexpr int64_t kMaxStopStrings = 16;
constexpr int64_t kMaxTokensLimit = int64_t(1) << 30;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, "invalid_request_error", param);
}

double number_of(const Json& v, const std::string& key, double lo, double hi) {
  if (!v.is_number()) bad(key, fmt::format("'{}' must be a number", key));
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) bad(key, fmt::format("'{}' = {} is out of range [{}, {}]", key, x, lo, hi));
  return x;
}

int64_t integer_of(const Json& v, const std::string& key, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) bad(key, fmt::format("'{}' must be an integer", key));
  if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(hi) : (v.get<int64_t>() < lo || v.get<int64_t>() > hi))
    bad(key, fmt::format("'{}' = {} is out of range [{}, {}]", key, v.dump(), lo, hi));
  return v.is_number_unsigned() ? int64_t(v.get<uint64_t>()) : v.get<int64_t>();
}

bool bool_of(const Json& v, const std::string& key) {
  if (!v.is_boolean()) bad(key, fmt::format("'{}' must be true or false", key));
  return v.get<bool>();
}

std::vector<std::string> stops_of(const Json& v) {
  std::vector<std::string> stops;
  if (v.is_null()) return stops;
  if (v.is_string()) {
    stops.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (const Json& s : v) {
      if (!s.is_string()) bad("stop", "'stop' must be a string or an array of strings");
      stops.push_back(s.get<std::string>());
    }
  } else {
    bad("stop", "'stop' must be a string or an array of strings");
  }
  if (std::ssize(stops) > kMaxStopStrings) bad("stop", fmt::format("'stop' holds at most {} strings", kMaxStopStrings));
  for (const std::string& s : stops)
    if (s.empty()) bad("stop", "'stop': a stop string is empty");
  return stops;
}

void check_messages(const Json& messages) {
  if (!messages.is_array() || messages.empty()) bad("messages", "'messages' must be a non-empty array of messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    const std::string at = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad(at, fmt::format("'{}' must be an object with 'role' and 'content'", at));
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) bad(at + ".role", fmt::format("'{}.role' must be a string", at));
    const auto content = m.find("content");
    if (content != m.end() && !content->is_string() && !content->is_array() && !content->is_null())
      bad(at + ".content", fmt::format("'{}.content' must be a string, an array of parts or null", at));
    if (content != m.end() && content->is_array()) {
      for (const Json& part : *content) {
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
          bad(at + ".content", fmt::format("'{}.content' parts must be objects with a 'type'", at));
        if (part["type"] != "text")
          bad(at + ".content", fmt::format("'{}.content': only text parts are supported, not '{}'", at,
                                           part["type"].get<std::string>()));
        if (!part.contains("text") || !part["text"].is_string())
          bad(at + ".content", fmt::format("'{}.content': a text part needs a string 'text'", at));
      }
    }
  }
}

// Text parts joined: the templates take a string.
Json flatten_content(Json messages) {
  for (Json& m : messages) {
    auto content = m.find("content");
    if (content == m.end() || !content->is_array()) continue;
    std::string text;
    for (const Json& part : *content) text += part["text"].get<std::string>();
    *content = text;
  }
  return messages;
}

void check_tools(const Json& tools) {
  if (!tools.is_array()) bad("tools", "'tools' must be an array of tool definitions");
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& t = tools[i];
    const std::string at = fmt::format("tools[{}]", i);
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object())
      bad(at, fmt::format("'{}' must be an object with 'type': 'function' and a 'function' object", at));
    const Json& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
      bad(at + ".function.name", fmt::format("'{}.function.name' must be a non-empty string", at));
  }
}

}  // namespace

nlohmann::ordered_json error_body(const ApiError& error) {
  Json e = {{"message", error.what()}, {"type", error.type}};
  e["param"] = error.param.empty() ? Json(nullptr) : Json(error.param);
  e["code"] = error.code.empty() ? Json(nullptr) : Json(error.code);
  return {{"error", e}};
}

CompletionRequest parse_request(Endpoint endpoint, std::string_view body) {
  Json j;
  try {
    j = Json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    bad("", fmt::format("the request body is not JSON: {}", e.what()));
  }
  if (!j.is_object()) bad("", "the request body must be a JSON object");
  CompletionRequest r;
  r.endpoint = endpoint;
  const bool chat = endpoint == Endpoint::kChat;
  bool has_input = false;
  std::string tool_choice = "auto";
  for (const auto& [key, v] : j.items()) {
    if (key == "model") {
      if (!v.is_string()) bad(key, "'model' must be a string");
      r.model = v.get<std::string>();
    } else if (chat && key == "messages") {
      check_messages(v);
      r.messages = flatten_content(v);
      has_input = true;
    } else if (chat && key == "tools") {
      if (!v.is_null()) {
        check_tools(v);
        if (!v.empty()) r.tools = v;
      }
    } else if (chat && key == "tool_choice") {
      if (v.is_string()) {
        tool_choice = v.get<std::string>();
        if (tool_choice != "auto" && tool_choice != "none" && tool_choice != "required")
          bad(key, "'tool_choice' must be \"auto\", \"none\", \"required\" or a function object");
      } else if (!v.is_object() && !v.is_null()) {
        bad(key, "'tool_choice' must be \"auto\", \"none\", \"required\" or a function object");
      }
    } else if (chat && key == "chat_template_kwargs") {
      if (!v.is_object()) bad(key, "'chat_template_kwargs' must be an object");
      for (const auto& [k, value] : v.items()) r.chat_kwargs[k] = value;
    } else if (chat && key == "reasoning_effort") {
      if (!v.is_string()) bad(key, "'reasoning_effort' must be a string");
      r.chat_kwargs["reasoning_effort"] = v;
    } else if (!chat && key == "prompt") {
      if (v.is_string()) {
        r.prompt = v.get<std::string>();
      } else if (v.is_array() && v.size() == 1 && v[0].is_string()) {
        r.prompt = v[0].get<std::string>();
      } else if (v.is_array() && !v.empty() &&
                 std::all_of(v.begin(), v.end(), [](const Json& x) { return x.is_number_integer(); })) {
        for (const Json& id : v) r.prompt_ids.push_back(int32_t(integer_of(id, "prompt", 0, INT32_MAX)));
      } else {
        bad(key, "'prompt' must be a string, an array of one string or an array of token ids");
      }
      has_input = true;
    } else if (key == "max_tokens" || key == "max_completion_tokens") {
      if (v.is_null()) continue;
      if (r.set.max_tokens) bad(key, "give one of 'max_tokens' and 'max_completion_tokens'");
      r.set.max_tokens = integer_of(v, key, 0, kMaxTokensLimit);
    } else if (key == "temperature") {
      if (!v.is_null()) r.set.temperature = float(number_of(v, key, 0.0, 100.0));
    } else if (key == "top_p") {
      if (!v.is_null()) r.set.top_p = float(number_of(v, key, 0.0, 1.0));
    } else if (key == "min_p") {
      if (!v.is_null()) r.set.min_p = float(number_of(v, key, 0.0, 1.0));
    } else if (key == "repeat_penalty" || key == "repetition_penalty") {
      if (!v.is_null()) r.set.repeat_penalty = float(number_of(v, key, 1e-3, 100.0));
    } else if (key == "top_k") {
      if (!v.is_null()) r.set.top_k = integer_of(v, key, 0, int64_t(1) << 31);
    } else if (key == "seed") {
      if (v.is_null()) continue;
      if (!v.is_number_integer()) bad(key, "'seed' must be an integer");
      // OpenAI's seeds may be negative; the bits are the seed.
      r.set.seed = v.is_number_unsigned() ? v.get<uint64_t>() : uint64_t(v.get<int64_t>());
    } else if (key == "stop") {
      r.set.stop = stops_of(v);
    } else if (key == "ignore_eos") {
      r.set.ignore_eos = bool_of(v, key);
    } else if (key == "stream") {
      if (!v.is_null()) r.stream = bool_of(v, key);
    } else if (key == "stream_options") {
      if (v.is_null()) continue;
      if (!v.is_object()) bad(key, "'stream_options' must be an object");
      if (v.contains("include_usage")) r.include_usage = bool_of(v["include_usage"], "stream_options.include_usage");
    } else if (key == "n" || key == "best_of") {
      if (!v.is_null() && integer_of(v, key, 1, 1) != 1) bad(key, fmt::format("'{}' must be 1", key));
    } else if (key == "presence_penalty" || key == "frequency_penalty") {
      if (!v.is_null() && number_of(v, key, -2.0, 2.0) != 0.0)
        bad(key, fmt::format("'{}' is not supported (use 'repeat_penalty')", key));
    } else if (key == "logprobs" || key == "top_logprobs") {
      if (!v.is_null() && !(v.is_boolean() && !v.get<bool>()) && !(v.is_number_integer() && v.get<int64_t>() == 0))
        bad(key, fmt::format("'{}' is not supported", key));
    } else if (key == "echo") {
      if (!v.is_null() && bool_of(v, key)) bad(key, "'echo' is not supported");
    } else if (key == "suffix") {
      if (!v.is_null() && !(v.is_string() && v.get<std::string>().empty())) bad(key, "'suffix' is not supported");
    } else if (key == "response_format") {
      if (v.is_null()) continue;
      if (!v.is_object() || !v.contains("type") || !v["type"].is_string())
        bad(key, "'response_format' must be an object with a 'type'");
      if (v["type"] != "text")
        bad(key,
            fmt::format("'response_format' of type '{}' is not supported (only 'text')", v["type"].get<std::string>()));
    } else if (key == "logit_bias") {
      if (!v.is_null() && !(v.is_object() && v.empty())) bad(key, "'logit_bias' is not supported");
    }
    // Anything else (user, metadata, store, parallel_tool_calls, ...) is ignored.
  }
  if (!has_input) bad(chat ? "messages" : "prompt", chat ? "'messages' is required" : "'prompt' is required");
  if (tool_choice == "none") r.tools = Json();
  if (j.contains("stream_options") && !j["stream_options"].is_null() && !r.stream)
    bad("stream_options", "'stream_options' is only allowed with 'stream': true");
  return r;
}

// Tool calls.
namespace {

constexpr std::array<std::string_view, 2> kOpenMarkers = {"<tool_call>", "<minimax:tool_call>"};

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// A parameter's text as a JSON value: JSON when it parses as JSON, else the string.
Json value_of(std::string_view text) {
  const std::string_view t = trim(text);
  Json v = Json::parse(t, nullptr, /*allow_exceptions=*/false);
  return v.is_discarded() ? Json(std::string(t)) : v;
}

// Every `<open>KEY</close>` ... pair between `begin` and `end` tags in s, in order. Returns false
// when s holds anything else than such pairs and whitespace.
bool key_values(std::string_view s, std::string_view key_open, std::string_view key_close, std::string_view value_open,
                std::string_view value_close, Json& out) {
  for (s = trim(s); !s.empty(); s = trim(s)) {
    if (!s.starts_with(key_open)) return false;
    s.remove_prefix(key_open.size());
    const size_t k = s.find(key_close);
    if (k == std::string_view::npos) return false;
    const std::string key(trim(s.substr(0, k)));
    s = trim(s.substr(k + key_close.size()));
    if (!s.starts_with(value_open)) return false;
    s.remove_prefix(value_open.size());
    const size_t v = s.find(value_close);
    if (v == std::string_view::npos) return false;
    out[key] = value_of(s.substr(0, v));
    s.remove_prefix(v + value_close.size());
  }
  return true;
}

// `<parameter=KEY>VALUE</parameter>` pairs (Qwen3-Coder): the key ends at '>'.
bool equals_parameters(std::string_view s, Json& out) {
  for (s = trim(s); !s.empty(); s = trim(s)) {
    if (!s.starts_with("<parameter=")) return false;
    s.remove_prefix(11);
    const size_t gt = s.find('>');
    if (gt == std::string_view::npos) return false;
    const std::string key(trim(s.substr(0, gt)));
    s.remove_prefix(gt + 1);
    const size_t end = s.find("</parameter>");
    if (end == std::string_view::npos) return false;
    std::string_view value = s.substr(0, end);
    // The template writes the value on its own lines.
    if (value.starts_with('\n')) value.remove_prefix(1);
    if (value.ends_with('\n')) value.remove_suffix(1);
    out[key] = value_of(value);
    s.remove_prefix(end + 12);
  }
  return true;
}

// A call's arguments as text; bytes that are not UTF-8 (a reply cut inside a character) replaced.
std::string text_of(const Json& args) { return args.dump(-1, ' ', false, Json::error_handler_t::replace); }

// The body of a <tool_call> block as one call, in whichever syntax it is.
std::optional<ToolCall> tool_call_body(std::string_view body) {
  body = trim(body);
  if (body.starts_with('{')) {
    const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string() ||
        j["name"].get<std::string>().empty())
      return std::nullopt;
    Json args = j.contains("arguments") ? j["arguments"] : j.value("parameters", Json::object());
    if (args.is_string()) {  // already text: keep it if it is JSON
      const Json parsed = Json::parse(args.get<std::string>(), nullptr, false);
      if (parsed.is_discarded()) return std::nullopt;
      args = parsed;
    }
    return ToolCall{j["name"].get<std::string>(), text_of(args)};
  }
  Json args = Json::object();
  if (body.starts_with("<function=")) {
    body.remove_prefix(10);
    const size_t gt = body.find('>');
    const size_t end = body.rfind("</function>");
    if (gt == std::string_view::npos || end == std::string_view::npos || end < gt) return std::nullopt;
    if (!trim(body.substr(end + 11)).empty()) return std::nullopt;
    const std::string name(trim(body.substr(0, gt)));
    if (name.empty() || !equals_parameters(body.substr(gt + 1, end - gt - 1), args)) return std::nullopt;
    return ToolCall{name, text_of(args)};
  }
  // GLM: the name, then key/value pairs.
  const size_t first = body.find('<');
  const std::string name(trim(body.substr(0, first)));
  if (name.empty() || name.find_first_of(" \t\n{}\"") != std::string::npos) return std::nullopt;
  if (first != std::string_view::npos &&
      !key_values(body.substr(first), "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", args))
    return std::nullopt;
  return ToolCall{name, text_of(args)};
}

// The <invoke> elements of a MiniMax block.
std::optional<std::vector<ToolCall>> invokes(std::string_view body) {
  std::vector<ToolCall> calls;
  for (body = trim(body); !body.empty(); body = trim(body)) {
    if (!body.starts_with("<invoke name=\"")) return std::nullopt;
    body.remove_prefix(14);
    const size_t quote = body.find("\">");
    const size_t end = body.find("</invoke>");
    if (quote == std::string_view::npos || end == std::string_view::npos || end < quote) return std::nullopt;
    Json args = Json::object();
    std::string_view params = body.substr(quote + 2, end - quote - 2);
    for (params = trim(params); !params.empty(); params = trim(params)) {
      if (!params.starts_with("<parameter name=\"")) return std::nullopt;
      params.remove_prefix(17);
      const size_t q = params.find("\">");
      const size_t e = params.find("</parameter>");
      if (q == std::string_view::npos || e == std::string_view::npos || e < q) return std::nullopt;
      args[std::string(params.substr(0, q))] = value_of(params.substr(q + 2, e - q - 2));
      params.remove_prefix(e + 12);
    }
    const std::string name(trim(body.substr(0, quote)));
    if (name.empty()) return std::nullopt;
    calls.push_back({name, text_of(args)});
    body.remove_prefix(end + 9);
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

}  // namespace

ParsedReply parse_tool_calls(std::string_view reply) {
  ParsedReply out;
  size_t at = 0;
  while (at < reply.size()) {
    size_t open = std::string_view::npos;
    std::string_view marker;
    for (std::string_view m : kOpenMarkers) {
      const size_t p = reply.find(m, at);
      if (p < open) open = p, marker = m;
    }
    if (open == std::string_view::npos) break;
    const bool minimax = marker == kOpenMarkers[1];
    const std::string_view close = minimax ? "</minimax:tool_call>" : "</tool_call>";
    const size_t body = open + marker.size();
    const size_t end = reply.find(close, body);
    if (end == std::string_view::npos) break;
    bool parsed = false;
    if (minimax) {
      if (auto calls = invokes(reply.substr(body, end - body))) {
        out.tool_calls.insert(out.tool_calls.end(), calls->begin(), calls->end());
        parsed = true;
      }
    } else if (auto call = tool_call_body(reply.substr(body, end - body))) {
      out.tool_calls.push_back(*call);
      parsed = true;
    }
    out.content.append(reply.substr(at, (parsed ? open : end + close.size()) - at));
    at = end + close.size();
  }
  out.content.append(reply.substr(std::min(at, reply.size())));
  if (!out.tool_calls.empty()) out.content = std::string(trim(out.content));
  return out;
}

ParsedReply parse_harmony_tool_calls(std::string_view raw, std::string_view content) {
  constexpr std::string_view kMessage = "<|message|>", kCall = "<|call|>", kRecipient = "to=functions.";
  ParsedReply out;
  out.content = content;
  size_t at = 0;
  while (at < raw.size()) {
    const size_t message = raw.find(kMessage, at);
    if (message == std::string_view::npos) break;
    const size_t start = raw.rfind("<|start|>", message);
    const size_t header_begin = start == std::string_view::npos || start < at ? at : start;
    const std::string_view header = raw.substr(header_begin, message - header_begin);
    const size_t body_begin = message + kMessage.size();
    size_t body_end = raw.size(), next = raw.size();
    for (const std::string_view end : {std::string_view("<|end|>"), std::string_view("<|return|>"), kCall}) {
      const size_t e = raw.find(end, body_begin);
      if (e < body_end) body_end = e, next = e + end.size();
    }
    const size_t recipient = header.find(kRecipient);
    if (recipient != std::string_view::npos && raw.substr(body_end).starts_with(kCall)) {
      std::string_view name = header.substr(recipient + kRecipient.size());
      name = name.substr(0, std::min(name.find(' '), name.find("<|")));
      const std::string_view body = trim(raw.substr(body_begin, body_end - body_begin));
      const Json args = Json::parse(body, nullptr, /*allow_exceptions=*/false);
      if (!name.empty() && !args.is_discarded()) {
        out.tool_calls.push_back({std::string(name), text_of(args)});
        if (const size_t in_content = out.content.find(body); in_content != std::string::npos)
          out.content.erase(in_content, body.size());
      }
    }
    at = next;
  }
  if (!out.tool_calls.empty()) out.content = std::string(trim(out.content));
  return out;
}

size_t tool_call_start(std::string_view text) {
  size_t start = text.size();
  for (std::string_view m : kOpenMarkers) {
    if (const size_t p = text.find(m); p != std::string_view::npos) start = std::min(start, p);
    // A tail that is a prefix of the marker.
    for (size_t n = std::min(m.size() - 1, text.size()); n > 0; --n)
      if (text.substr(text.size() - n) == m.substr(0, n)) {
        start = std::min(start, text.size() - n);
        break;
      }
  }
  return start;
}

}  // namespace chronos::server
