#include "roles/cli/chat.h"

#include "base/log.h"
#include "client/config.h"
#include "client/connect.h"
#include "client/endpoint.h"
#include "cocoonbox/agent/v1/agents.cbgrpc.h"
#include "cocoonbox/agent/v1/session.cbgrpc.h"
#include "net/asio.h"
#include "net/signal.h"
#include "roles/cli/failure.h"

#include <asio/post.hpp>
#include <asio/signal_set.hpp>
#include <fmt/format.h>

#include <cctype>
#include <csignal>
#include <cstdio>
#include <deque>
#include <fcntl.h>
#include <iostream>
#include <optional>
#include <random>
#include <thread>
#include <unistd.h>

namespace cb::cli {

namespace pb = ::cocoonbox::agent::v1;
using nlohmann::json;

namespace {

constexpr int kCancelledExit = 130;

// Cuts |s| to |width| characters (bytes; never inside a UTF-8 sequence) with "…".
std::string cut(std::string s, size_t width) {
  if (s.size() <= width) return s;
  size_t n = width;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
  return s + "…";
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  return s;
}

// The first non-empty line of a tool result's text blocks.
std::string first_line(const json& content) {
  if (!content.is_array()) return {};
  for (const auto& block : content) {
    if (block.value("type", "") != "text") {
      if (block.contains("type")) return fmt::format("[{}]", block.value("type", ""));
      continue;
    }
    std::string text = block.value("text", "");
    size_t from = 0;
    while (from < text.size()) {
      size_t nl = text.find('\n', from);
      std::string line = text.substr(from, nl == std::string::npos ? std::string::npos : nl - from);
      if (line.find_first_not_of(" \t\r") != std::string::npos) return line;
      if (nl == std::string::npos) break;
      from = nl + 1;
    }
  }
  return {};
}

json turn_json(const pb::Turn& t) {
  if (t.id().empty()) return nullptr;
  return {{"id", t.id()}, {"state", turn_state_name(t.state())}, {"error", t.error()}};
}

json agent_json(const pb::Agent& a) {
  return {{"id", a.id()},
          {"name", a.name()},
          {"model", a.model()},
          {"created_unix_ms", a.created_unix_ms()},
          {"last_turn", a.has_last_turn() ? turn_json(a.last_turn()) : json(nullptr)}};
}

// chat --json's own lines (the events' are TurnView's).
std::string agent_line(const pb::Agent& a) {
  return json{{"type", "agent"}, {"agent", agent_json(a)}}.dump() + "\n";
}

std::string sent_line(const std::string& agent_id, const pb::SendAccepted& sent) {
  return json{{"type", "sent"},
              {"agent_id", agent_id},
              {"turn_id", sent.turn_id()},
              {"seq", sent.seq()}}
             .dump() +
         "\n";
}

std::string delta_json(const std::string& offset, const std::string& agent_id,
                       const std::string& turn_id, const std::string& text) {
  return json{{"type", "delta"},
              {"offset_key", offset},
              {"agent_id", agent_id},
              {"turn_id", turn_id},
              {"text", text}}
             .dump() +
         "\n";
}

// Asks |question| on the controlling terminal and reads a line; nullopt without one.
std::optional<std::string> ask_tty(const std::string& question) {
  int fd = ::open("/dev/tty", O_RDWR | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  (void)!::write(fd, question.data(), question.size());
  std::string line;
  char c = 0;
  while (::read(fd, &c, 1) == 1 && c != '\n') line.push_back(c);
  ::close(fd);
  return line;
}

std::string random_nonce() {
  std::random_device rd;
  return fmt::format("cli-{:08x}{:08x}{:08x}", rd(), rd(), rd());
}

}  // namespace

std::string turn_state_name(pb::TurnState s) {
  switch (s) {
    case pb::TURN_RUNNING:
      return "running";
    case pb::TURN_DONE:
      return "done";
    case pb::TURN_FAILED:
      return "failed";
    case pb::TURN_CANCELLED:
      return "cancelled";
    case pb::TURN_WAITING_FOR_USER:
      return "waiting_for_user";
    default:
      return "";
  }
}

std::string tool_call_summary(std::string_view name, std::string_view arguments_json,
                              size_t width) {
  json args = json::parse(arguments_json, nullptr, false);
  std::string detail;
  if (args.is_object()) {
    for (const char* key : {"command", "path", "pattern", "url", "text", "ref"}) {
      auto it = args.find(key);
      if (it != args.end() && it->is_string()) {
        detail = it->get<std::string>();
        break;
      }
    }
    if (detail.empty() && !args.empty()) detail = args.dump();
  } else if (!arguments_json.empty()) {
    detail = std::string(arguments_json);
  }
  std::string line = detail.empty() ? std::string(name) : fmt::format("{}: {}", name, detail);
  return cut(one_line(std::move(line)), width);
}

// ---- TurnView -------------------------------------------------------------------------------

void TurnView::follow(std::string agent_id, std::string turn_id) {
  agent_id_ = std::move(agent_id);
  turn_id_ = std::move(turn_id);
  ended_ = false;
  state_ = pb::TURN_RUNNING;
  error_.clear();
  streamed_.clear();
}

std::string TurnView::dim(std::string_view s) const {
  return color_ ? fmt::format("\033[2m{}\033[0m", s) : std::string(s);
}

std::string TurnView::line_break() {
  if (at_line_start_) return {};
  at_line_start_ = true;
  return "\n";
}

std::string TurnView::item_text(const pb::TranscriptItem& item) {
  json payload = json::parse(item.payload_json(), nullptr, false);
  if (!payload.is_object()) payload = json::object();
  std::string out;
  if (item.kind() == pb::ITEM_TEXT) {
    if (item.role() != "assistant") return {};  // the user's own prompt
    std::string text = payload.value("text", "");
    // The deltas already showed this step's text (or a prefix of it, when some were lost).
    const std::string whole = text;
    if (!streamed_.empty() && text.compare(0, streamed_.size(), streamed_) == 0) {
      text.erase(0, streamed_.size());
    } else if (!streamed_.empty()) {
      out += line_break();
    }
    streamed_.clear();
    shown_text_ = whole;
    late_deltas_.clear();
    out += text;
    if (!text.empty()) at_line_start_ = text.back() == '\n';
    out += line_break();
    return out;
  }
  // Deltas that arrived before this item (the log and the live deltas are not ordered with
  // each other) belong to the next text item: streamed_ is kept.
  shown_text_.clear();
  late_deltas_.clear();
  out += line_break();
  if (item.kind() == pb::ITEM_TOOL_CALL) {
    out += fmt::format(
        "▸ {}\n", tool_call_summary(payload.value("name", "?"), payload.value("arguments", "")));
  } else if (item.kind() == pb::ITEM_TOOL_RESULT) {
    const bool is_error = payload.value("is_error", false);
    std::string line = cut(one_line(first_line(payload.value("content", json::array()))), 100);
    out += fmt::format("  {} {}\n", is_error ? "✗" : "⎿", dim(line.empty() ? "(no output)" : line));
  } else if (item.kind() == pb::ITEM_ERROR) {
    out += fmt::format("✗ {}\n", payload.value("message", ""));
  }
  return out;
}

std::string TurnView::feed(const pb::Event& ev) {
  if (!ev.offset_key().empty()) offset_ = ev.offset_key();
  if (ended_) return {};
  if (ev.has_delta()) {
    const auto& d = ev.delta();
    if (d.agent_id() != agent_id_ || d.turn_id() != turn_id_) return {};
    // Deltas may arrive after the durable text item they make up: those were shown already.
    if (!shown_text_.empty()) {
      late_deltas_ += d.text();
      if (shown_text_.compare(0, late_deltas_.size(), late_deltas_) == 0) return {};
      // More than the shown text: the rest is a new step's.
      std::string pending = late_deltas_.compare(0, shown_text_.size(), shown_text_) == 0
                                ? late_deltas_.substr(shown_text_.size())
                                : late_deltas_;
      shown_text_.clear();
      late_deltas_.clear();
      streamed_ += pending;
      if (json_) return delta_json(ev.offset_key(), d.agent_id(), d.turn_id(), pending);
      if (!pending.empty()) at_line_start_ = pending.back() == '\n';
      return pending;
    }
    streamed_ += d.text();
    if (json_) return delta_json(ev.offset_key(), d.agent_id(), d.turn_id(), d.text());
    if (!d.text().empty()) at_line_start_ = d.text().back() == '\n';
    return d.text();
  }
  if (ev.has_item()) {
    const auto& item = ev.item();
    if (item.agent_id() != agent_id_ || item.turn_id() != turn_id_) return {};
    if (!seen_.insert(item.seq()).second) return {};
    if (json_) {
      json payload = json::parse(item.payload_json(), nullptr, false);
      if (payload.is_discarded()) payload = item.payload_json();
      std::string kind = "text";
      if (item.kind() == pb::ITEM_TOOL_CALL) kind = "tool_call";
      if (item.kind() == pb::ITEM_TOOL_RESULT) kind = "tool_result";
      if (item.kind() == pb::ITEM_ERROR) kind = "error";
      return json{{"type", "item"},
                  {"offset_key", ev.offset_key()},
                  {"agent_id", item.agent_id()},
                  {"turn_id", item.turn_id()},
                  {"seq", item.seq()},
                  {"role", item.role()},
                  {"kind", kind},
                  {"payload", payload},
                  {"at_unix_ms", item.at_unix_ms()}}
                 .dump() +
             "\n";
    }
    return item_text(item);
  }
  if (ev.has_approval()) {
    const auto& a = ev.approval();
    if (a.agent_id() != agent_id_ || a.turn_id() != turn_id_) return {};
    if (a.state() == pb::APPROVAL_PENDING && asked_.insert(a.id()).second) pending_approval_ = a;
    if (json_) {
      json args = json::parse(a.arguments_json(), nullptr, false);
      if (args.is_discarded()) args = a.arguments_json();
      const char* states[] = {"",       "pending", "approved", "always",
                              "denied", "expired", "cancelled"};
      const int st = static_cast<int>(a.state());
      return json{{"type", "approval"},       {"offset_key", ev.offset_key()},
                  {"agent_id", a.agent_id()}, {"turn_id", a.turn_id()},
                  {"approval_id", a.id()},    {"tool", a.tool()},
                  {"arguments", args},        {"state", st >= 0 && st <= 6 ? states[st] : ""},
                  {"reason", a.reason()}}
                 .dump() +
             "\n";
    }
    return {};
  }
  if (ev.has_agent()) {
    const auto& a = ev.agent();
    if (a.id() != agent_id_ || a.last_turn().id() != turn_id_) return {};
    if (a.last_turn().state() == pb::TURN_RUNNING ||
        a.last_turn().state() == pb::TURN_STATE_UNSPECIFIED)
      return {};
    ended_ = true;
    state_ = a.last_turn().state();
    error_ = a.last_turn().error();
    if (json_) {
      return json{{"type", "turn"},      {"offset_key", ev.offset_key()},    {"agent_id", a.id()},
                  {"turn_id", turn_id_}, {"state", turn_state_name(state_)}, {"error", error_}}
                 .dump() +
             "\n";
    }
    std::string out = line_break();
    if (state_ == pb::TURN_DONE) {
      out += dim("· done") + "\n";
    } else if (state_ == pb::TURN_CANCELLED) {
      out += dim("· cancelled") + "\n";
    } else if (state_ == pb::TURN_WAITING_FOR_USER) {
      out += fmt::format("· waiting for you: {}\n", error_);
    } else {
      out += fmt::format("· turn failed: {}\n", error_);
    }
    return out;
  }
  return {};
}

// ---- the commands ---------------------------------------------------------------------------

namespace {

class Chat {
 public:
  Chat(net::Executor executor, std::string command, ChatOptions o)
      : executor_(std::move(executor)),
        command_(std::move(command)),
        o_(std::move(o)),
        view_(o_.json, !o_.json && ::isatty(STDOUT_FILENO) == 1) {}

  asio::awaitable<int> run() {
    co_await asio::this_coro::throw_if_cancelled(false);
    auto ex = co_await asio::this_coro::executor;
    int rc = kOk;
    std::optional<Failure> f = co_await connect();
    if (!f) {
      if (command_ == "agents") {
        f = co_await list();
      } else {
        signals_ = std::make_unique<asio::signal_set>(ex, SIGINT);
        asio::co_spawn(ex, watch_signals(), asio::detached);
        auto r = co_await chat();
        if (r.index() == 0) {
          rc = std::get<0>(r);
        } else {
          f = std::get<1>(r);
        }
        if (signals_) signals_->cancel();
      }
    }
    if (conn_) conn_->channel->close();
    if (f) {
      std::cerr << "cocoonbox " << command_ << ": " << f->message << "\n";
      co_return f->code;
    }
    co_return rc;
  }

  bool interactive() const { return o_.prompt.empty(); }

 private:
  // ---- connection ----

  asio::awaitable<std::optional<Failure>> connect() {
    auto ex = co_await asio::this_coro::executor;
    auto c = co_await client::connect_signed_in(ex);
    if (!c.ok()) co_return Failure{std::string(c.status().message())};
    conn_ = std::move(*c);
    co_return std::nullopt;
  }

  std::string box() const { return o_.box.empty() ? std::string("main") : o_.box; }

  // Options for a call to the box: the edge routes by x-cocoonbox-box and wakes a hibernated
  // box first, so a unary call gets time for that. |timeout| zero: no deadline (streams).
  grpc::CallOptions box_options(std::chrono::milliseconds timeout) const {
    grpc::Metadata extra;
    extra.push_back(http::Header{std::string("x-cocoonbox-box"), box()});
    return conn_->call_options(timeout, std::move(extra));
  }

  Failure from_status(const Status& st, std::string_view what) const {
    if (st.code() == Code::kUnauthenticated)
      return Failure{fmt::format("{}: {} (run `cocoonbox login`)", what, st.message())};
    if (st.code() == Code::kUnavailable || st.code() == Code::kDeadlineExceeded)
      return Failure{fmt::format("{}: cannot reach box {}: {}", what, box(), st.message())};
    return Failure{fmt::format("{}: {}", what, st.message())};
  }

  // ---- agents ----

  asio::awaitable<std::optional<Failure>> list() {
    pb::Agents::Stub stub(conn_->channel);
    pb::ListAgentsRequest req;
    auto r = co_await stub.List(req, box_options(std::chrono::seconds(120)));
    if (!r.ok()) co_return from_status(r.status(), "box " + box());
    if (o_.json) {
      json a = json::array();
      for (const auto& ag : r->agents()) a.push_back(agent_json(ag));
      std::cout << a.dump() << "\n";
      co_return std::nullopt;
    }
    if (r->agents_size() == 0) {
      std::cout << fmt::format("No agents in box {} yet: `cocoonbox chat` starts one.\n", box());
      co_return std::nullopt;
    }
    std::cout << fmt::format("{:<20} {:<16} {:<24} {}\n", "ID", "NAME", "MODEL", "LAST TURN");
    for (const auto& ag : r->agents()) {
      std::string last = "-";
      if (ag.has_last_turn() && !ag.last_turn().id().empty()) {
        last = fmt::format("{} {}", ag.last_turn().id(), turn_state_name(ag.last_turn().state()));
        if (!ag.last_turn().error().empty()) last += ": " + ag.last_turn().error();
      }
      std::cout << fmt::format("{:<20} {:<16} {:<24} {}\n", ag.id(), ag.name(), ag.model(), last);
    }
    co_return std::nullopt;
  }

  // ---- chat ----

  // The agent to talk to: --agent, a new one (--new, or a box without agents), else the
  // newest. Its last turn, when it is still running, is followed first.
  asio::awaitable<std::optional<Failure>> pick_agent() {
    pb::Agents::Stub stub(conn_->channel);
    if (o_.new_agent && !o_.agent.empty())
      co_return Failure{"--agent and --new exclude each other", 2};
    if (!o_.new_agent) {
      pb::ListAgentsRequest req;
      auto r = co_await stub.List(req, box_options(std::chrono::seconds(120)));
      if (!r.ok()) co_return from_status(r.status(), "box " + box());
      for (const auto& ag : r->agents()) {
        if (o_.agent.empty() || ag.id() == o_.agent) agent_ = ag;  // oldest first: the last wins
      }
      if (!o_.agent.empty() && agent_.id().empty())
        co_return Failure{fmt::format("box {} has no agent {}", box(), o_.agent)};
    }
    if (agent_.id().empty()) {
      pb::CreateAgentRequest req;
      req.set_name("chat");
      req.set_client_nonce(random_nonce());
      auto r = co_await stub.Create(req, box_options(std::chrono::seconds(120)));
      if (!r.ok()) co_return from_status(r.status(), "creating an agent");
      agent_ = *r;
    }
    if (o_.json) {
      emit(agent_line(agent_));
    } else if (interactive() && ::isatty(STDERR_FILENO) == 1) {
      const std::string model = agent_.model().empty() ? std::string("no model") : agent_.model();
      fmt::print(stderr, "agent {} ({}) in box {}; Ctrl-C cancels a turn, Ctrl-D exits\n",
                 agent_.id(), model, box());
    }
    co_return std::nullopt;
  }

  // Sends |prompt| and follows the turn. Returns the turn's end state.
  asio::awaitable<Result<pb::TurnState>> turn(const std::string& prompt) {
    pb::Agents::Stub stub(conn_->channel);
    pb::SendRequest req;
    req.set_agent_id(agent_.id());
    req.set_prompt(prompt);
    req.set_client_nonce(random_nonce());
    // A retry after a lost answer reuses the nonce, so it starts nothing new.
    Result<pb::SendAccepted> sent = unavailable("not sent");
    for (int attempt = 0; attempt < 3; ++attempt) {
      sent = co_await stub.Send(req, box_options(std::chrono::seconds(120)));
      if (sent.ok() || sent.status().code() != Code::kUnavailable) break;
    }
    if (!sent.ok()) co_return sent.status();
    if (o_.json) emit(sent_line(agent_.id(), *sent));
    auto state = co_await follow_turn(sent->turn_id());
    co_return state;
  }

  // Follows |turn_id| on Session.Events from the view's offset until it ends, resuming a
  // dropped stream from the last offset_key.
  asio::awaitable<Result<pb::TurnState>> follow_turn(const std::string& turn_id) {
    view_.follow(agent_.id(), turn_id);
    turn_running_ = true;
    cancel_sent_ = false;
    pb::Session::Stub session(conn_->channel);
    int failures = 0;
    Status last = ok_status();
    while (!view_.ended()) {
      pb::EventsRequest req;
      req.set_agent_id(agent_.id());
      req.set_from_offset_key(view_.offset());
      auto reader = co_await session.Events(req, box_options({}));
      if (reader.ok()) {
        for (;;) {
          auto ev = co_await reader->read();
          if (!ev) break;
          failures = 0;
          emit(view_.feed(*ev));
          if (auto pending = view_.take_pending_approval(); pending) {
            auto answered = co_await ask_approval(*pending);
            (void)answered;
          }
          if (view_.ended()) break;
        }
        if (view_.ended()) {
          reader->call().cancel();
          break;
        }
        last = co_await reader->finish();
      } else {
        last = reader.status();
      }
      if (last.code() == Code::kUnauthenticated || last.code() == Code::kPermissionDenied ||
          last.code() == Code::kNotFound || last.code() == Code::kInvalidArgument ||
          last.code() == Code::kUnimplemented || ++failures > 10)
        break;
      // Dropped (an api restart, a lost connection): resume after the last event seen.
      if (!o_.json) fmt::print(stderr, "[events stream lost ({}); resuming]\n", last.message());
      net::Timer t(co_await asio::this_coro::executor, net::after(std::chrono::seconds(1)));
      co_await t.async_wait();
    }
    turn_running_ = false;
    if (!view_.ended()) {
      co_return last.ok() ? unavailable("the events stream ended before the turn") : last;
    }
    co_return view_.state();
  }

  // Asks on the terminal whether |a| may run and answers with Agents.Respond. Without a
  // terminal (or with --json) nothing is asked: the call waits for an answer from elsewhere.
  asio::awaitable<Status> ask_approval(const pb::Approval& a) {
    const std::string summary = tool_call_summary(a.tool(), a.arguments_json());
    const std::string question = fmt::format("Allow {}? [y]es once / [a]lways / [n]o ", summary);
    std::optional<std::string> answer;
    if (!o_.json) answer = ask_tty(question);
    if (!answer) {
      if (!o_.json)
        fmt::print(stderr, "[approval {} for {} waits for an answer]\n", a.id(), summary);
      co_return ok_status();
    }
    pb::RespondRequest req;
    req.set_agent_id(agent_.id());
    req.set_approval_id(a.id());
    const char c = answer->empty()
                       ? 'n'
                       : static_cast<char>(std::tolower(static_cast<unsigned char>((*answer)[0])));
    req.set_decision(c == 'y' ? pb::APPROVE_ONCE : c == 'a' ? pb::APPROVE_ALWAYS : pb::DENY);
    pb::Agents::Stub stub(conn_->channel);
    auto r = co_await stub.Respond(req, box_options(std::chrono::seconds(30)));
    if (!r.ok()) {
      fmt::print(stderr, "cocoonbox chat: answering the approval: {}\n", r.status().message());
      co_return r.status();
    }
    co_return ok_status();
  }

  void emit(const std::string& s) {
    if (s.empty()) return;
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  }

  // The process: one prompt, or prompts from stdin until EOF.
  asio::awaitable<std::variant<int, Failure>> chat() {
    std::optional<Failure> picked = co_await pick_agent();
    if (picked) co_return *picked;
    // The agent's turn may still be running (a chat that was killed): show the rest first.
    if (agent_.has_last_turn() && agent_.last_turn().state() == pb::TURN_RUNNING) {
      if (!o_.json && ::isatty(STDERR_FILENO) == 1)
        fmt::print(stderr, "[turn {} is running; following it]\n", agent_.last_turn().id());
      auto st = co_await follow_turn(agent_.last_turn().id());
      if (!st.ok()) co_return from_status(st.status(), "following the running turn");
    }
    if (!interactive()) {
      auto st = co_await turn(o_.prompt);
      if (!st.ok()) co_return from_status(st.status(), "agent " + agent_.id());
      if (*st == pb::TURN_DONE) co_return kOk;
      if (*st == pb::TURN_CANCELLED) co_return kCancelledExit;
      co_return kError;
    }
    start_stdin_reader();
    const bool tty = ::isatty(STDIN_FILENO) == 1 && ::isatty(STDERR_FILENO) == 1;
    for (;;) {
      if (tty) {
        fmt::print(stderr, "› ");
        std::fflush(stderr);
      }
      while (lines_.empty() && !stdin_eof_) {
        Status w = co_await line_ready_->wait();
        (void)w;
      }
      if (lines_.empty()) break;  // EOF
      std::string line = std::move(lines_.front());
      lines_.pop_front();
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      auto st = co_await turn(line);
      if (!st.ok()) co_return from_status(st.status(), "agent " + agent_.id());
    }
    co_return kOk;
  }

  // stdin is read on its own thread (it may be a terminal, a pipe or a file, which Asio cannot
  // watch); each line is posted to the loop.
  void start_stdin_reader() {
    net::Executor ex = executor_;
    line_ready_ = std::make_unique<net::Signal>(ex);
    std::thread([this, ex] {
      std::string line;
      while (std::getline(std::cin, line)) {
        asio::post(ex, [this, line] {
          lines_.push_back(line);
          line_ready_->notify();
        });
      }
      asio::post(ex, [this] {
        stdin_eof_ = true;
        line_ready_->notify();
      });
    }).detach();  // blocked in read at exit; the process ends with _exit (run_chat_command)
  }

  // Ctrl-C: during a turn the first cancels it (Agents.Cancel) and a second exits; between
  // turns it exits.
  asio::awaitable<void> watch_signals() {
    for (;;) {
      auto [ec, sig] = co_await signals_->async_wait(net::kToken);
      if (ec) co_return;
      if (turn_running_ && !cancel_sent_) {
        cancel_sent_ = true;
        if (!o_.json) fmt::print(stderr, "\n[cancelling the turn; Ctrl-C again to quit]\n");
        asio::co_spawn(co_await asio::this_coro::executor, cancel_turn(), asio::detached);
        continue;
      }
      std::fflush(stdout);
      std::_Exit(kCancelledExit);
    }
  }

  asio::awaitable<void> cancel_turn() {
    co_await asio::this_coro::throw_if_cancelled(false);
    pb::Agents::Stub stub(conn_->channel);
    pb::AgentRef ref;
    ref.set_agent_id(agent_.id());
    auto r = co_await stub.Cancel(ref, box_options(std::chrono::seconds(30)));
    if (!r.ok()) fmt::print(stderr, "cocoonbox chat: cancel: {}\n", r.status().message());
  }

  net::Executor executor_;
  std::string command_;
  ChatOptions o_;
  TurnView view_;
  std::optional<client::Connection> conn_;
  pb::Agent agent_;
  std::unique_ptr<asio::signal_set> signals_;
  bool turn_running_ = false;
  bool cancel_sent_ = false;
  std::unique_ptr<net::Signal> line_ready_;
  std::deque<std::string> lines_;
  bool stdin_eof_ = false;
};

}  // namespace

void add_chat_commands(CLI::App& app, ChatOptions& o) {
  auto* agents = app.add_subcommand("agents", "List the agents in a box with their last turn");
  agents->add_option("--box", o.box, "box name or id (default: main)");
  agents->add_flag("--json", o.json, "print a JSON array");
  agents->footer("Example:\n  cocoonbox agents --box work --json");

  auto* chat = app.add_subcommand(
      "chat", "Talk to the agent in a box: one PROMPT, or prompts from stdin line by line");
  chat->add_option("PROMPT", o.prompt, "what to ask; without it, an interactive session");
  chat->add_option("--box", o.box, "box name or id (default: main)");
  chat->add_option("--agent", o.agent, "the agent's id (default: the box's newest agent)");
  chat->add_flag("--new", o.new_agent, "start a new agent");
  chat->add_flag("--json", o.json, "print one JSON object per event line");
  chat->footer(
      "Text streams as the model writes it; each tool call is one line (▸ shell: ls), its\n"
      "result's first line under it. Ctrl-C cancels a running turn; again, or Ctrl-D, exits.\n"
      "Examples:\n  cocoonbox chat \"what is in /workspace?\"\n  cocoonbox chat --new\n"
      "  cocoonbox chat --agent ag_0123456789abcdef --json \"run the tests\"");
}

bool is_chat_command(std::string_view command) { return command == "agents" || command == "chat"; }

int run_chat_command(std::string_view command, const ChatOptions& o) {
  // The CLI talks to people: its own logs only when asked (COCOONBOX_LOG_LEVEL).
  if (std::getenv("COCOONBOX_LOG_LEVEL") == nullptr) log::set_min_level(log::Level::kError);
  asio::io_context io;
  int rc = kError;
  Chat chat{io.get_executor(), std::string(command), o};
  const bool reads_stdin = command == "chat" && chat.interactive();
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { rc = co_await chat.run(); }, asio::detached);
  io.run();
  std::fflush(stdout);
  std::fflush(stderr);
  // The stdin thread may still be blocked in read: end without waiting for it.
  if (reads_stdin) std::_Exit(rc);
  return rc;
}

}  // namespace cb::cli
