#include "http/sse.h"

#include <fmt/format.h>

#include <charconv>

namespace cb::http {

namespace {

constexpr std::string_view kBom = "\xEF\xBB\xBF";

// Calls |line| for each line of |text|, split at CRLF, LF or CR. An empty |text| is one
// empty line.
template <typename F>
void for_each_line(std::string_view text, F line) {
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\r' && text[i] != '\n') continue;
    line(text.substr(start, i - start));
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
    start = i + 1;
  }
  line(text.substr(start));
}

asio::awaitable<Status> ready(Status status) { co_return status; }

// Keeps |text| alive in this frame while the write is awaited.
asio::awaitable<Status> write_owned(ServerRequest* req, std::string text, bool end_stream) {
  Status st = co_await req->write(text, end_stream);
  co_return st;
}

Headers sse_headers(Headers extra) {
  Headers h;
  h.reserve(extra.size() + 2);
  h.push_back(Header{std::string("content-type"), std::string("text/event-stream")});
  h.push_back(Header{std::string("cache-control"), std::string("no-cache")});
  for (auto& e : extra) h.push_back(std::move(e));
  return h;
}

}  // namespace

Result<std::string> format_sse_event(std::string_view event, std::string_view data,
                                     std::string_view id) {
  if (event.find_first_of("\r\n") != std::string_view::npos)
    return invalid_argument("sse event name contains CR or LF");
  if (id.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos)
    return invalid_argument("sse id contains CR, LF or NUL");
  std::string out;
  out.reserve(event.size() + id.size() + data.size() + 32);
  if (!event.empty()) out += fmt::format("event: {}\n", event);
  if (!id.empty()) out += fmt::format("id: {}\n", id);
  for_each_line(data, [&](std::string_view line) {
    out += "data: ";
    out += line;
    out += '\n';
  });
  out += '\n';
  return out;
}

asio::awaitable<Result<SseWriter>> SseWriter::start(ServerRequest& req, Headers extra) {
  Headers h = sse_headers(std::move(extra));
  Status st = co_await req.send_headers(200, h, false);
  if (!st.ok()) co_return st;
  co_return SseWriter(req);
}

asio::awaitable<Status> SseWriter::send(std::string_view event, std::string_view data,
                                        std::string_view id) {
  auto text = format_sse_event(event, data, id);
  if (!text.ok()) return ready(text.status());
  return write_owned(req_, std::move(*text), false);
}

asio::awaitable<Status> SseWriter::comment(std::string_view text) {
  std::string out;
  for_each_line(text, [&](std::string_view line) {
    out += ": ";
    out += line;
    out += '\n';
  });
  return write_owned(req_, std::move(out), false);
}

asio::awaitable<Status> SseWriter::retry(std::chrono::milliseconds interval) {
  return write_owned(req_, fmt::format("retry: {}\n", interval.count()), false);
}

asio::awaitable<Status> SseWriter::close() { return write_owned(req_, std::string(), true); }

Result<std::vector<SseEvent>> SseParser::feed(std::string_view bytes) {
  if (!error_.ok()) return error_;
  std::vector<SseEvent> out;
  size_t i = 0;
  if (!bom_done_) {
    // The BOM may arrive split across calls: hold the first bytes until they decide.
    while (i < bytes.size() && bom_prefix_.size() < kBom.size() &&
           kBom.substr(0, bom_prefix_.size() + 1) == bom_prefix_ + bytes[i]) {
      bom_prefix_ += bytes[i++];
    }
    if (bom_prefix_.size() < kBom.size() && i == bytes.size()) return out;
    bom_done_ = true;
    if (bom_prefix_ != kBom && !bom_prefix_.empty()) {
      std::string held = std::move(bom_prefix_);
      bom_prefix_.clear();
      auto first = feed(held);
      if (!first.ok()) return first;
      out = std::move(*first);
    }
  }
  for (; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (c == '\n' && after_cr_) {
      after_cr_ = false;  // the LF of a CRLF
      continue;
    }
    after_cr_ = c == '\r';
    if (c == '\r' || c == '\n') {
      Status st = process_line(out);
      if (!st.ok()) return error_ = st;
      continue;
    }
    if (line_.size() >= max_event_bytes_)
      return error_ =
                 resource_exhausted(fmt::format("sse line longer than {} bytes", max_event_bytes_));
    line_ += c;
  }
  return out;
}

Status SseParser::process_line(std::vector<SseEvent>& out) {
  std::string line = std::move(line_);
  line_.clear();
  if (line.empty()) {
    dispatch(out);
    return ok_status();
  }
  if (line.front() == ':') return ok_status();  // comment
  std::string_view name = line;
  std::string_view value;
  if (size_t colon = line.find(':'); colon != std::string::npos) {
    name = std::string_view(line).substr(0, colon);
    value = std::string_view(line).substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (name == "event") {
    type_ = value;
  } else if (name == "data") {
    if (data_.size() + value.size() + 1 > max_event_bytes_)
      return resource_exhausted(
          fmt::format("sse event data longer than {} bytes", max_event_bytes_));
    data_ += value;
    data_ += '\n';
  } else if (name == "id") {
    if (value.find('\0') == std::string_view::npos) id_buffer_ = value;
  } else if (name == "retry") {
    uint64_t ms = 0;
    auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), ms);
    bool digits_only =
        !value.empty() && value.find_first_not_of("0123456789") == std::string_view::npos;
    if (digits_only && ec == std::errc() && p == value.data() + value.size())
      retry_ = std::chrono::milliseconds(ms);
  }
  return ok_status();
}

void SseParser::dispatch(std::vector<SseEvent>& out) {
  last_event_id_ = id_buffer_;
  if (data_.empty()) {
    type_.clear();
    return;
  }
  data_.pop_back();  // the LF after the last data line
  SseEvent e;
  if (!type_.empty()) e.type = std::move(type_);
  e.data = std::move(data_);
  e.last_event_id = last_event_id_;
  out.push_back(std::move(e));
  data_.clear();
  type_.clear();
}

}  // namespace cb::http
