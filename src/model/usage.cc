#include "model/usage.h"

#include <algorithm>
#include <cctype>

namespace cb::model {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

bool is_event_stream(std::string_view content_type) {
  std::string t = lower(content_type.substr(0, content_type.find(';')));
  while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.pop_back();
  while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.erase(0, 1);
  return t == "text/event-stream";
}

std::optional<Wire> wire_for_path(std::string_view path) {
  path = path.substr(0, path.find('?'));
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  if (ends_with(path, "/v1/chat/completions")) return Wire::kOpenAi;
  if (ends_with(path, "/v1/messages")) return Wire::kAnthropic;
  return std::nullopt;
}

UsageMeter::UsageMeter(Wire wire, bool event_stream)
    : wire_(wire), event_stream_(event_stream), assembler_(make_stream_assembler(wire)) {}

void UsageMeter::feed(std::string_view bytes) {
  if (!event_stream_) {
    if (overflow_ || body_.size() + bytes.size() > kMaxJsonBody) {
      overflow_ = true;
      body_.clear();
      return;
    }
    body_.append(bytes);
    return;
  }
  if (!status_.ok()) return;
  auto events = parser_.feed(bytes);
  if (!events.ok()) {
    status_ = events.status();
    return;
  }
  std::vector<Delta> ignored;
  for (const http::SseEvent& e : *events) {
    Status st = assembler_->on_event(e, ignored);
    ignored.clear();
    if (!st.ok()) {
      status_ = st;
      return;
    }
  }
}

void UsageMeter::finish() {
  if (event_stream_ || parsed_) return;
  parsed_ = true;
  if (overflow_) {
    status_ = resource_exhausted("response body too large to read its usage");
    return;
  }
  auto r = parse_response(wire_, body_);
  body_.clear();
  if (!r.ok()) {
    status_ = r.status();
    return;
  }
  json_usage_ = r->usage;
}

Usage UsageMeter::usage() const { return event_stream_ ? assembler_->usage() : json_usage_; }

bool UsageMeter::complete() const {
  if (event_stream_) return status_.ok() && assembler_->done();
  return parsed_ && status_.ok();
}

Result<Usage> usage_from_body(Wire wire, std::string_view content_type, std::string_view body) {
  UsageMeter meter(wire, is_event_stream(content_type));
  meter.feed(body);
  meter.finish();
  if (!meter.status().ok()) return meter.status();
  return meter.usage();
}

}  // namespace cb::model
