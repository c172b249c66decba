#include "model/usage.h"

#include "unit/model/recorded_streams.h"

#include <catch2/catch.hpp>

#include <string>

namespace cb::model {
namespace {

TEST_CASE("UsageMeter: usage from relayed stream bytes on both wires", "[model][unit]") {
  SECTION("openai, fed in 7-byte pieces") {
    UsageMeter meter(Wire::kOpenAi, true);
    std::string_view s = test::kOpenAiStream;
    for (size_t i = 0; i < s.size(); i += 7) {
      CHECK_FALSE(meter.complete());
      meter.feed(s.substr(i, 7));
    }
    meter.finish();
    CHECK(meter.complete());
    CHECK(meter.status().ok());
    CHECK(meter.usage() == Usage{82, 17, 64, 0});
  }
  SECTION("anthropic: input tokens are known from message_start on") {
    UsageMeter meter(Wire::kAnthropic, true);
    std::string_view s = test::kAnthropicStream;
    meter.feed(s.substr(0, s.find("event: content_block_start")));
    CHECK(meter.usage() == Usage{592, 2, 100, 20});
    meter.feed(s.substr(s.find("event: content_block_start")));
    CHECK(meter.complete());
    CHECK(meter.usage() == Usage{592, 89, 100, 20});
  }
  SECTION("an error inside the stream is reported, usage so far kept") {
    UsageMeter meter(Wire::kAnthropic, true);
    std::string_view s = test::kAnthropicStream;
    meter.feed(s.substr(0, s.find("event: ping")));
    meter.feed(
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\","
        "\"message\":\"Overloaded\"}}\n\n");
    CHECK_FALSE(meter.complete());
    CHECK(meter.status().code() == Code::kUnavailable);
    CHECK(meter.usage().input_tokens == 592);
  }
}

TEST_CASE("UsageMeter: usage from a whole JSON body", "[model][unit]") {
  std::string body =
      R"({"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],
          "stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":4}})";
  UsageMeter meter(Wire::kAnthropic, false);
  meter.feed(body.substr(0, 10));
  meter.feed(body.substr(10));
  CHECK(meter.usage() == Usage{});
  meter.finish();
  CHECK(meter.complete());
  CHECK(meter.usage() == Usage{3, 4, 0, 0});

  auto u = usage_from_body(Wire::kOpenAi, "application/json; charset=utf-8",
                           R"({"choices":[{"index":0,"message":{"role":"assistant",
                               "content":"hi"},"finish_reason":"stop"}],
                               "usage":{"prompt_tokens":9,"completion_tokens":1,
                               "prompt_tokens_details":{"cached_tokens":8}}})");
  REQUIRE(u.ok());
  CHECK(*u == Usage{9, 1, 8, 0});
  auto from_sse = usage_from_body(Wire::kOpenAi, "Text/Event-Stream", test::kOpenAiStream);
  REQUIRE(from_sse.ok());
  CHECK(from_sse->output_tokens == 17);
  CHECK(usage_from_body(Wire::kOpenAi, "application/json", R"({"error":{"message":"no"}})")
            .status()
            .code() != Code::kOk);
}

TEST_CASE("wire_for_path: the door tells the wire from the request path", "[model][unit]") {
  CHECK(wire_for_path("/v1/chat/completions") == Wire::kOpenAi);
  CHECK(wire_for_path("/api/v1/chat/completions?x=1") == Wire::kOpenAi);
  CHECK(wire_for_path("/v1/messages") == Wire::kAnthropic);
  CHECK(wire_for_path("/v1/messages/count_tokens") == std::nullopt);
  CHECK(wire_for_path("/v1/models") == std::nullopt);
  CHECK(is_event_stream("text/event-stream; charset=utf-8"));
  CHECK_FALSE(is_event_stream("application/json"));
}

}  // namespace
}  // namespace cb::model
