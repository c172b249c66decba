#pragma once
// The two native wires, sans-I/O (house style H13): request bodies out, response bodies and
// server-sent events in. client.h moves the bytes; the api's model door uses usage.h, which
// is built on the assemblers here. README.md §Mapping lists how each Part travels.
//
//   OpenAI chat completions   POST {prefix}/v1/chat/completions
//   Anthropic messages        POST {prefix}/v1/messages   (anthropic-version: 2023-06-01)
//
// Thread-safety: plain functions and values.

#include "base/result.h"
#include "http/sse.h"
#include "model/conversation.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cb::model {

inline constexpr std::string_view kAnthropicVersion = "2023-06-01";

// "/v1/chat/completions" or "/v1/messages".
std::string_view wire_path(Wire wire);

// The JSON body for |request| to |model| on the model's wire. With |stream| the body asks for
// server-sent events (OpenAI also asks for the usage chunk: stream_options.include_usage).
// Images go to a model without vision as a text note instead (README.md §Images).
// Errors: kInvalidArgument when the conversation cannot be expressed (a part kind in the
// wrong role, a tool result without a call id, an image without data).
Result<std::string> request_body(const Request& request, const ModelInfo& model, bool stream);
// The same as a JSON value, for tests and for the summarize helper.
Result<nlohmann::json> openai_request_json(const Request& request, const ModelInfo& model,
                                           bool stream);
Result<nlohmann::json> anthropic_request_json(const Request& request, const ModelInfo& model,
                                              bool stream);

// request_body(), byte for byte, for a conversation that grows: keeps each message's
// serialized JSON (and the rest of the body) from the previous call, so a request that only
// gained messages since then costs the new ones plus copying the text, instead of rebuilding
// and re-serializing the whole history every model step. A message is reused only while it
// compares equal to the one it was written from; a change in the model's wire or vision
// drops everything.
//
// Thread-safety: a plain value; one caller at a time. Movable and copyable.
class RequestEncoder {
 public:
  // The body as a few pieces of the encoder's own text that, written one after the other,
  // are request_body() byte for byte: the head up to the messages, the system message, the
  // messages (kept as one text that a step only appends to), the rest of the head. A
  // sender writes them as they are instead of copying the whole conversation into one
  // string each step (client.h). Valid until the encoder's next call or its destruction.
  struct Pieces {
    std::vector<std::string_view> pieces;  // none empty
    size_t size = 0;                       // their total length
    std::string joined() const;            // the body as one string
  };

  // As request_body(). Errors: as request_body() (the cache then keeps only the messages
  // before the one that failed).
  // |unchanged|: the caller's promise that request.messages[0, unchanged) are the messages
  // of the previous call, unchanged (a loop that only appended since): those are not
  // compared again, which otherwise costs a pass over the whole conversation. 0: compare all.
  Result<std::string> body(const Request& request, const ModelInfo& model, bool stream,
                           size_t unchanged = 0);
  // The same body as pieces (see Pieces), without copying the conversation.
  Result<Pieces> pieces(const Request& request, const ModelInfo& model, bool stream,
                        size_t unchanged = 0);

 private:
  struct Entry {
    Message message;  // as it was written
    // Its wire message(s), comma-separated, are messages_[begin, end) (empty: nothing
    // written); messages_[start, begin) is the comma before them, if any.
    size_t start = 0;
    size_t begin = 0;
    size_t end = 0;
  };
  bool head_matches(const Request& request, const ModelInfo& model, bool stream) const;
  // Appends |json| as the next entry's text to messages_.
  void append_entry(Entry& entry, std::string_view json);

  Wire wire_ = Wire::kOpenAi;
  bool vision_ = false;
  std::vector<Entry> entries_;
  bool have_head_ = false;
  Request head_request_;  // the fields of the head, without messages
  ModelInfo head_model_;
  bool stream_ = false;
  std::string head_prefix_;      // the body up to and including the messages' '['
  std::string head_suffix_;      // from the messages' ']' to the end
  std::string system_fragment_;  // OpenAI: the system message
  std::string messages_;         // the entries' texts, comma-separated, in order
};

// The text a model without vision sees in place of an image.
std::string image_omitted_note(const Part& image);

// Parses a whole (non-streaming) response body: an OpenAI chat.completion object or an
// Anthropic message object. Errors: kInvalidArgument (not the wire's shape), or the error the
// body carries ({"error":{...}}) mapped as error_status().
Result<Response> parse_response(Wire wire, std::string_view body);

// Sans-I/O assembly of one streamed response: feed each SseEvent (http::SseParser does the
// bytes), collect the deltas, and take the Response once the stream ended.
class StreamAssembler {
 public:
  virtual ~StreamAssembler() = default;

  // Handles one event and appends what it revealed to |deltas|. Errors: the upstream's error
  // event (an error inside a 200 stream), mapped as error_status() and prefixed "model stream
  // error"; kInvalidArgument for an event that is not the wire's JSON. Errors are sticky.
  virtual Status on_event(const http::SseEvent& event, std::vector<Delta>& deltas) = 0;
  // True once the wire's terminal event arrived (OpenAI "[DONE]", Anthropic message_stop).
  virtual bool done() const = 0;
  // The assembled response. |clean_end| says the HTTP body ended normally (not a read error).
  // Errors: kUnavailable "stream cut ..." when the terminal event never came (OpenAI: a clean
  // end after a finish_reason is accepted, since some compatible servers omit "[DONE]").
  virtual Result<Response> finish(bool clean_end) = 0;
  // Usage seen so far (complete once done()).
  virtual const Usage& usage() const = 0;
  // Events handled so far, for error messages.
  virtual size_t events() const = 0;
};
std::unique_ptr<StreamAssembler> make_stream_assembler(Wire wire);

// The error an upstream reported, as a Status: |http_status| (0 inside a 200 stream) and the
// wire's error object ({"type","message"} for Anthropic; {"message","type","code"} for
// OpenAI). The message names the status and includes the upstream's message. Codes:
//   400/413/422 invalid_request_error          -> kInvalidArgument
//   401 authentication_error                   -> kUnauthenticated
//   403 permission_error                       -> kPermissionDenied
//   404 not_found_error                        -> kNotFound
//   408                                        -> kDeadlineExceeded
//   429 rate_limit_error                       -> kResourceExhausted
//   500, 502-504, 529, api_error, overloaded   -> kUnavailable
//   anything else                              -> kUnknown
Status error_status(int http_status, std::string_view reason, std::string_view body);

// The message the upstream put in an error body ({"error":{"message":...}} on both wires), or
// the body itself (first 300 bytes) when it is not that shape.
std::string error_message_from_body(std::string_view body);

}  // namespace cb::model
