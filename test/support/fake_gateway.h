#pragma once
// FakeGateway runs test/support/fake_gateway.py (a fake of the external paid model gateway
// that speaks the OpenAI and Anthropic wires; see the top of that file) for one test: it starts
// the script on 127.0.0.1 port 0, reads the port it prints, and kills it when destroyed. The
// script also exits when this process dies (its stdin is a pipe from us).
//
//   test::FakeGateway gw;
//   REQUIRE(gw.error().empty());
//   REQUIRE(gw.set_script(json::parse(R"([{"wire":"openai","text":"Hi"}])")).ok());
//   ... point a model::Client at gw.url() ...
//   auto requests = gw.requests();   // what the client sent
//
// The control calls block the calling thread on a private io_context (the fake is another
// process, so it never needs our loop); call them outside coroutines.
//
// Needs CB_FAKE_GATEWAY_PY (the script's path) defined by the test target, and cb_http.

#include "http/http1_client.h"
#include "support/run_sync.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace cb::test {

class FakeGateway {
 public:
  // Listens on 127.0.0.1 port 0, or on the unix socket |unix_path| when given (as the api's
  // model door does for a box).
  explicit FakeGateway(std::string unix_path = {}, std::string script = CB_FAKE_GATEWAY_PY)
      : unix_path_(std::move(unix_path)) {
    start(script);
  }
  ~FakeGateway() { stop(); }
  FakeGateway(const FakeGateway&) = delete;
  FakeGateway& operator=(const FakeGateway&) = delete;

  // Empty when the fake is up.
  const std::string& error() const { return error_; }
  uint16_t port() const { return port_; }
  // "http://127.0.0.1:PORT" or "unix:PATH": what model::parse_endpoint() takes.
  std::string url() const {
    return unix_path_.empty() ? "http://127.0.0.1:" + std::to_string(port_) : "unix:" + unix_path_;
  }

  // Replaces the script (a list of turns, or {"turns": [...], "key": "K"}) and forgets the
  // requests recorded so far.
  Status set_script(const nlohmann::json& script) {
    auto r = control("POST", "/_fake/script", script.dump());
    return r.ok() ? ok_status() : r.status();
  }

  // The model requests received since the last set_script(), oldest first.
  Result<nlohmann::json> requests() {
    auto r = control("GET", "/_fake/requests", "");
    if (!r.ok()) return r.status();
    nlohmann::json j = nlohmann::json::parse(*r, nullptr, false);
    if (j.is_discarded()) return internal_error("fake gateway: bad /_fake/requests JSON");
    return j["requests"];
  }

  // Polls requests() until |pred| holds for them (at most |attempts| times, 20 ms apart):
  // for effects the fake sees a little after the client acted, such as a closed connection.
  template <typename Pred>
  bool wait_for(Pred pred, int attempts = 500) {
    for (int i = 0; i < attempts; ++i) {
      auto r = requests();
      if (r.ok() && pred(*r)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

 private:
  void start(const std::string& script) {
    int out[2];
    int in[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(in, O_CLOEXEC) != 0) {
      error_ = std::string("pipe: ") + std::strerror(errno);
      return;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    // Debian's interpreter when present: a python3 found on PATH may be a version-manager
    // shim that takes a second to start. The fake needs only the standard library.
    std::string py = ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    std::string flag = "--exit-on-stdin-eof";
    std::string unix_flag = "--unix";
    char* argv[] = {py.data(), const_cast<char*>(script.c_str()), flag.data(), nullptr, nullptr,
                    nullptr};
    if (!unix_path_.empty()) {
      argv[3] = unix_flag.data();
      argv[4] = unix_path_.data();
    }
    int rc = ::posix_spawnp(&pid_, py.c_str(), &fa, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(out[1]);
    ::close(in[0]);
    stdin_ = in[1];
    if (rc != 0) {
      ::close(out[0]);
      pid_ = -1;
      error_ = std::string("spawn python3: ") + std::strerror(rc);
      return;
    }
    // The first line of its stdout is the port (or the unix path).
    std::string line;
    pollfd p{out[0], POLLIN, 0};
    while (line.find('\n') == std::string::npos) {
      if (::poll(&p, 1, 30000) <= 0) break;
      char buf[64];
      ssize_t n = ::read(out[0], buf, sizeof buf);
      if (n <= 0) break;
      line.append(buf, static_cast<size_t>(n));
    }
    ::close(out[0]);
    if (!unix_path_.empty()) {
      if (line != unix_path_ + "\n") {
        error_ = "fake gateway did not print its socket path (got '" + line + "')";
        stop();
      }
      return;
    }
    int port = std::atoi(line.c_str());
    if (port <= 0 || port > 65535) {
      error_ = "fake gateway did not print its port (got '" + line + "')";
      stop();
      return;
    }
    port_ = static_cast<uint16_t>(port);
  }

  void stop() {
    if (stdin_ >= 0) ::close(stdin_);
    stdin_ = -1;
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    pid_ = -1;
  }

  Result<std::string> control(std::string method, std::string path, std::string body) {
    auto task = [](uint16_t port, std::string unix_path, std::string method, std::string path,
                   std::string body) -> asio::awaitable<Result<std::string>> {
      http::Http1DialOptions o;
      o.host = "127.0.0.1";
      o.port = port;
      o.unix_path = std::move(unix_path);
      auto deadline = net::after(std::chrono::seconds(30));
      auto c = co_await http::dial_http1(co_await asio::this_coro::executor, o, deadline);
      if (!c.ok()) co_return c.status();
      http::Headers h;
      h.push_back(http::Header{std::string("content-type"), std::string("application/json")});
      auto r = co_await (*c)->request(std::move(method), std::move(path), std::move(h),
                                      std::move(body), deadline);
      if (!r.ok()) co_return r.status();
      if (r->status != 200) co_return internal_error("fake gateway control: " + r->body);
      co_return std::move(r->body);
    };
    // Result<T> has no default value, which use_future needs: hand it out through |out|.
    Result<std::string> out = internal_error("fake gateway control: not run");
    auto wrap = [&out](asio::awaitable<Result<std::string>> t) -> asio::awaitable<void> {
      out = co_await std::move(t);
    };
    run_sync(wrap(task(port_, unix_path_, std::move(method), std::move(path), std::move(body))));
    return out;
  }

  std::string unix_path_;
  pid_t pid_ = -1;
  int stdin_ = -1;
  uint16_t port_ = 0;
  std::string error_;
};

}  // namespace cb::test
