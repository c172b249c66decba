#pragma once
// Token usage read from a response that is relayed as bytes, for the api's model door: the
// door forwards the gateway's answer to the box untouched and feeds the same bytes here to
// record what the call cost the user (issue 6, item 3). Works for both wires, streamed or not.
//
//   UsageMeter meter(Wire::kAnthropic, is_event_stream(content_type));
//   for each piece relayed: meter.feed(piece);
//   meter.finish();
//   record(meter.usage());
//
// Thread-safety: a UsageMeter is a plain value used by one caller at a time.

#include "http/sse.h"
#include "model/conversation.h"
#include "model/wire.h"

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace cb::model {

// True when |content_type| is text/event-stream (parameters and case ignored).
bool is_event_stream(std::string_view content_type);

// The wire a request path names: ".../v1/chat/completions" or ".../v1/messages" (a query is
// ignored). nullopt for any other path.
std::optional<Wire> wire_for_path(std::string_view path);

class UsageMeter {
 public:
  // A JSON body over this size is not buffered further (its usage is then unknown).
  static constexpr size_t kMaxJsonBody = 32u << 20;

  UsageMeter(Wire wire, bool event_stream);

  // The next bytes of the response body, as relayed. Malformed input never fails the relay:
  // it only leaves the usage incomplete (see status()).
  void feed(std::string_view bytes);
  // The body ended. A JSON body is parsed here.
  void finish();

  // Usage found so far: for a stream, what the events reported up to now (Anthropic reports
  // input tokens at the start, OpenAI everything in its last chunk); for a JSON body, zero
  // until finish().
  Usage usage() const;
  // True once the whole response was seen: the stream's terminal event, or a JSON body that
  // parsed.
  bool complete() const;
  // Ok, or what went wrong: an error the upstream reported (in the body or inside the
  // stream), or a body that was not the wire's shape.
  Status status() const { return status_; }

 private:
  Wire wire_;
  bool event_stream_;
  http::SseParser parser_;
  std::unique_ptr<StreamAssembler> assembler_;
  std::string body_;
  bool overflow_ = false;
  bool parsed_ = false;
  Usage json_usage_;
  Status status_;
};

// One-shot: the usage in a complete response body. Errors as UsageMeter::status().
Result<Usage> usage_from_body(Wire wire, std::string_view content_type, std::string_view body);

}  // namespace cb::model
