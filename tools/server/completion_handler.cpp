// One completion request from body to reply (completion_handler.hpp).
#include "tools/server/completion_handler.hpp"

#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <mutex>

#include "kernels/error.hpp"
#include "runtime/model/bounded_input.hpp"
#include "tools/server/chat_template.hpp"
#include "tools/server/openai_logprobs.hpp"
#include "tools/server/openai_response.hpp"
#include "tools/server/server_metrics.hpp"

namespace vc::server {

namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// How often a waiting handler looks whether its client is still there.
constexpr auto kPollInterval = 20ms;

// Tokens handed from the engine's callback (a CAF thread) to the connection thread.
struct TokenQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<LoggedToken> tokens;
};

// Replies and error bodies keep the key order they were built in (OpenAI's, and
// top_logprobs most likely first).
template <class Json>
std::string dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string event(const nlohmann::ordered_json& j) { return "data: " + dump(j) + "\n\n"; }

// A finished request into the metrics.
vericache::Result account(ServerState& st, const TokenTimer& timer, vericache::Result r) {
  if (st.metrics == nullptr) return r;
  std::string outcome = r.ok ? finish_reason(r.finish_reason) : "error";
  if (!r.ok && r.error.starts_with("overloaded")) outcome = "rejected";
  st.metrics->observe_e2e(timer.since_start());
  st.metrics->on_finished(outcome, r.stats.accepted_histogram);
  return r;
}

// An engine failure as an OpenAI error.
ApiError engine_error(const vericache::Result& r) {
  const std::string& e = r.error;
  if (e.starts_with("overloaded"))
    return ApiError(429, "rate_limit_error", "the server is busy: " + e, "", "rate_limit_exceeded");
  if (e.starts_with("field '")) return bad_request("", e);
  if (e.starts_with("request: needs") || e.starts_with("request: its full KV"))
    return bad_request("max_tokens", e);
  return ApiError(500, "server_error", e.empty() ? "request " + r.finish_reason : e);
}

json parse_body(const std::string& body) {
  try {
    return parse_json_bounded(body, "", {body.size() + 1, 64});
  } catch (const std::exception& e) {
    throw bad_request("", std::string("request body: ") + e.what());
  }
}

ParsedRequest parse(ServerState& st, Endpoint endpoint, const json& body,
                    const std::string& body_text) {
  std::string prompt;
  if (endpoint == Endpoint::chat) {
    if (st.chat_template == nullptr)
      throw bad_request("messages", "this model has no chat template; use /v1/completions");
    if (!body.is_object() || !body.contains("messages"))
      throw bad_request("messages", "missing 'messages'");
    // Again with the body's key order, which the template sees (tojson, items()); its
    // depth was checked by parse_body.
    const nlohmann::ordered_json in_order = nlohmann::ordered_json::parse(body_text);
    const nlohmann::ordered_json no_tools;
    prompt = st.chat_template->render(in_order["messages"],
                                      in_order.contains("tools") ? in_order["tools"] : no_tools);
  }
  return parse_request(body, endpoint, st.settings, st.limits, *st.tokenizer, prompt);
}

// The parser for this request's reply: none unless it is a chat request with tools.
ToolCallParser parser_for(const ServerState& st, Endpoint endpoint, const ParsedRequest& p) {
  if (endpoint != Endpoint::chat || p.tool_names.empty()) return ToolCallParser::none;
  return st.tool_call_parser;
}

// Waits for the result; a client that leaves cancels the request.
bool wait_result(ServerState& st, uint64_t id, std::future<vericache::Result>& f,
                 StreamSink& sink) {
  while (f.wait_for(kPollInterval) != std::future_status::ready) {
    if (sink.peer_closed()) {
      st.engine->cancel(id);
      return false;
    }
  }
  return true;
}

Reply stream(ServerState& st, const ResponseMeta& meta, const ParsedRequest& p,
             vericache::Engine::Submission& sub, const std::shared_ptr<TokenQueue>& q,
             const Decoder& decode, StreamSink& sink, const TokenTimer& timer) {
  TextStream text(decode, p.engine_request.stop);
  // With tools, text that may be a tool call waits for the end (tool_calls.hpp).
  const ToolCallParser parser = parser_for(st, meta.endpoint, p);
  ToolCallGate gate(parser);
  bool begun = false, first = true;
  // Tokens whose logprobs no chunk has carried yet: a chunk carries those of the
  // tokens that let its text out (text held back waits with its tokens), the last
  // chunk the rest, so the chunks' lists add up to the whole response's.
  std::vector<LoggedToken> unsent;
  size_t text_offset = 0;
  const TokenText token_text = [&](int32_t id) { return decode({id}); };
  auto take_logprobs = [&]() -> nlohmann::ordered_json {
    if (!p.logprobs || unsent.empty()) return nullptr;
    nlohmann::ordered_json j = logprobs_json(meta.endpoint, unsent, p.top_logprobs, token_text, text_offset);
    unsent.clear();
    return j;
  };
  auto cancel = [&] {
    st.engine->cancel(sub.id);
    (void)account(st, timer, sub.result.get());
    return Reply{0, "", true};
  };
  for (;;) {
    std::deque<LoggedToken> batch;
    bool ready = false;
    {
      std::unique_lock lock(q->mu);
      q->cv.wait_for(lock, kPollInterval, [&] { return !q->tokens.empty(); });
      batch.swap(q->tokens);
    }
    if (batch.empty())  // the last tokens come before the result: look again after it
      ready = sub.result.wait_for(0s) == std::future_status::ready;
    if (batch.empty() && !ready) {
      if (sink.peer_closed()) return cancel();
      continue;
    }
    if (!begun && !batch.empty()) {
      if (!sink.begin_stream()) return cancel();
      begun = true;
    }
    std::string delta;
    for (LoggedToken& t : batch) {
      delta += text.push(t.id);
      unsent.push_back(std::move(t));
    }
    delta = gate.push(delta);
    if (!delta.empty()) {
      // Tokens whose text the gate holds wait with it (to the last chunk).
      const bool all_out = gate.sent().size() == text.sent().size();
      if (!sink.send(event(chunk_body(meta, delta, "", first,
                                      all_out ? take_logprobs() : nullptr))))
        return cancel();
      first = false;
    }
    if (ready) {
      std::lock_guard lock(q->mu);
      if (q->tokens.empty()) break;
    }
  }
  const vericache::Result r = account(st, timer, sub.result.get());
  if (!r.ok && !begun) return error_reply(engine_error(r));
  if (!begun && !sink.begin_stream()) return {0, "", true};
  if (!r.ok) {
    (void)sink.send(event(engine_error(r).body()));
  } else if (parser != ToolCallParser::none) {
    const ParsedReply parsed = parse_tool_calls(parser, r.text, p.tool_names);
    for (const nlohmann::ordered_json& c :
         final_tool_call_chunks(meta, parsed, gate.sent(), finish_reason(r.finish_reason), first,
                                take_logprobs()))
      (void)sink.send(event(c));
  } else {
    (void)sink.send(event(chunk_body(meta, text.finish(r.text), finish_reason(r.finish_reason),
                                     first, take_logprobs())));
    if (p.include_usage) (void)sink.send(event(usage_chunk_body(meta, p, r)));
  }
  (void)sink.send("data: [DONE]\n\n");
  (void)sink.end_stream();
  return {0, "", true};
}

Reply run(ServerState& st, Endpoint endpoint, const std::string& body_text, StreamSink& sink) {
  if (st.draining.load())
    throw ApiError(503, "service_unavailable", "the server is shutting down", "",
                   "shutting_down");
  const json body = parse_body(body_text);
  const ParsedRequest p = parse(st, endpoint, body, body_text);
  ResponseMeta meta;
  const uint64_t n = st.next_response.fetch_add(1);
  meta.id = (endpoint == Endpoint::chat ? "chatcmpl-" : "cmpl-") + std::to_string(n);
  meta.created = int64_t(std::time(nullptr));
  meta.model = st.settings.model_name;
  meta.endpoint = endpoint;
  const Decoder decode = [engine = st.engine](const std::vector<int32_t>& ids) {
    return engine->decode(ids);
  };

  auto q = std::make_shared<TokenQueue>();
  auto timer = std::make_shared<TokenTimer>(st.metrics);
  const bool streamed = p.stream;
  // Runs on the engine's scheduler thread: short, never blocks.
  vericache::TokenDetailCallback on_token = [q, timer, streamed](uint64_t,
                                                                 const vericache::EmittedToken& t) {
    timer->on_token();
    if (!streamed) return;
    {
      std::lock_guard lock(q->mu);
      q->tokens.push_back({t.id, t.logprob, {t.top_logprobs.begin(), t.top_logprobs.end()}});
    }
    q->cv.notify_one();
  };
  vericache::Engine::Submission sub = st.engine->submit(p.engine_request, std::move(on_token));
  if (p.stream) return stream(st, meta, p, sub, q, decode, sink, *timer);
  if (!wait_result(st, sub.id, sub.result, sink)) {
    (void)account(st, *timer, sub.result.get());
    return {0, "", true};  // nobody to answer
  }
  const vericache::Result r = account(st, *timer, sub.result.get());
  if (!r.ok) throw engine_error(r);
  const ToolCallParser parser = parser_for(st, endpoint, p);
  if (parser == ToolCallParser::none) return {200, dump(response_body(meta, p, r, decode)), false};
  const ParsedReply parsed = parse_tool_calls(parser, r.text, p.tool_names);
  return {200, dump(response_body(meta, p, r, decode, &parsed)), false};
}

}  // namespace

Reply error_reply(const ApiError& e) { return {e.status(), dump(e.body()), false}; }

Reply handle_completion(ServerState& state, Endpoint endpoint, const std::string& body,
                        StreamSink& sink) {
  try {
    return run(state, endpoint, body, sink);
  } catch (const ApiError& e) {
    return error_reply(e);
  } catch (const Error& e) {
    return error_reply(bad_request("", e.what()));
  } catch (const std::exception& e) {
    return error_reply(ApiError(500, "server_error", std::string("internal error: ") + e.what()));
  }
}

}  // namespace vc::server
