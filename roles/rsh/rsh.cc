#include "roles/rsh/rsh.h"

#include "base/log.h"
#include "client/config.h"
#include "client/connect.h"
#include "cocoonbox/agent/v1/session.pb.h"
#include "roles/rsh/args.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <thread>
#include <unistd.h>

namespace cb::rsh {

namespace av1 = ::cocoonbox::agent::v1;

namespace {

constexpr int kOwnFailure = 255;
constexpr size_t kChunk = 64 * 1024;

// ---- the local terminal ----

// Raw mode for -t, restored on every exit path (normal return, error, fatal signal).
struct Terminal {
  bool raw = false;
  termios saved{};
};
Terminal g_terminal;

void restore_terminal() {
  if (g_terminal.raw) {
    ::tcsetattr(STDIN_FILENO, TCSADRAIN, &g_terminal.saved);
    g_terminal.raw = false;
  }
}

bool make_raw() {
  if (::tcgetattr(STDIN_FILENO, &g_terminal.saved) != 0) return false;
  termios raw = g_terminal.saved;
  ::cfmakeraw(&raw);
  if (::tcsetattr(STDIN_FILENO, TCSADRAIN, &raw) != 0) return false;
  g_terminal.raw = true;
  std::atexit(restore_terminal);
  return true;
}

void window_size(uint32_t* rows, uint32_t* cols) {
  winsize ws{};
  if (::ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0) {
    *rows = ws.ws_row;
    *cols = ws.ws_col;
  } else {
    *rows = 24;
    *cols = 80;
  }
}

// `infocmp -x TERM`, so a box that lacks the terminal type can compile it (one local run).
std::string local_terminfo(const std::string& term) {
  for (char c : term) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.' || c == '_' || c == '+';
    if (!ok) return {};
  }
  std::string cmd = "infocmp -x " + term + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {};
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0 && out.size() < 256 * 1024) out.append(buf, n);
  if (::pclose(p) != 0) return {};
  return out;
}

// Waits until |fd| is ready for |events|: our stdio may be non-blocking (rsync makes the
// remote shell's stdout so unless --blocking-io), and EAGAIN must never lose a byte.
void wait_ready(int fd, short events) {
  pollfd p{fd, events, 0};
  while (::poll(&p, 1, -1) < 0 && errno == EINTR) {
  }
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_ready(fd, POLLOUT);
      continue;
    }
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// ---- stdin: a blocking reader thread, paced by the agent's stdin credit ----

class StdinPump {
 public:
  explicit StdinPump(net::Executor ex) : ex_(std::move(ex)), ready_(ex_) {}

  void start(uint64_t window) {
    window_ = window == 0 ? 1024 * 1024 : window;
    std::thread([this] { loop(); }).detach();
  }
  void credit(uint64_t n) {
    std::lock_guard<std::mutex> l(mu_);
    in_flight_ = n > in_flight_ ? 0 : in_flight_ - n;
    cv_.notify_all();
  }
  // The next chunk on the io thread; "" with |eof| at the end of stdin.
  asio::awaitable<std::optional<std::string>> next() {
    for (;;) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (!chunks_.empty()) {
          std::string c = std::move(chunks_.front());
          chunks_.pop_front();
          co_return c;
        }
        if (eof_) co_return std::nullopt;
      }
      Status w = co_await ready_.wait();
      if (!w.ok()) co_return std::nullopt;
    }
  }

 private:
  void loop() {
    std::string buf(kChunk, '\0');
    for (;;) {
      // Never more than the credit left: the agent stops reading a stream that is past its
      // credit until the process takes stdin, so a signal behind even one byte too many waits
      // until a process that does not read exits on its own (`yes | rsh sleep 30`, Ctrl-C:
      // exit 0 after 30 s). A credit only makes the room larger while read() blocks.
      size_t room = 0;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [this] { return in_flight_ < window_; });
        room = static_cast<size_t>(std::min<uint64_t>(kChunk, window_ - in_flight_));
      }
      ssize_t n = ::read(STDIN_FILENO, buf.data(), room);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        wait_ready(STDIN_FILENO, POLLIN);
        continue;
      }
      std::lock_guard<std::mutex> l(mu_);
      // Chunks still queued mean the io thread has a wake-up on its way and has not sent them
      // yet: a read joins the last one (one Exec frame, one agent write instead of several;
      // `head` writes 8 KiB at a time) and needs no wake-up of its own.
      const bool idle = chunks_.empty();
      if (n <= 0) {
        eof_ = true;
      } else {
        const auto len = static_cast<size_t>(n);
        if (!idle && chunks_.back().size() + len <= kChunk) {
          chunks_.back().append(buf.data(), len);
        } else {
          chunks_.emplace_back(buf.data(), len);
        }
        in_flight_ += len;
      }
      if (idle || n <= 0) asio::post(ex_, [this] { ready_.notify(); });
      if (n <= 0) return;
    }
  }

  net::Executor ex_;
  net::Signal ready_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> chunks_;
  uint64_t in_flight_ = 0;
  uint64_t window_ = 1024 * 1024;
  bool eof_ = false;
};

av1::ExecSignal to_exec_signal(int sig) {
  switch (sig) {
    case SIGINT:
      return av1::EXEC_SIGNAL_INT;
    case SIGTERM:
      return av1::EXEC_SIGNAL_TERM;
    case SIGHUP:
      return av1::EXEC_SIGNAL_HUP;
    case SIGQUIT:
      return av1::EXEC_SIGNAL_QUIT;
    default:
      return av1::EXEC_SIGNAL_KILL;
  }
}

class Session {
 public:
  explicit Session(Args args) : a_(std::move(args)) {}

  asio::awaitable<int> run() {
    auto ex = co_await asio::this_coro::executor;
    auto conn = co_await client::connect_signed_in(ex);
    if (!conn.ok()) co_return fail(conn.status().message());
    conn_ = std::move(*conn);

    bool stdin_tty = ::isatty(STDIN_FILENO) == 1;
    bool pty = a_.pty.value_or(a_.command.empty() && stdin_tty);
    if (pty && !stdin_tty) pty = false;  // -t without a local terminal: as ssh, no pty

    av1::ExecRequest start_req;
    av1::ExecStart* start = start_req.mutable_start();
    if (a_.command.empty()) {
      start->mutable_shell();
    } else {
      start->set_command(a_.command);
    }
    if (a_.send_git_protocol) {
      if (const char* gp = std::getenv("GIT_PROTOCOL"); gp != nullptr && *gp != '\0')
        (*start->mutable_env())["GIT_PROTOCOL"] = gp;
    }
    if (pty) {
      av1::PtyRequest* p = start->mutable_pty();
      uint32_t rows = 0;
      uint32_t cols = 0;
      window_size(&rows, &cols);
      p->set_rows(rows);
      p->set_cols(cols);
      const char* term = std::getenv("TERM");
      std::string t = term != nullptr && *term != '\0' ? term : "xterm-256color";
      p->set_term(t);
      p->set_terminfo(local_terminfo(t));
    }

    grpc::Metadata extra;
    std::string box = a_.box.empty() ? std::string("main") : a_.box;
    extra.push_back(http::Header{std::string("x-cocoonbox-box"), box});
    grpc::CallOptions options = conn_->call_options({}, std::move(extra));
    auto call =
        co_await conn_->channel->start_call("/cocoonbox.agent.v1.Session/Exec", std::move(options));
    if (!call.ok()) co_return fail(call.status().message());
    call_ = *call;
    Status w = co_await call_->write(start_req.SerializeAsString());
    if (!w.ok()) co_return co_await end_with_status();

    auto first = co_await call_->read();
    if (!first) co_return co_await end_with_status();
    av1::ExecResponse started;
    if (!started.ParseFromString(*first) || !started.has_started())
      co_return fail("the agent did not start the command");

    if (pty && !make_raw()) pty = false;
    asio::signal_set signals(ex, SIGINT, SIGTERM, SIGHUP);
    signals.add(SIGQUIT);
    signals.add(SIGWINCH);
    asio::co_spawn(ex, forward_signals(signals), asio::detached);
    outbox_ready_ = std::make_unique<net::Signal>(ex);
    asio::co_spawn(ex, writer(), asio::detached);
    pump_ = std::make_unique<StdinPump>(ex);
    pump_->start(started.started().stdin_window());
    asio::co_spawn(ex, send_stdin(), asio::detached);

    std::optional<av1::ExecExit> exit;
    for (;;) {
      auto bytes = co_await call_->read();
      if (!bytes) break;
      av1::ExecResponse r;
      if (!r.ParseFromString(*bytes)) continue;
      if (r.has_stdout_data()) {
        if (!write_all(STDOUT_FILENO, r.stdout_data())) stdout_closed_ = true;
      } else if (r.has_stderr_data()) {
        write_all(STDERR_FILENO, r.stderr_data());
      } else if (r.has_stdin_credit()) {
        pump_->credit(r.stdin_credit().bytes());
      } else if (r.has_exit()) {
        exit = r.exit();
      }
    }
    signals.cancel();
    Status st = co_await call_->finish();
    restore_terminal();
    if (exit) {
      if (exit->status_case() == av1::ExecExit::kSignal) co_return 128 + exit->signal();
      co_return exit->code();
    }
    co_return fail(st.ok() ? std::string_view("the command ended without an exit status")
                           : st.message());
  }

 private:
  int fail(std::string_view message) {
    restore_terminal();
    fmt::print(stderr, "cocoonbox rsh: {}\n", message);
    return kOwnFailure;
  }

  asio::awaitable<int> end_with_status() {
    Status st = co_await call_->finish();
    if (st.code() == Code::kUnauthenticated) {
      co_return fail(fmt::format("{} (run `cocoonbox login`)", st.message()));
    }
    co_return fail(st.ok() ? std::string_view("the call ended early") : st.message());
  }

  // Frames go out through one writer, in order: the stdin pump, signals and resizes all queue
  // here. The request stream stays open after stdin ends, so signals still reach the process.
  void send(const av1::ExecRequest& req) {
    outbox_.push_back(req.SerializeAsString());
    outbox_ready_->notify();
  }

  asio::awaitable<void> writer() {
    for (;;) {
      while (outbox_.empty()) {
        Status w = co_await outbox_ready_->wait();
        if (!w.ok()) co_return;
      }
      std::string frame = std::move(outbox_.front());
      outbox_.pop_front();
      Status w = co_await call_->write(frame);
      if (!w.ok()) co_return;
    }
  }

  asio::awaitable<void> send_stdin() {
    for (;;) {
      auto chunk = co_await pump_->next();
      if (!chunk) break;
      av1::ExecRequest req;
      req.set_stdin_data(std::move(*chunk));
      send(req);
    }
    av1::ExecRequest close;
    close.mutable_stdin_close();
    send(close);
  }

  asio::awaitable<void> forward_signals(asio::signal_set& signals) {
    for (;;) {
      auto [ec, sig] = co_await signals.async_wait(net::kToken);
      if (ec) co_return;
      av1::ExecRequest req;
      if (sig == SIGWINCH) {
        uint32_t rows = 0;
        uint32_t cols = 0;
        window_size(&rows, &cols);
        req.mutable_window_change()->set_rows(rows);
        req.mutable_window_change()->set_cols(cols);
      } else {
        req.set_signal(to_exec_signal(sig));
      }
      send(req);
    }
  }

  Args a_;
  std::optional<client::Connection> conn_;
  std::shared_ptr<grpc::ClientCall> call_;
  std::unique_ptr<StdinPump> pump_;
  std::deque<std::string> outbox_;
  std::unique_ptr<net::Signal> outbox_ready_;
  bool stdout_closed_ = false;
};

constexpr std::string_view kUsage =
    "Usage: cocoonbox rsh [--box B] [-t|-T] [HOST] COMMAND...\n"
    "Runs COMMAND in your box (default: main) with this terminal's stdin, stdout and stderr;\n"
    "exits with its status (255 for rsh's own failures). Without COMMAND: your shell.\n\n"
    "  --box B   the box (name or id)\n"
    "  -t / -T   force / disable a pseudo-terminal (default: one for a shell on a terminal)\n"
    "  HOST      `box`, or NAME.box for the box NAME, as git and rsync pass it from\n"
    "            remote specs like box:/workspace/repo\n"
    "  -p, -l, -4, -6, -q, -o SendEnv=GIT_PROTOCOL: accepted for git and rsync\n\n"
    "Examples:\n"
    "  cocoonbox rsh --box main 'uname -a'\n"
    "  GIT_SSH_COMMAND='cocoonbox rsh' git clone box:/workspace/project\n"
    "  rsync -a -e 'cocoonbox rsh' ./src/ work.box:/workspace/src/\n";

}  // namespace

int run(std::span<char* const> args) {
  std::vector<std::string> words;
  for (size_t i = 1; i < args.size(); ++i) words.emplace_back(args[i]);
  auto parsed = parse_args(words);
  if (!parsed.ok()) {
    if (parsed.status().message() == "help") {
      fmt::print("{}", kUsage);
      return 0;
    }
    fmt::print(stderr, "cocoonbox rsh: {}\n", parsed.status().message());
    return kOwnFailure;
  }
  if (parsed->probe) {
    // git's `ssh -G` probe: we are not OpenSSH, so git uses its simple variant.
    return kOwnFailure;
  }
  if (std::getenv("COCOONBOX_LOG_LEVEL") == nullptr) log::set_min_level(log::Level::kError);
  asio::io_context io;
  int rc = kOwnFailure;
  Session session(std::move(*parsed));
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        rc = co_await session.run();
        io.stop();  // the stdin pump and signal forwarding end with the process
      },
      asio::detached);
  io.run();
  restore_terminal();
  std::fflush(stdout);
  std::fflush(stderr);
  // The stdin thread may be blocked in read(2): end the process without joining it.
  std::_Exit(rc);
}

}  // namespace cb::rsh
