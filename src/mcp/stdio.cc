#include "mcp/stdio.h"

#include "base/log.h"
#include "net/errors.h"
#include "net/signal.h"

#include <deque>
#include <fcntl.h>
#include <memory>
#include <unistd.h>
#include <utility>

namespace cb::mcp {

// ---- LineSplitter

std::vector<LineSplitter::Line> LineSplitter::feed(std::string_view bytes) {
  std::vector<Line> lines;
  while (!bytes.empty()) {
    size_t nl = bytes.find('\n');
    std::string_view piece = bytes.substr(0, nl);
    if (!discarding_) {
      if (partial_.size() + piece.size() > max_) {
        discarding_ = true;
        partial_.clear();
      } else {
        partial_.append(piece);
      }
    }
    if (nl == std::string_view::npos) break;
    bytes.remove_prefix(nl + 1);
    Line line;
    if (discarding_) {
      line.too_long = true;
      discarding_ = false;
    } else {
      if (!partial_.empty() && partial_.back() == '\r') partial_.pop_back();
      line.text = std::move(partial_);
    }
    partial_.clear();
    lines.push_back(std::move(line));
  }
  return lines;
}

std::vector<LineSplitter::Line> LineSplitter::finish() {
  std::vector<Line> lines;
  if (discarding_) {
    Line line;
    line.too_long = true;
    lines.push_back(std::move(line));
  } else if (!partial_.empty()) {
    Line line;
    if (partial_.back() == '\r') partial_.pop_back();
    line.text = std::move(partial_);
    lines.push_back(std::move(line));
  }
  partial_.clear();
  discarding_ = false;
  return lines;
}

namespace {

using Descriptor = net::Token::as_default_on_t<asio::posix::stream_descriptor>;

bool blank(std::string_view s) { return s.find_first_not_of(" \t\r") == std::string_view::npos; }

// One stdio session: a reader coroutine that parses lines and starts a coroutine per request,
// and a writer coroutine that drains the output queue.
class StdioConnection final : public RequestChannel, public SessionOutlet {
 public:
  StdioConnection(Server& server, net::Executor ex, StdioOptions options)
      : server_(server),
        executor_(ex),
        options_(options),
        in_(ex),
        out_(ex),
        out_signal_(ex),
        space_signal_(ex),
        tasks_signal_(ex) {}

  asio::awaitable<Status> run() {
    co_await asio::this_coro::throw_if_cancelled(false);
    Status opened = open();
    if (!opened.ok()) co_return opened;
    session_ = server_.open_session(executor_, *this, "");
    {
      using namespace asio::experimental::awaitable_operators;
      co_await (reader() && writer());
    }
    session_.reset();
    restore();
    co_return end_status_;
  }

  // RequestChannel
  asio::awaitable<Status> send(const Message& message) override {
    std::string line = serialize(message);
    line.push_back('\n');
    while (queued_bytes_ > options_.max_queued_bytes && !writer_done_) {
      Status waited = co_await space_signal_.wait();
      if (!waited.ok()) co_return waited;
    }
    if (writer_done_) co_return unavailable("stdio output closed");
    enqueue(std::move(line));
    co_return ok_status();
  }

  // SessionOutlet
  void post(Message message) override {
    if (writer_done_) return;
    std::string line = serialize(message);
    line.push_back('\n');
    enqueue(std::move(line));
  }

 private:
  Status open() {
    int in = ::dup(options_.in_fd);
    int out = ::dup(options_.out_fd);
    if (in < 0 || out < 0) {
      if (in >= 0) ::close(in);
      if (out >= 0) ::close(out);
      return unavailable("stdio: dup failed");
    }
    // O_NONBLOCK belongs to the open file description, shared with the original descriptors
    // (and with whoever else holds them): remember it to put it back.
    in_flags_ = ::fcntl(in, F_GETFL);
    out_flags_ = ::fcntl(out, F_GETFL);
    std::error_code ec;
    in_.assign(in, ec);
    if (!ec) out_.assign(out, ec);
    if (ec) return net::to_status(ec, "stdio");
    return ok_status();
  }

  void restore() {
    if (in_.is_open()) {
      if (in_flags_ >= 0) ::fcntl(in_.native_handle(), F_SETFL, in_flags_);
      std::error_code ec;
      in_.close(ec);
    }
    if (out_.is_open()) {
      if (out_flags_ >= 0) ::fcntl(out_.native_handle(), F_SETFL, out_flags_);
      std::error_code ec;
      out_.close(ec);
    }
  }

  void enqueue(std::string line) {
    queued_bytes_ += line.size();
    queue_.push_back(std::move(line));
    out_signal_.notify();
  }

  asio::awaitable<void> reader() {
    co_await asio::this_coro::throw_if_cancelled(false);
    LineSplitter splitter(options_.max_line_bytes);
    std::string buffer(64 * 1024, '\0');
    bool eof = false;
    while (!writer_done_) {
      auto [ec, n] = co_await in_.async_read_some(asio::buffer(buffer));
      if (ec == asio::error::eof) {
        eof = true;
        for (auto& line : splitter.finish()) handle_line(std::move(line));
        break;
      }
      if (ec) {
        if (ec != asio::error::operation_aborted) {
          log::warn("mcp stdio read failed", {{"error", ec.message()}});
          if (end_status_.ok()) end_status_ = net::to_status(ec, "stdio read");
        } else if (end_status_.ok()) {
          end_status_ = cancelled("stdio transport cancelled");
        }
        break;
      }
      for (auto& line : splitter.feed(std::string_view(buffer.data(), n))) {
        handle_line(std::move(line));
      }
    }
    // Requests in progress hold references to this connection: wait for every one. At the end
    // of the input they finish normally and their responses are written; otherwise (output
    // failed, cancelled) the session cancels them.
    if (!eof) session_->close();
    co_await asio::this_coro::reset_cancellation_state();
    while (tasks_ > 0) {
      Status waited = co_await tasks_signal_.wait();
      if (!waited.ok()) break;
    }
    session_->close();
    finishing_ = true;
    out_signal_.notify();
  }

  asio::awaitable<void> writer() {
    co_await asio::this_coro::throw_if_cancelled(false);
    for (;;) {
      if (!queue_.empty()) {
        std::string data;
        while (!queue_.empty()) {
          data += queue_.front();
          queue_.pop_front();
        }
        auto [ec, n] = co_await asio::async_write(out_, asio::buffer(data));
        queued_bytes_ -= std::min(queued_bytes_, data.size());
        space_signal_.notify();
        if (ec) {
          if (end_status_.ok()) end_status_ = net::to_status(ec, "stdio write");
          break;
        }
        continue;
      }
      if (finishing_) break;
      Status waited = co_await out_signal_.wait();
      if (!waited.ok()) {
        if (end_status_.ok()) end_status_ = cancelled("stdio transport cancelled");
        break;
      }
    }
    writer_done_ = true;
    queue_.clear();
    queued_bytes_ = 0;
    space_signal_.notify();
    // Stop reading: nothing we answer can reach the client any more.
    if (!finishing_) {
      std::error_code ec;
      in_.cancel(ec);
    }
  }

  void handle_line(LineSplitter::Line line) {
    if (line.too_long) {
      post(Message::error_response(nullptr, rpc_error(kInvalidRequest, "message too large")));
      return;
    }
    if (blank(line.text)) return;
    Payload payload = parse_payload(line.text, server_.options().limits);
    if (payload.batch) {
      if (!session_->batches_allowed()) {
        post(Message::error_response(
            nullptr,
            rpc_error(kInvalidRequest,
                      "JSON-RPC batches are not supported by protocol version " +
                          (session_->protocol_version().empty() ? std::string("(not initialized)")
                                                                : session_->protocol_version()))));
        return;
      }
      spawn(run_batch(std::move(payload.messages)));
      return;
    }
    Message& m = payload.messages[0];
    switch (m.kind) {
      case MessageKind::kInvalid:
        post(std::move(m));
        return;
      case MessageKind::kNotification:
        session_->handle_notification(m);
        return;
      case MessageKind::kResponse:
      case MessageKind::kErrorResponse:
        return;  // we send no requests, so there is nothing to match
      case MessageKind::kRequest:
        spawn(run_request(std::move(m)));
        return;
    }
  }

  // Starts a request coroutine. |this| outlives it: reader() waits for tasks_ to reach zero
  // before run() returns.
  void spawn(asio::awaitable<void> task) {
    ++tasks_;
    asio::co_spawn(executor_, std::move(task), [this](std::exception_ptr e) {
      if (e) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          log::error("mcp stdio request threw", {{"what", ex.what()}});
        }
      }
      --tasks_;
      tasks_signal_.notify();
    });
  }

  asio::awaitable<void> run_request(Message request) {
    co_await asio::this_coro::throw_if_cancelled(false);
    std::optional<Message> response =
        co_await session_->handle_request(std::move(request), *this, transport_);
    if (response) {
      Status sent = co_await send(*response);
      (void)sent;  // the writer records why output failed
    }
  }

  // A 2025-03-26 batch: its requests run one after another; the responses go out as one
  // array (nothing when it held only notifications and responses).
  asio::awaitable<void> run_batch(std::vector<Message> messages) {
    co_await asio::this_coro::throw_if_cancelled(false);
    std::vector<Message> responses;
    for (Message& m : messages) {
      if (m.kind == MessageKind::kInvalid) {
        responses.push_back(std::move(m));
      } else if (m.kind == MessageKind::kNotification) {
        session_->handle_notification(m);
      } else if (m.kind == MessageKind::kRequest) {
        if (m.method == kInitialize) {
          responses.push_back(Message::error_response(
              m.id, rpc_error(kInvalidRequest, "initialize must not be part of a batch")));
          continue;
        }
        std::optional<Message> response =
            co_await session_->handle_request(std::move(m), *this, transport_);
        if (response) responses.push_back(std::move(*response));
      }
    }
    if (responses.empty() || writer_done_) co_return;
    std::string line = serialize_batch(responses);
    line.push_back('\n');
    enqueue(std::move(line));
  }

  Server& server_;
  net::Executor executor_;
  StdioOptions options_;
  Descriptor in_;
  Descriptor out_;
  int in_flags_ = -1;
  int out_flags_ = -1;
  std::unique_ptr<ServerSession> session_;
  TransportContext transport_;

  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;
  net::Signal out_signal_;    // the queue got data, or finishing_ was set
  net::Signal space_signal_;  // the queue shrank, or the writer stopped
  bool finishing_ = false;    // the reader is done: the writer drains and stops
  bool writer_done_ = false;

  size_t tasks_ = 0;
  net::Signal tasks_signal_;
  Status end_status_;
};

}  // namespace

asio::awaitable<Status> serve_stdio(Server& server, net::Executor executor, StdioOptions options) {
  StdioConnection connection(server, executor, options);
  co_return co_await connection.run();
}

}  // namespace cb::mcp
