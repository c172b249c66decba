// The browser tools (roles/agent/browser_tools.h) against a real headless Chromium (Debian
// `chromium`, installed by scripts/setup) and a page this test serves on 127.0.0.1:0: the
// seed's M2 browser acceptance on a local page. As root the browser runs as `nobody`.

#include "roles/agent/browser_tools.h"

#include "base/base64.h"
#include "http/server.h"
#include "proc/user.h"
#include "support/run_sync.h"
#include "support/temp_dir.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <csignal>
#include <dirent.h>
#include <fstream>
#include <regex>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace cb::agent {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using test::run_sync;

constexpr std::string_view kPage = R"html(<!doctype html>
<html><head><title>Box test page</title></head>
<body>
<h1>Welcome to the box</h1>
<form onsubmit="event.preventDefault(); document.getElementById('sub').textContent = 'Submitted ' + document.getElementById('name').value;">
<label for="name">Name</label> <input id="name" type="text">
<button id="go" type="button" onclick="document.getElementById('out').textContent = 'Hello, ' + document.getElementById('name').value + '!'; this.textContent = 'Greeted';">Greet</button>
</form>
<p id="out">Nobody greeted yet</p>
<p id="sub">Not submitted</p>
<div style="height: 3000px"></div>
<a href="#top" id="bottom">Back to top</a>
</body></html>
)html";

// Every kind of JavaScript dialog, each opened by a button; Arm makes the page ask to stay.
constexpr std::string_view kDialogPage = R"html(<!doctype html>
<html><head><title>Dialogs</title></head>
<body>
<h1>Dialogs</h1>
<button onclick="alert('Saved!'); document.getElementById('out').textContent = 'alerted';">Alert</button>
<button onclick="document.getElementById('out').textContent = confirm('Delete it?') ? 'confirmed' : 'declined';">Confirm</button>
<button onclick="document.getElementById('out').textContent = 'name: ' + prompt('Your name?', 'Bob');">Prompt</button>
<button onclick="window.addEventListener('beforeunload', (e) => { e.preventDefault(); e.returnValue = 'unsaved'; }); document.getElementById('out').textContent = 'armed';">Arm</button>
<p id="out">nothing yet</p>
</body></html>
)html";

// A page that opens an alert while it loads.
constexpr std::string_view kAlertOnLoadPage = R"html(<!doctype html>
<html><head><title>Hello</title></head>
<body onload="alert('Welcome aboard')"><p>loaded</p></body></html>
)html";

// A page whose head comes 400 ms after its first bytes: the navigation commits long before
// the title is known, so a result that reads the title before the page's own load event
// shows none.
constexpr std::string_view kSlowPageStart = "<!doctype html><html>";
constexpr std::string_view kSlowPageRest =
    "<head><title>Slow to load</title></head><body><p>late</p></body></html>";

// A page that sends the browser on to / while it is parsed, and whose own load waits 3 s for
// an image. Mostly the browser commits / before this page fires its load, and the navigation
// ends with /'s; on a busy machine the browser may stop this page's loading first (its load
// then fires at once). Either way the navigation ends loaded, never after the 30 s wait for a
// load that does not come.
constexpr std::string_view kMovesOnPage =
    "<!doctype html><html><head><script>location.replace('/')</script></head>"
    "<body><img src=\"/slow-image\"></body></html>";

// Live processes (not zombies) whose command line names |needle|.
std::vector<pid_t> processes_naming(const std::string& needle) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  REQUIRE(d != nullptr);
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    std::ifstream f(fmt::format("/proc/{}/cmdline", pid), std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (cmd.find(needle) != std::string::npos) out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(d);
  return out;
}

// True once no live process names |needle|; SIGKILLed processes take a moment to exit, so
// this looks again for up to 20 s (a bound, not a timing assertion).
bool all_gone(const std::string& needle) {
  for (int i = 0; i < 200; ++i) {
    if (processes_naming(needle).empty()) return true;
    ::usleep(100 * 1000);
  }
  return processes_naming(needle).empty();
}

// The folder under /tmp that a running Chromium's singleton socket is in, which the profile's
// SingletonSocket links to; empty if there is no such link.
std::filesystem::path singleton_folder(const std::filesystem::path& profile) {
  std::error_code ec;
  const auto target = std::filesystem::read_symlink(profile / "SingletonSocket", ec);
  return ec ? std::filesystem::path() : target.parent_path();
}

bool left_on_disk(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::symlink_status(p, ec).type() != std::filesystem::file_type::not_found;
}

// Starts a browser of |config|, navigates it to about:blank and stops it: whether the page
// loaded.
bool navigate_blank(const BrowserConfig& config) {
  asio::io_context io;
  bool loaded = false;
  BrowserTools browser(io.get_executor(), config);
  run_sync(io, [&]() -> asio::awaitable<void> {
    const json blank = json{{"url", std::string("about:blank")}};
    auto r = co_await browser.call("browser_navigate", blank);
    loaded = r.ok() && !r->is_error;
    co_await browser.shutdown();
  }());
  return loaded;
}

uid_t uid_of(pid_t pid) {
  std::ifstream f(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("Uid:", 0) == 0) return static_cast<uid_t>(std::stoul(line.substr(4)));
  return static_cast<uid_t>(-1);
}

// The ref on the first line of |snapshot| that contains |what|, or "".
std::string ref_of(const std::string& snapshot, const std::string& what) {
  std::istringstream in(snapshot);
  std::string line;
  static const std::regex kRef(R"(\[ref=(e[0-9]+)\])");
  while (std::getline(in, line)) {
    if (line.find(what) == std::string::npos) continue;
    std::smatch m;
    if (std::regex_search(line, m, kRef)) return m[1];
  }
  return {};
}

// Serves kPage at / on 127.0.0.1:0 for the test's lifetime.
struct PageServer {
  explicit PageServer(asio::io_context& io) : server(io.get_executor(), router, {}) {
    router.handle("GET", "/", [](http::ServerRequest& req) -> asio::awaitable<void> {
      (void)co_await http::respond(req, 200, "text/html; charset=utf-8", kPage);
    });
    router.handle("GET", "/dialogs", [](http::ServerRequest& req) -> asio::awaitable<void> {
      (void)co_await http::respond(req, 200, "text/html; charset=utf-8", kDialogPage);
    });
    router.handle("GET", "/alert-on-load", [](http::ServerRequest& req) -> asio::awaitable<void> {
      (void)co_await http::respond(req, 200, "text/html; charset=utf-8", kAlertOnLoadPage);
    });
    router.handle("GET", "/moves-on", [](http::ServerRequest& req) -> asio::awaitable<void> {
      (void)co_await http::respond(req, 200, "text/html; charset=utf-8", kMovesOnPage);
    });
    router.handle("GET", "/slow-image", [](http::ServerRequest& req) -> asio::awaitable<void> {
      net::Timer t(co_await asio::this_coro::executor, net::after(std::chrono::seconds(3)));
      co_await t.async_wait();
      (void)co_await http::respond(req, 404, "text/plain", "no image");
    });
    router.handle("GET", "/slow-head", [](http::ServerRequest& req) -> asio::awaitable<void> {
      http::Headers h;
      h.push_back({"content-type", "text/html; charset=utf-8"});
      if (!(co_await req.send_headers(200, h, false)).ok()) co_return;
      if (!(co_await req.write(kSlowPageStart, false)).ok()) co_return;
      net::Timer t(co_await asio::this_coro::executor, net::after(std::chrono::milliseconds(400)));
      co_await t.async_wait();
      (void)co_await req.write(kSlowPageRest, true);
    });
    REQUIRE(server.listen_tcp("127.0.0.1", 0).ok());
    server.start();
  }
  std::string url() const { return fmt::format("http://127.0.0.1:{}/", server.port()); }
  http::Router router;
  http::Server server;
};

struct Fixture {
  Fixture() {
    // As root the browser runs as nobody, whose home does not exist: the profile goes in a
    // directory of the test's that nobody owns.
    if (::geteuid() == 0 && proc::lookup_user("nobody").ok()) {
      config.desktop_user = "nobody";
      const auto nobody = proc::lookup_user("nobody").value();
      ::chmod(dir.path().c_str(), 0755);
      profile = dir.path() / "profile";
      REQUIRE(::mkdir(profile.c_str(), 0700) == 0);
      REQUIRE(::chown(profile.c_str(), nobody.uid, nobody.gid) == 0);
      expected_uid = nobody.uid;
    } else {
      config.desktop_user = "cb-no-such-user";  // the agent's own account
      profile = dir.path() / "profile";
      expected_uid = ::geteuid();
    }
    config.profile_dir = profile;
  }
  test::TempDir dir;
  std::filesystem::path profile;
  BrowserConfig config;
  uid_t expected_uid = 0;
};

asio::awaitable<ToolResult> call(BrowserTools& b, std::string name, json args) {
  auto r = co_await b.call(name, args);
  REQUIRE(r.ok());
  co_return std::move(*r);
}

TEST_CASE("BrowserTools: snapshot, click, type, press, scroll and screenshot on a local page",
          "[agent][browser][integration]") {
  Fixture f;
  asio::io_context io;
  PageServer page(io);
  pid_t browser_pid = 0;
  std::filesystem::path singleton;
  {
    BrowserTools browser(io.get_executor(), f.config);
    run_sync(io, [&]() -> asio::awaitable<void> {
      co_await asio::this_coro::throw_if_cancelled(false);
      // Nothing runs before the first call.
      CHECK(browser.browser_pid() == 0);

      const json args0 = json{{"url", page.url()}};

      ToolResult nav = co_await call(browser, "browser_navigate", args0);
      INFO(nav.text());
      REQUIRE_FALSE(nav.is_error);
      CHECK(nav.text().find("title: Box test page") != std::string::npos);
      browser_pid = browser.browser_pid();
      REQUIRE(browser_pid > 0);
      CHECK(uid_of(browser_pid) == f.expected_uid);
      // Chromium listens on loopback only: DevToolsActivePort names the port it chose.
      std::ifstream port_file(f.profile / "DevToolsActivePort");
      std::string port_line;
      REQUIRE(std::getline(port_file, port_line));
      CHECK(std::stoi(port_line) > 0);
      // Chromium's singleton socket is in a folder of its own under /tmp.
      singleton = singleton_folder(f.profile);
      CHECK(singleton.parent_path() == "/tmp");
      CHECK(left_on_disk(singleton));

      const json args1 = json{{"ref", std::string("e1")}};

      // A ref before any snapshot is refused.
      ToolResult early = co_await call(browser, "browser_click", args1);
      CHECK(early.is_error);
      CHECK(early.text().find("no snapshot yet") != std::string::npos);

      ToolResult snap1 = co_await call(browser, "browser_snapshot", json::object());
      const std::string s1 = snap1.text();
      INFO(s1);
      REQUIRE_FALSE(snap1.is_error);
      CHECK(s1.find("- heading \"Welcome to the box\" [level=1] [ref=e") != std::string::npos);
      CHECK(s1.find("Nobody greeted yet") != std::string::npos);
      const std::string button = ref_of(s1, "button \"Greet\"");
      const std::string field = ref_of(s1, "textbox \"Name\"");
      REQUIRE_FALSE(button.empty());
      REQUIRE_FALSE(field.empty());
      // Children are indented below their parent.
      CHECK(s1.find("\n  - ") != std::string::npos);

      const json args2 = json{{"ref", field}, {"text", std::string("Ada")}};

      ToolResult typed = co_await call(browser, "browser_type", args2);
      INFO(typed.text());
      CHECK_FALSE(typed.is_error);
      const json args3 = json{{"ref", button}};
      ToolResult clicked = co_await call(browser, "browser_click", args3);
      INFO(clicked.text());
      CHECK_FALSE(clicked.is_error);
      CHECK(clicked.text().find("clicked button \"Greet\"") != std::string::npos);

      ToolResult snap2 = co_await call(browser, "browser_snapshot", json::object());
      const std::string s2 = snap2.text();
      INFO(s2);
      CHECK(s2.find("Hello, Ada!") != std::string::npos);
      CHECK(s2.find("button \"Greeted\"") != std::string::npos);
      CHECK(s2.find("textbox \"Name\"") != std::string::npos);
      CHECK(s2.find(": Ada") != std::string::npos);

      const json args4 = json{{"ref", button}};

      // The first snapshot's refs are stale now, even though the button is still there.
      ToolResult stale = co_await call(browser, "browser_click", args4);
      CHECK(stale.is_error);
      CHECK(stale.text().find("stale") != std::string::npos);
      const json args5 = json{{"ref", std::string("e999999")}};
      ToolResult unknown = co_await call(browser, "browser_click", args5);
      CHECK(unknown.is_error);
      CHECK(unknown.text().find("no element [ref=e999999]") != std::string::npos);

      // Typing replaces the field's content; submit presses Enter, which submits the form.
      const std::string field2 = ref_of(s2, "textbox \"Name\"");
      const json args6 = json{{"ref", field2}, {"text", std::string("Grace")}, {"submit", true}};
      ToolResult sub = co_await call(browser, "browser_type", args6);
      CHECK_FALSE(sub.is_error);
      const json args7 = json{{"key", std::string("Backspace")}};
      // browser_press goes to the focused field: Backspace drops the last letter, then Enter.
      ToolResult back = co_await call(browser, "browser_press", args7);
      CHECK_FALSE(back.is_error);
      const json args8 = json{{"key", std::string("Enter")}};
      ToolResult enter = co_await call(browser, "browser_press", args8);
      CHECK_FALSE(enter.is_error);
      const json args9 = json{{"key", std::string("Hyper+q")}};
      ToolResult bad_key = co_await call(browser, "browser_press", args9);
      CHECK(bad_key.is_error);
      ToolResult snap3 = co_await call(browser, "browser_snapshot", json::object());
      INFO(snap3.text());
      CHECK(snap3.text().find("Submitted Grac") != std::string::npos);
      CHECK(snap3.text().find("Submitted Grace") == std::string::npos);

      // A button is not a field.
      const json not_field_args =
          json{{"ref", ref_of(snap3.text(), "button \"Greeted\"")}, {"text", std::string("x")}};
      ToolResult not_field = co_await call(browser, "browser_type", not_field_args);
      CHECK(not_field.is_error);

      const json args10 = json{{"direction", std::string("down")}, {"amount", 500}};
      ToolResult down = co_await call(browser, "browser_scroll", args10);
      CHECK_FALSE(down.is_error);
      const json link_args = json{{"ref", ref_of(snap3.text(), "link \"Back to top\"")}};
      ToolResult to_link = co_await call(browser, "browser_scroll", link_args);
      INFO(to_link.text());
      CHECK_FALSE(to_link.is_error);
      ToolResult neither = co_await call(browser, "browser_scroll", json::object());
      CHECK(neither.is_error);

      ToolResult shot = co_await call(browser, "browser_screenshot", json::object());
      REQUIRE_FALSE(shot.is_error);
      const json* image = nullptr;
      for (const auto& c : shot.content)
        if (c["type"] == "image") image = &c;
      REQUIRE(image != nullptr);
      CHECK((*image)["mimeType"] == "image/png");
      auto png = base64_decode((*image)["data"].get<std::string>());
      REQUIRE(png.ok());
      REQUIRE(png->size() > 24);
      CHECK(png->substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
      CHECK(png->substr(12, 4) == "IHDR");
      auto be32 = [&](size_t at) {
        return (uint32_t{static_cast<uint8_t>((*png)[at])} << 24) |
               (uint32_t{static_cast<uint8_t>((*png)[at + 1])} << 16) |
               (uint32_t{static_cast<uint8_t>((*png)[at + 2])} << 8) |
               uint32_t{static_cast<uint8_t>((*png)[at + 3])};
      };
      CHECK(be32(16) == 1280);
      CHECK(be32(20) == 800);

      // Bad arguments are errors of the call; an unknown tool too.
      auto bad = co_await browser.call("browser_click", json::object());
      CHECK(bad.status().code() == Code::kInvalidArgument);
      auto none = co_await browser.call("browser_fly", json::object());
      CHECK(none.status().code() == Code::kNotFound);

      const json args11 = json{{"url", std::string("http://127.0.0.1:1/")}};

      // A page that cannot be reached is the tool's failure, not the call's.
      ToolResult refused = co_await call(browser, "browser_navigate", args11);
      CHECK(refused.is_error);
      INFO(refused.text());
      CHECK(refused.text().find("could not open http://127.0.0.1:1/: net::ERR_") !=
            std::string::npos);
      const json args12 = json{{"url", std::string("javascript:alert(1)")}};
      ToolResult scheme = co_await call(browser, "browser_navigate", args12);
      CHECK(scheme.is_error);

      // Each navigation ends with a document's load: one sent on by its script (kMovesOnPage),
      // a data: URL and about:blank too.
      const json moves_on = json{{"url", page.url() + "moves-on"}};
      ToolResult moved = co_await call(browser, "browser_navigate", moves_on);
      INFO(moved.text());
      CHECK_FALSE(moved.is_error);
      CHECK(moved.structured["loaded"] == true);
      CHECK(moved.text().find("still loading") == std::string::npos);
      for (const char* url : {"data:text/html,<title>Data</title>", "about:blank"}) {
        const json args = json{{"url", std::string(url)}};
        ToolResult r = co_await call(browser, "browser_navigate", args);
        INFO(r.text());
        CHECK_FALSE(r.is_error);
        CHECK(r.structured["loaded"] == true);
      }

      co_await browser.shutdown();
      CHECK(browser.browser_pid() == 0);
      co_await page.server.shutdown(net::after(2s));
    }());
  }
  // Every Chromium process of the profile is gone (killed, not merely orphaned), and so is
  // the folder of its singleton socket, which a killed Chromium does not remove itself.
  CHECK(all_gone(f.profile.string()));
  CHECK_FALSE(singleton.empty());
  CHECK_FALSE(left_on_disk(singleton));
  CHECK_FALSE(left_on_disk(f.profile / "SingletonSocket"));
}

TEST_CASE("BrowserTools: a browser that died is started again and old refs are refused",
          "[agent][browser][integration]") {
  Fixture f;
  asio::io_context io;
  PageServer page(io);
  std::vector<std::filesystem::path> singletons;  // each browser's, as it ran
  {
    BrowserTools browser(io.get_executor(), f.config);
    run_sync(io, [&]() -> asio::awaitable<void> {
      co_await asio::this_coro::throw_if_cancelled(false);
      const json args13 = json{{"url", page.url()}};
      ToolResult nav = co_await call(browser, "browser_navigate", args13);
      REQUIRE_FALSE(nav.is_error);
      ToolResult snap = co_await call(browser, "browser_snapshot", json::object());
      const std::string button = ref_of(snap.text(), "button \"Greet\"");
      REQUIRE_FALSE(button.empty());
      const pid_t first = browser.browser_pid();
      singletons.push_back(singleton_folder(f.profile));
      REQUIRE(::kill(first, SIGKILL) == 0);

      const json args14 = json{{"url", page.url()}};

      // The next call notices, reaps it and starts a new one.
      ToolResult again = co_await call(browser, "browser_navigate", args14);
      INFO(again.text());
      CHECK_FALSE(again.is_error);
      CHECK(browser.browser_pid() > 0);
      CHECK(browser.browser_pid() != first);
      // The dead browser's singleton folder went when it was found dead.
      CHECK_FALSE(left_on_disk(singletons.front()));
      singletons.push_back(singleton_folder(f.profile));
      const json args15 = json{{"ref", button}};
      ToolResult stale = co_await call(browser, "browser_click", args15);
      CHECK(stale.is_error);
      CHECK(stale.text().find("stale") != std::string::npos);
      co_await page.server.shutdown(net::after(2s));
    }());
    // The destructor kills the browser without shutdown().
  }
  CHECK(all_gone(f.profile.string()));
  REQUIRE(singletons.size() == 2);
  for (const auto& folder : singletons) {
    CHECK_FALSE(folder.empty());
    CHECK_FALSE(left_on_disk(folder));
  }
}

TEST_CASE("BrowserTools: JavaScript dialogs are reported and answered, never left to hang",
          "[agent][browser][integration]") {
  Fixture f;
  asio::io_context io;
  PageServer page(io);
  {
    BrowserTools browser(io.get_executor(), f.config);
    run_sync(io, [&]() -> asio::awaitable<void> {
      co_await asio::this_coro::throw_if_cancelled(false);
      const json open_dialogs = json{{"url", page.url() + "dialogs"}};
      ToolResult nav = co_await call(browser, "browser_navigate", open_dialogs);
      INFO(nav.text());
      REQUIRE_FALSE(nav.is_error);
      ToolResult snap = co_await call(browser, "browser_snapshot", json::object());
      const std::string s0 = snap.text();
      INFO(s0);

      // An alert: the click's result names it, and says how to answer it.
      const json click_alert = json{{"ref", ref_of(s0, "button \"Alert\"")}};
      ToolResult alerted = co_await call(browser, "browser_click", click_alert);
      INFO(alerted.text());
      CHECK_FALSE(alerted.is_error);
      CHECK(alerted.text().find("clicked button \"Alert\"") != std::string::npos);
      CHECK(alerted.text().find("alert dialog: \"Saved!\"") != std::string::npos);
      CHECK(alerted.text().find("browser_dialog") != std::string::npos);
      REQUIRE(alerted.structured.contains("dialog"));
      CHECK(alerted.structured["dialog"]["type"] == "alert");
      CHECK(alerted.structured["dialog"]["message"] == "Saved!");

      // The next snapshot shows the dialog; acting on the blocked page is refused.
      ToolResult blocked_snap = co_await call(browser, "browser_snapshot", json::object());
      INFO(blocked_snap.text());
      CHECK_FALSE(blocked_snap.is_error);
      CHECK(blocked_snap.text().find("alert dialog: \"Saved!\"") != std::string::npos);
      const json press_enter = json{{"key", std::string("Enter")}};
      ToolResult refused = co_await call(browser, "browser_press", press_enter);
      CHECK(refused.is_error);
      CHECK(refused.text().find("did nothing") != std::string::npos);

      const json ok = json{{"accept", true}};
      ToolResult answered = co_await call(browser, "browser_dialog", ok);
      INFO(answered.text());
      CHECK_FALSE(answered.is_error);
      CHECK(answered.text().find("accepted the alert dialog \"Saved!\"") != std::string::npos);
      ToolResult after_alert = co_await call(browser, "browser_snapshot", json::object());
      const std::string s1 = after_alert.text();
      INFO(s1);
      CHECK(s1.find("alerted") != std::string::npos);
      CHECK(s1.find("dialog:") == std::string::npos);

      // Nothing open: nothing to answer.
      ToolResult none = co_await call(browser, "browser_dialog", ok);
      CHECK(none.is_error);
      CHECK(none.text().find("no dialog is open") != std::string::npos);

      // A confirm dismissed: the page's script sees false.
      const json click_confirm = json{{"ref", ref_of(s1, "button \"Confirm\"")}};
      ToolResult confirm = co_await call(browser, "browser_click", click_confirm);
      INFO(confirm.text());
      CHECK(confirm.text().find("confirm dialog: \"Delete it?\"") != std::string::npos);
      const json cancel = json{{"accept", false}};
      ToolResult dismissed = co_await call(browser, "browser_dialog", cancel);
      CHECK(dismissed.text().find("dismissed the confirm dialog") != std::string::npos);
      ToolResult after_confirm = co_await call(browser, "browser_snapshot", json::object());
      const std::string s2 = after_confirm.text();
      INFO(s2);
      CHECK(s2.find("declined") != std::string::npos);

      // A prompt, answered with text.
      const json click_prompt = json{{"ref", ref_of(s2, "button \"Prompt\"")}};
      ToolResult prompt = co_await call(browser, "browser_click", click_prompt);
      INFO(prompt.text());
      CHECK(prompt.text().find("prompt dialog: \"Your name?\" (default answer: \"Bob\")") !=
            std::string::npos);
      CHECK(prompt.structured["dialog"]["default_prompt"] == "Bob");
      const json answer = json{{"accept", true}, {"prompt_text", std::string("Ada")}};
      ToolResult typed = co_await call(browser, "browser_dialog", answer);
      CHECK(typed.text().find("with \"Ada\"") != std::string::npos);
      ToolResult after_prompt = co_await call(browser, "browser_snapshot", json::object());
      const std::string s3 = after_prompt.text();
      INFO(s3);
      CHECK(s3.find("name: Ada") != std::string::npos);

      // A page that asks to stay (beforeunload, after a click gave it a user gesture): going
      // elsewhere leaves it anyway, and says so.
      const json click_arm = json{{"ref", ref_of(s3, "button \"Arm\"")}};
      ToolResult armed = co_await call(browser, "browser_click", click_arm);
      CHECK_FALSE(armed.is_error);
      ToolResult after_arm = co_await call(browser, "browser_snapshot", json::object());
      CHECK(after_arm.text().find("armed") != std::string::npos);
      const json home = json{{"url", page.url()}};
      ToolResult left = co_await call(browser, "browser_navigate", home);
      INFO(left.text());
      CHECK_FALSE(left.is_error);
      CHECK(left.text().find("beforeunload") != std::string::npos);
      CHECK(left.text().find("title: Box test page") != std::string::npos);

      // An alert while loading: the navigation reports it; the next navigation dismisses it.
      // The dismissed page then fires its own load event late, while the next page is still
      // loading: the result waits for the next page's load, and names its title.
      const json on_load = json{{"url", page.url() + "alert-on-load"}};
      ToolResult loading = co_await call(browser, "browser_navigate", on_load);
      INFO(loading.text());
      CHECK_FALSE(loading.is_error);
      CHECK(loading.text().find("alert dialog: \"Welcome aboard\"") != std::string::npos);
      const json slow = json{{"url", page.url() + "slow-head"}};
      ToolResult away = co_await call(browser, "browser_navigate", slow);
      INFO(away.text());
      CHECK_FALSE(away.is_error);
      CHECK(away.text().find("dismissed the alert dialog \"Welcome aboard\"") != std::string::npos);
      CHECK(away.text().find("title: Slow to load") != std::string::npos);
      CHECK(away.structured["loaded"] == true);

      co_await browser.shutdown();
      co_await page.server.shutdown(net::after(2s));
    }());
  }
  CHECK(all_gone(f.profile.string()));
}

TEST_CASE("BrowserTools: Chromium does not outlive an agent killed with SIGKILL",
          "[agent][browser][integration]") {
  Fixture f;
  int report[2];
  REQUIRE(::pipe(report) == 0);
  const pid_t agent = ::fork();
  REQUIRE(agent >= 0);
  if (agent == 0) {
    // The stand-in agent: starts Chromium through BrowserTools, says its pid, and waits to be
    // killed. It never returns into the test framework.
    ::close(report[0]);
    pid_t browser_pid = 0;
    try {
      asio::io_context io;
      BrowserTools browser(io.get_executor(), f.config);
      run_sync(io, [&]() -> asio::awaitable<void> {
        const json blank = json{{"url", std::string("about:blank")}};
        auto r = co_await browser.call("browser_navigate", blank);
        if (r.ok() && !r->is_error) browser_pid = browser.browser_pid();
      }());
      [[maybe_unused]] ssize_t n = ::write(report[1], &browser_pid, sizeof browser_pid);
      while (true) ::pause();
    } catch (...) {
    }
    ::_exit(1);
  }
  ::close(report[1]);
  pid_t browser_pid = 0;
  const ssize_t n = ::read(report[0], &browser_pid, sizeof browser_pid);
  ::close(report[0]);
  const bool started = n == static_cast<ssize_t>(sizeof browser_pid) && browser_pid > 0;
  if (started) CHECK(!processes_naming(f.profile.string()).empty());
  ::kill(agent, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(agent, &status, 0) == agent);
  REQUIRE(started);
  // No destructor ran in the killed agent: only the parent-death signal can end Chromium.
  const bool gone = all_gone(f.profile.string());
  CHECK(gone);
  if (!gone) {
    for (pid_t p : processes_naming(f.profile.string())) ::kill(p, SIGKILL);
    all_gone(f.profile.string());
  }
  // The killed browser left its singleton folder under /tmp; the next start on the profile
  // removes it.
  const std::filesystem::path left = singleton_folder(f.profile);
  REQUIRE_FALSE(left.empty());
  CHECK(left_on_disk(left));
  CHECK(navigate_blank(f.config));
  CHECK_FALSE(left_on_disk(left));
}

TEST_CASE(
    "BrowserTools: the profile's singleton link never lets the agent remove what the "
    "browser's user could not",
    "[agent][browser][integration]") {
  Fixture f;
  if (f.expected_uid == ::geteuid()) {
    WARN("needs root and the nobody account: the agent then cleans the profile as nobody");
    return;
  }
  // Root's own folder of Chromium's name, with an entry of the names the cleanup unlinks; the
  // user's profile links to it.
  char templ[] = "/tmp/org.chromium.Chromium.cbtestXXXXXX";
  REQUIRE(::mkdtemp(templ) != nullptr);
  const std::filesystem::path roots(templ);
  struct Removed {  // however the test ends
    std::filesystem::path path;
    ~Removed() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } removed{roots};
  { std::ofstream(roots / "SingletonSocket") << "root's"; }
  { std::ofstream(roots / "SingletonCookie") << "root's"; }
  std::filesystem::create_symlink(roots / "SingletonSocket", f.profile / "SingletonSocket");
  REQUIRE(::lchown((f.profile / "SingletonSocket").c_str(), f.expected_uid, gid_t(-1)) == 0);
  CHECK(navigate_blank(f.config));
  // The start's cleanup ran as nobody, who cannot write in root's folder.
  CHECK(left_on_disk(roots / "SingletonSocket"));
  CHECK(left_on_disk(roots / "SingletonCookie"));
}

TEST_CASE(
    "BrowserTools: a missing profile folder is created by the browser's user, never "
    "through a link into root's",
    "[agent][browser][integration]") {
  Fixture f;
  if (f.expected_uid == ::geteuid()) {
    WARN("needs root and the nobody account: the agent then creates the profile as nobody");
    return;
  }
  f.config.profile_dir = f.profile / "a" / "b";
  CHECK(navigate_blank(f.config));
  for (const auto& dir : {f.profile / "a", f.profile / "a" / "b"}) {
    struct stat st;
    REQUIRE(::stat(dir.c_str(), &st) == 0);
    CHECK(st.st_uid == f.expected_uid);
    CHECK((st.st_mode & 07777) == 0700);
  }
  // A link in the path to a folder of root's (0700, as test::TempDir makes it): nobody cannot
  // create anything there, and the agent does not create it for them.
  test::TempDir roots;
  std::filesystem::create_symlink(roots.path(), f.profile / "link");
  f.config.profile_dir = f.profile / "link" / "c";
  CHECK_FALSE(navigate_blank(f.config));
  CHECK_FALSE(left_on_disk(roots.path() / "c"));
}

TEST_CASE("render_snapshot: roles, names, states, refs and the cap", "[agent][browser][unit]") {
  auto node = [](std::string id, std::string role, std::string name, std::vector<std::string> kids,
                 int64_t backend) {
    json n = {{"nodeId", id}, {"role", {{"type", "role"}, {"value", role}}}, {"childIds", kids}};
    if (!name.empty()) n["name"] = {{"type", "computedString"}, {"value", name}};
    if (backend > 0) n["backendDOMNodeId"] = backend;
    return n;
  };
  json nodes = json::array();
  nodes.push_back(node("1", "RootWebArea", "Page", {"2"}, 10));
  nodes.push_back(node("2", "generic", "", {"3", "5", "6", "7"}, 11));
  nodes.back()["parentId"] = "1";
  json h = node("3", "heading", "Welcome", {"4"}, 12);
  h["parentId"] = "2";
  h["properties"] =
      json::array({{{"name", "level"}, {"value", {{"type", "integer"}, {"value", 1}}}}});
  nodes.push_back(h);
  json t = node("4", "StaticText", "Welcome", {}, 13);  // repeats the heading: left out
  t["parentId"] = "3";
  nodes.push_back(t);
  json box = node("5", "textbox", "Name", {}, 14);
  box["parentId"] = "2";
  box["value"] = {{"type", "string"}, {"value", "Ada"}};
  nodes.push_back(box);
  json ign = node("6", "button", "Hidden", {}, 15);
  ign["parentId"] = "2";
  ign["ignored"] = true;
  nodes.push_back(ign);
  json b = node("7", "button", "Say \"hi\"", {}, 16);
  b["parentId"] = "2";
  b["properties"] =
      json::array({{{"name", "disabled"}, {"value", {{"type", "boolean"}, {"value", true}}}}});
  nodes.push_back(b);

  Snapshot s = render_snapshot(nodes, 5, 100, 10000);
  CHECK(s.text ==
        "- document \"Page\" [ref=e5]\n"
        "  - heading \"Welcome\" [level=1] [ref=e6]\n"
        "  - textbox \"Name\" [ref=e7]: Ada\n"
        "  - button \"Say \\\"hi\\\"\" [disabled] [ref=e8]\n");
  CHECK(s.next_ref == 9);
  REQUIRE(s.refs.count("e7") == 1);
  CHECK(s.refs["e7"].backend_node_id == 14);
  CHECK(s.refs["e7"].label == "textbox \"Name\"");
  CHECK_FALSE(s.cut);

  Snapshot cut = render_snapshot(nodes, 1, 2, 10000);
  CHECK(cut.cut);
  CHECK(cut.lines_total == 4);
  CHECK(cut.text.find("[snapshot cut: 2 of 4 lines shown") != std::string::npos);
  // Only refs on lines shown are handed out.
  CHECK(cut.refs.size() == 2);

  CHECK(render_snapshot(json::array(), 1, 10, 100).text == "(the page is empty)\n");
}

}  // namespace
}  // namespace cb::agent
