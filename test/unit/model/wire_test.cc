#include "model/wire.h"

#include "http/sse.h"
#include "unit/model/recorded_streams.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace cb::model {
namespace {

using nlohmann::json;

struct Assembled {
  Status status;  // the first error from the parser or the assembler
  std::vector<Delta> deltas;
  std::optional<Response> response;
  Status finish_status;
};

// Feeds |pieces| through an SseParser and an assembler, as the client does.
Assembled assemble(Wire wire, const std::vector<std::string_view>& pieces, bool clean_end = true) {
  Assembled out;
  http::SseParser parser;
  auto assembler = make_stream_assembler(wire);
  for (std::string_view piece : pieces) {
    auto events = parser.feed(piece);
    if (!events.ok()) {
      out.status = events.status();
      return out;
    }
    for (const auto& e : *events) {
      Status st = assembler->on_event(e, out.deltas);
      if (!st.ok()) {
        out.status = st;
        return out;
      }
    }
  }
  auto r = assembler->finish(clean_end);
  if (r.ok()) {
    out.response = std::move(*r);
  } else {
    out.finish_status = r.status();
  }
  return out;
}

// Joins consecutive text and argument deltas, so splits that cut the stream differently can
// be compared: the concatenation is what a caller shows.
std::vector<Delta> coalesce(const std::vector<Delta>& in) {
  std::vector<Delta> out;
  for (const Delta& d : in) {
    if (!out.empty() && d.kind != Delta::Kind::kToolCallStart && out.back().kind == d.kind &&
        out.back().index == d.index) {
      out.back().text += d.text;
      continue;
    }
    out.push_back(d);
  }
  return out;
}

Delta text_delta(std::string t) {
  Delta d;
  d.kind = Delta::Kind::kText;
  d.text = std::move(t);
  return d;
}
Delta start_delta(size_t index, std::string id, std::string name) {
  Delta d;
  d.kind = Delta::Kind::kToolCallStart;
  d.index = index;
  d.id = std::move(id);
  d.name = std::move(name);
  return d;
}
Delta args_delta(size_t index, std::string t) {
  Delta d;
  d.kind = Delta::Kind::kToolCallArguments;
  d.index = index;
  d.text = std::move(t);
  return d;
}

TEST_CASE("StreamAssembler: an OpenAI stream assembles text, parallel tool calls and usage",
          "[model][unit]") {
  Assembled a = assemble(Wire::kOpenAi, {test::kOpenAiStream});
  REQUIRE(a.status.ok());
  REQUIRE(a.response.has_value());
  const Response& r = *a.response;
  CHECK(r.id == "chatcmpl-9x1");
  CHECK(r.model == "gpt-4o-2024-08-06");
  REQUIRE(r.message.parts.size() == 3);
  CHECK(r.message.role == Role::kAssistant);
  CHECK(r.message.parts[0] == Part::text_part("Let me check é."));
  CHECK(r.message.parts[1] ==
        Part::tool_call_part("call_a1", "get_weather", "{\"location\": \"Paris\"}"));
  CHECK(r.message.parts[2] == Part::tool_call_part("call_b2", "get_time", "{\"tz\": \"CET\"}"));
  CHECK(r.stop_reason == StopReason::kToolUse);
  CHECK(r.stop_reason_raw == "tool_calls");
  CHECK(r.usage == Usage{82, 17, 64, 0});
  std::vector<Delta> want = {text_delta("Let me "),
                             text_delta("check é."),
                             start_delta(0, "call_a1", "get_weather"),
                             args_delta(0, "{\"loc"),
                             args_delta(0, "ation\": \"Paris\"}"),
                             start_delta(1, "call_b2", "get_time"),
                             args_delta(1, "{\"tz\":"),
                             args_delta(1, " \"CET\"}")};
  CHECK(a.deltas == want);
}

TEST_CASE("StreamAssembler: an Anthropic stream assembles blocks in order with cache usage",
          "[model][unit]") {
  Assembled a = assemble(Wire::kAnthropic, {test::kAnthropicStream});
  REQUIRE(a.status.ok());
  REQUIRE(a.response.has_value());
  const Response& r = *a.response;
  CHECK(r.id == "msg_01XFD");
  CHECK(r.model == "claude-sonnet-4-5");
  REQUIRE(r.message.parts.size() == 2);
  CHECK(r.message.parts[0] == Part::text_part("Okay, checking ☀."));
  CHECK(r.message.parts[1] ==
        Part::tool_call_part("toolu_01T1", "get_weather", "{\"location\": \"Paris\"}"));
  CHECK(r.stop_reason == StopReason::kToolUse);
  CHECK(r.stop_reason_raw == "tool_use");
  // 472 uncached + 20 written + 100 read; output from message_delta.
  CHECK(r.usage == Usage{592, 89, 100, 20});
  std::vector<Delta> want = {text_delta("Okay, "), text_delta("checking ☀."),
                             start_delta(0, "toolu_01T1", "get_weather"),
                             args_delta(0, "{\"location\": "), args_delta(0, "\"Paris\"}")};
  CHECK(a.deltas == want);
}

TEST_CASE("StreamAssembler: the same response whatever byte the stream is split at",
          "[model][unit]") {
  for (Wire wire : {Wire::kOpenAi, Wire::kAnthropic}) {
    std::string_view bytes = wire == Wire::kOpenAi ? test::kOpenAiStream : test::kAnthropicStream;
    Assembled whole = assemble(wire, {bytes});
    REQUIRE(whole.response.has_value());
    std::vector<Delta> whole_deltas = coalesce(whole.deltas);
    for (size_t cut = 0; cut <= bytes.size(); ++cut) {
      Assembled a = assemble(wire, {bytes.substr(0, cut), bytes.substr(cut)});
      INFO(wire_name(wire) << " split at " << cut);
      REQUIRE(a.status.ok());
      REQUIRE(a.response.has_value());
      CHECK(a.response->message == whole.response->message);
      CHECK(a.response->usage == whole.response->usage);
      CHECK(a.response->stop_reason == whole.response->stop_reason);
      CHECK(coalesce(a.deltas) == whole_deltas);
    }
    SECTION("one byte at a time") {
      std::vector<std::string_view> bytewise;
      for (size_t i = 0; i < bytes.size(); ++i) bytewise.push_back(bytes.substr(i, 1));
      Assembled a = assemble(wire, bytewise);
      REQUIRE(a.response.has_value());
      CHECK(a.response->message == whole.response->message);
      CHECK(coalesce(a.deltas) == whole_deltas);
    }
  }
}

TEST_CASE("StreamAssembler: a stream that ends before its terminal event is a cut",
          "[model][unit]") {
  SECTION("anthropic without message_stop") {
    std::string_view bytes = test::kAnthropicStream;
    size_t cut = bytes.find("event: message_delta");
    Assembled a = assemble(Wire::kAnthropic, {bytes.substr(0, cut)});
    REQUIRE(a.status.ok());
    CHECK_FALSE(a.response.has_value());
    CHECK(a.finish_status.code() == Code::kUnavailable);
    CHECK(a.finish_status.message() == "anthropic stream cut after 11 events, before message_stop");
  }
  SECTION("openai in the middle of a tool call") {
    std::string_view bytes = test::kOpenAiStream;
    size_t cut = bytes.rfind("data:", bytes.find("call_b2"));  // before the second call
    Assembled a = assemble(Wire::kOpenAi, {bytes.substr(0, cut)});
    REQUIRE(a.status.ok());
    CHECK(a.finish_status.code() == Code::kUnavailable);
    CHECK(std::string(a.finish_status.message()).find("before [DONE]") != std::string::npos);
  }
  SECTION("openai after finish_reason and a clean end is complete (no [DONE] needed)") {
    std::string_view bytes = test::kOpenAiStream;
    Assembled a = assemble(Wire::kOpenAi, {bytes.substr(0, bytes.find("data: [DONE]"))});
    REQUIRE(a.response.has_value());
    CHECK(a.response->usage.output_tokens == 17);
    SECTION("but not after a read error") {
      Assembled b = assemble(Wire::kOpenAi, {bytes.substr(0, bytes.find("data: [DONE]"))}, false);
      CHECK(b.finish_status.code() == Code::kUnavailable);
    }
  }
}

TEST_CASE("StreamAssembler: an error event inside a 200 stream names the upstream's error",
          "[model][unit]") {
  SECTION("anthropic overloaded") {
    std::string bytes = std::string(test::kAnthropicStream.substr(
                            0, test::kAnthropicStream.find("event: content_block_stop"))) +
                        "event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": "
                        "\"overloaded_error\", \"message\": \"Overloaded\"}}\n\n";
    Assembled a = assemble(Wire::kAnthropic, {bytes});
    CHECK(a.status.code() == Code::kUnavailable);
    CHECK(a.status.message() == "model stream error (overloaded_error): Overloaded");
    CHECK(a.deltas.size() == 2);  // the text that came before stays delivered
  }
  SECTION("openai error chunk") {
    std::string bytes =
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"
        "data: {\"error\":{\"message\":\"The server had an error while processing your "
        "request.\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n";
    Assembled a = assemble(Wire::kOpenAi, {bytes});
    CHECK(a.status.code() == Code::kUnavailable);
    CHECK(a.status.message() ==
          "model stream error (server_error): The server had an error while processing your "
          "request.");
  }
  SECTION("a rate limit inside the stream") {
    Assembled a =
        assemble(Wire::kAnthropic, {"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":"
                                    "\"rate_limit_error\",\"message\":\"slow down\"}}\n\n"});
    CHECK(a.status.code() == Code::kResourceExhausted);
  }
}

TEST_CASE("StreamAssembler: an event that is not JSON is kInvalidArgument", "[model][unit]") {
  Assembled a = assemble(Wire::kOpenAi, {"data: {\"id\": nope\n\n"});
  CHECK(a.status.code() == Code::kInvalidArgument);
  CHECK(a.status.message() == "openai stream: event 1 is not JSON: {\"id\": nope");
}

TEST_CASE("parse_response: whole answers on both wires", "[model][unit]") {
  SECTION("openai") {
    auto r = parse_response(
        Wire::kOpenAi,
        R"({"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o",
            "choices":[{"index":0,"message":{"role":"assistant","content":null,
            "tool_calls":[{"id":"call_1","type":"function","function":{"name":"shell",
            "arguments":"{\"cmd\":\"ls\"}"}}]},"finish_reason":"tool_calls"}],
            "usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}})");
    REQUIRE(r.ok());
    REQUIRE(r->message.parts.size() == 1);
    CHECK(r->message.parts[0] == Part::tool_call_part("call_1", "shell", "{\"cmd\":\"ls\"}"));
    CHECK(r->stop_reason == StopReason::kToolUse);
    CHECK(r->usage == Usage{10, 5, 0, 0});
  }
  SECTION("anthropic") {
    auto r = parse_response(Wire::kAnthropic,
                            R"({"id":"msg_1","type":"message","role":"assistant","model":"claude",
            "content":[{"type":"text","text":"Done."}],"stop_reason":"end_turn",
            "stop_sequence":null,"usage":{"input_tokens":7,"output_tokens":3,
            "cache_read_input_tokens":5,"cache_creation_input_tokens":0}})");
    REQUIRE(r.ok());
    CHECK(r->message.text() == "Done.");
    CHECK(r->stop_reason == StopReason::kEndTurn);
    CHECK(r->usage == Usage{12, 3, 5, 0});
  }
  SECTION("an error body") {
    auto r = parse_response(Wire::kAnthropic,
                            R"({"type":"error","error":{"type":"invalid_request_error",
                                "message":"messages: field required"}})");
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(std::string(r.status().message()).find("messages: field required") != std::string::npos);
  }
  SECTION("not JSON") {
    CHECK(parse_response(Wire::kOpenAi, "<html>").status().code() == Code::kInvalidArgument);
  }
}

TEST_CASE("error_status: HTTP statuses map to codes and keep the gateway's message",
          "[model][unit]") {
  auto st = error_status(429, "Too Many Requests",
                         R"({"error":{"message":"Rate limit reached for gpt-4o","type":"requests",
                             "code":"rate_limit_exceeded"}})");
  CHECK(st.code() == Code::kResourceExhausted);
  CHECK(st.message() ==
        "model gateway answered 429 Too Many Requests (requests): Rate limit reached for gpt-4o");
  CHECK(error_status(401, "Unauthorized",
                     R"({"type":"error","error":{"type":"authentication_error",
                         "message":"invalid x-api-key"}})")
            .code() == Code::kUnauthenticated);
  CHECK(error_status(403, "Forbidden", "").code() == Code::kPermissionDenied);
  CHECK(error_status(400, "Bad Request", "{}").code() == Code::kInvalidArgument);
  CHECK(error_status(500, "Internal Server Error", "oops").code() == Code::kUnavailable);
  CHECK(error_status(529, "", R"({"type":"error","error":{"type":"overloaded_error",
                                  "message":"Overloaded"}})")
            .message() == "model gateway answered 529 (overloaded_error): Overloaded");
  CHECK(error_status(500, "Internal Server Error", "plain text failure").message() ==
        "model gateway answered 500 Internal Server Error: plain text failure");
}

// ---- request bodies -------------------------------------------------------------------

Request tool_round_trip() {
  Request r;
  r.system = "You are helpful.";
  r.tools.push_back(ToolDef{"screenshot", "Takes a screenshot",
                            json{{"type", "object"}, {"properties", json::object()}}, json()});
  r.messages.push_back(Message::user({Part::text_part("What is on screen?")}));
  r.messages.push_back(Message::assistant(
      {Part::text_part("Looking."), Part::tool_call_part("call_1", "screenshot", "{}")}));
  r.messages.push_back(Message::user({Part::tool_result_part(
      "call_1", {Part::text_part("1280x800"), Part::image_part("image/png", "iVBORw0KGgo=")})}));
  return r;
}

TEST_CASE("openai_request_json: tool calls, tool results and images in chat completions form",
          "[model][unit]") {
  ModelInfo vision{"gpt-4o", Wire::kOpenAi, true, 128000};
  auto j = openai_request_json(tool_round_trip(), vision, true);
  REQUIRE(j.ok());
  json want_messages = json::parse(R"([
    {"role":"system","content":"You are helpful."},
    {"role":"user","content":"What is on screen?"},
    {"role":"assistant","content":"Looking.","tool_calls":[{"id":"call_1","type":"function",
      "function":{"name":"screenshot","arguments":"{}"}}]},
    {"role":"tool","tool_call_id":"call_1","content":"1280x800"},
    {"role":"user","content":[{"type":"text","text":"Image output of tool call call_1:"},
      {"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]}
  ])");
  CHECK((*j)["messages"] == want_messages);
  CHECK((*j)["model"] == "gpt-4o");
  CHECK((*j)["stream"] == true);
  CHECK((*j)["stream_options"] == json{{"include_usage", true}});
  CHECK((*j)["tools"][0] == json::parse(R"({"type":"function","function":{"name":"screenshot",
    "description":"Takes a screenshot","parameters":{"type":"object","properties":{}}}})"));

  SECTION("a text-only model gets a note instead of the image") {
    ModelInfo text_only{"gpt-4o-mini", Wire::kOpenAi, false, 128000};
    auto t = openai_request_json(tool_round_trip(), text_only, false);
    REQUIRE(t.ok());
    std::string dumped = t->dump();
    CHECK(dumped.find("image_url") == std::string::npos);
    CHECK(dumped.find("iVBORw0KGgo") == std::string::npos);
    CHECK((*t)["messages"].size() == 4);  // no user message follows the tool message
    CHECK((*t)["messages"][3]["content"] ==
          "1280x800\n[image omitted: image/png, 8 bytes; this model cannot see images]");
    CHECK_FALSE(t->contains("stream"));
  }
}

TEST_CASE("anthropic_request_json: tool_use, tool_result with image content, cache_control",
          "[model][unit]") {
  ModelInfo vision{"claude-sonnet-4-5", Wire::kAnthropic, true, 200000};
  Request r = tool_round_trip();
  r.system_cache_control = json{{"type", "ephemeral"}};
  r.tools[0].cache_control = json{{"type", "ephemeral"}};
  r.messages[0].parts[0].cache_control = json{{"type", "ephemeral"}, {"ttl", "1h"}};
  r.messages[2].parts.push_back(Part::text_part("Also, hurry."));
  std::swap(r.messages[2].parts[0], r.messages[2].parts[1]);  // text first: results go first
  r.messages[2].parts[1].is_error = true;
  auto j = anthropic_request_json(r, vision, true);
  REQUIRE(j.ok());
  json want = json::parse(R"({
    "model":"claude-sonnet-4-5","max_tokens":4096,"stream":true,
    "system":[{"type":"text","text":"You are helpful.","cache_control":{"type":"ephemeral"}}],
    "tools":[{"name":"screenshot","description":"Takes a screenshot",
      "input_schema":{"type":"object","properties":{}},"cache_control":{"type":"ephemeral"}}],
    "messages":[
      {"role":"user","content":[{"type":"text","text":"What is on screen?",
        "cache_control":{"type":"ephemeral","ttl":"1h"}}]},
      {"role":"assistant","content":[{"type":"text","text":"Looking."},
        {"type":"tool_use","id":"call_1","name":"screenshot","input":{}}]},
      {"role":"user","content":[
        {"type":"tool_result","tool_use_id":"call_1","is_error":true,"content":[
          {"type":"text","text":"1280x800"},
          {"type":"image","source":{"type":"base64","media_type":"image/png",
            "data":"iVBORw0KGgo="}}]},
        {"type":"text","text":"Also, hurry."}]}
    ]})");
  CHECK(*j == want);

  SECTION("a text-only model gets a text block instead of the image") {
    ModelInfo text_only{"claude-haiku", Wire::kAnthropic, false, 200000};
    auto t = anthropic_request_json(r, text_only, false);
    REQUIRE(t.ok());
    json content = (*t)["messages"][2]["content"][0]["content"];
    CHECK(content[1] == json{{"type", "text"},
                             {"text",
                              "[image omitted: image/png, 8 bytes; this model "
                              "cannot see images]"}});
    CHECK(t->dump().find("\"image\"") == std::string::npos);
  }
  SECTION("tool arguments that are not a JSON object still make a valid request") {
    Request bad = tool_round_trip();
    bad.messages[1].parts[1].arguments = "{\"cmd\": ";
    auto b = anthropic_request_json(bad, vision, false);
    REQUIRE(b.ok());
    CHECK((*b)["messages"][1]["content"][1]["input"] == json{{"raw_arguments", "{\"cmd\": "}});
  }
}

TEST_CASE("request_body: parts in the wrong role are kInvalidArgument", "[model][unit]") {
  ModelInfo m{"x", Wire::kOpenAi, true, 1000};
  Request r;
  r.messages.push_back(Message::user({Part::tool_call_part("c", "n", "{}")}));
  CHECK(request_body(r, m, true).status().code() == Code::kInvalidArgument);
  m.wire = Wire::kAnthropic;
  CHECK(request_body(r, m, true).status().code() == Code::kInvalidArgument);
  Request r2;
  r2.messages.push_back(Message::assistant({Part::image_part("image/png", "AAAA")}));
  CHECK(request_body(r2, m, true).status().code() == Code::kInvalidArgument);
  Request r3;
  r3.messages.push_back(Message::user({Part::tool_result_part("", {})}));
  CHECK(request_body(r3, m, true).status().code() == Code::kInvalidArgument);
}

TEST_CASE("request_body: invalid UTF-8 from a tool does not fail the request", "[model][unit]") {
  ModelInfo m{"x", Wire::kOpenAi, false, 1000};
  Request r;
  r.messages.push_back(Message::user({Part::text_part(std::string("bin \xff\xfe end"))}));
  auto body = request_body(r, m, false);
  REQUIRE(body.ok());
  CHECK(body->find("bin \xEF\xBF\xBD\xEF\xBF\xBD end") != std::string::npos);
}

TEST_CASE("RequestEncoder: bodies equal request_body byte for byte as a conversation changes",
          "[model][unit]") {
  const ModelInfo models[] = {
      {"gpt-4o", Wire::kOpenAi, true, 128000},
      {"gpt-4o-mini", Wire::kOpenAi, false, 128000},
      {"claude-sonnet-4-5", Wire::kAnthropic, true, 200000},
      {"claude-haiku", Wire::kAnthropic, false, 200000},
  };
  for (const ModelInfo& m : models) {
    for (bool stream : {true, false}) {
      INFO(m.name << " stream " << stream);
      RequestEncoder enc;
      Request r = tool_round_trip();
      r.system_cache_control = json{{"type", "ephemeral"}};
      r.messages[0].parts[0].cache_control = json{{"type", "ephemeral"}};
      auto same = [&] {
        auto want = request_body(r, m, stream);
        auto got = enc.body(r, m, stream);
        REQUIRE(want.ok());
        REQUIRE(got.ok());
        CHECK(*got == *want);
      };
      same();
      // The loop's steps: an assistant turn with a call, then its result.
      r.messages.push_back(Message::assistant({Part::tool_call_part("call_2", "ls", "{}")}));
      same();
      r.messages.push_back(Message::user({Part::tool_result_part(
          "call_2", {Part::text_part("a\nb \xff bad utf-8 \"quoted\"")}, true)}));
      same();
      // A resumed step's results join the last user message; a breakpoint moves.
      r.messages.back().parts.push_back(
          Part::tool_result_part("call_3", {Part::image_part("image/png", "AAAA")}));
      r.messages[0].parts[0].cache_control = json();
      r.messages[2].parts[0].cache_control = json{{"type", "ephemeral"}};
      same();
      // The head changes: system prompt, tools, token cap, temperature.
      r.system = "Other prompt.";
      r.tools.push_back(ToolDef{"ls", "Lists", json(), json{{"type", "ephemeral"}}});
      r.max_tokens = 100;
      r.temperature = 0.5;
      same();
      r.system.clear();
      same();
      // Compaction replaces the history with a shorter one.
      r.messages.erase(r.messages.begin(), r.messages.begin() + 3);
      r.messages.front().parts.insert(r.messages.front().parts.begin(),
                                      Part::text_part("Summary: looked at the screen."));
      same();
      r.messages.clear();
      same();
      // A model on the other wire, then back.
      const ModelInfo& other = m.wire == Wire::kOpenAi ? models[2] : models[0];
      r = tool_round_trip();
      auto want_other = request_body(r, other, stream);
      auto got_other = enc.body(r, other, stream);
      REQUIRE(got_other.ok());
      CHECK(*got_other == *want_other);
      same();
    }
  }
}

TEST_CASE(
    "RequestEncoder: a message that cannot be written fails, and the next good body is "
    "whole",
    "[model][unit]") {
  ModelInfo m{"x", Wire::kAnthropic, true, 1000};
  RequestEncoder enc;
  Request r = tool_round_trip();
  REQUIRE(enc.body(r, m, true).ok());
  r.messages.push_back(Message::user({Part::tool_call_part("c", "n", "{}")}));
  CHECK(enc.body(r, m, true).status().code() == Code::kInvalidArgument);
  r.messages.back() = Message::user({Part::text_part("fine")});
  auto got = enc.body(r, m, true);
  REQUIRE(got.ok());
  CHECK(*got == *request_body(r, m, true));
}

TEST_CASE(
    "RequestEncoder: messages the caller says are unchanged are reused without a compare, and "
    "the rest is compared as before",
    "[model][unit]") {
  for (const ModelInfo& m : {ModelInfo{"gpt-4o", Wire::kOpenAi, true, 128000},
                             ModelInfo{"claude-sonnet-4-5", Wire::kAnthropic, true, 200000}}) {
    INFO(m.name);
    RequestEncoder enc;
    Request r = tool_round_trip();
    REQUIRE(enc.body(r, m, true).ok());
    // The loop's step: it appended messages; everything before went out unchanged.
    size_t unchanged = r.messages.size();
    r.messages.push_back(Message::assistant({Part::tool_call_part("call_2", "ls", "{}")}));
    r.messages.push_back(Message::user({Part::tool_result_part("call_2", {Part::text_part("a")})}));
    auto got = enc.body(r, m, true, unchanged);
    REQUIRE(got.ok());
    CHECK(*got == *request_body(r, m, true));
    // The promise is taken as given: a message changed under it is not looked at...
    const Request before = r;
    r.messages[0].parts[0].text = "CHANGED";
    auto trusted = enc.body(r, m, true, r.messages.size());
    REQUIRE(trusted.ok());
    CHECK(*trusted == *request_body(before, m, true));
    // ...while without it the change is seen.
    auto compared = enc.body(r, m, true);
    REQUIRE(compared.ok());
    CHECK(*compared == *request_body(r, m, true));
    // More unchanged messages than the encoder holds (a fresh one): all are written.
    RequestEncoder fresh;
    auto whole = fresh.body(r, m, true, r.messages.size());
    REQUIRE(whole.ok());
    CHECK(*whole == *request_body(r, m, true));
  }
}

TEST_CASE(
    "RequestEncoder: pieces are request_body byte for byte, and a step that appends keeps the "
    "messages' text and only adds to it",
    "[model][unit]") {
  for (const ModelInfo& m : {ModelInfo{"gpt-4o", Wire::kOpenAi, true, 128000},
                             ModelInfo{"gpt-4o-mini", Wire::kOpenAi, false, 128000},
                             ModelInfo{"claude-sonnet-4-5", Wire::kAnthropic, true, 200000}}) {
    for (bool with_system : {true, false}) {
      INFO(m.name << " system " << with_system);
      RequestEncoder enc;
      Request r = tool_round_trip();
      if (!with_system) r.system.clear();
      auto check = [&](size_t unchanged) -> std::string {
        auto want = request_body(r, m, true);
        REQUIRE(want.ok());
        auto got = enc.pieces(r, m, true, unchanged);
        REQUIRE(got.ok());
        size_t total = 0;
        for (std::string_view p : got->pieces) {
          CHECK_FALSE(p.empty());
          total += p.size();
        }
        CHECK(total == got->size);
        CHECK(got->joined() == *want);
        // The messages are one piece (the longest once the conversation is long).
        std::string_view longest;
        for (std::string_view p : got->pieces)
          if (p.size() > longest.size()) longest = p;
        return std::string(longest);
      };
      std::string before = check(0);
      for (int step = 0; step < 200; ++step) {
        const size_t unchanged = r.messages.size();
        const std::string id = "call_" + std::to_string(step + 2);
        r.messages.push_back(Message::assistant({Part::tool_call_part(id, "ls", "{}")}));
        r.messages.push_back(
            Message::user({Part::tool_result_part(id, {Part::text_part(std::string(300, 'x'))})}));
        std::string after = check(unchanged);
        if (step > 0) {
          REQUIRE(after.size() > before.size());
          CHECK(after.compare(0, before.size(), before) == 0);
        }
        before = std::move(after);
      }
      // A change in the middle, then fewer messages: later equal messages are kept, and the
      // result is still byte for byte.
      r.messages[0].parts[0].text = "changed";
      check(0);
      r.messages.erase(r.messages.begin() + 1, r.messages.begin() + 5);
      check(0);
      r.messages.resize(2);
      check(0);
      r.messages.clear();
      check(0);
    }
  }
}

}  // namespace
}  // namespace cb::model
