#pragma once
// The browser tools (src/tools/browser_tools.json is their contract; README.md §Browser
// tools): browser_navigate, browser_snapshot, browser_click, browser_type, browser_press,
// browser_scroll, browser_dialog and browser_screenshot, over the Chrome DevTools Protocol
// (src/cdp) to a headless Chromium in the box.
//
// The browser: started on the first browser_* call, as the box's desktop user (the account
// resolve_exec_user() picks, as for Exec), headless, in its own session and process group,
// with `--remote-debugging-port=0` (Chromium binds 127.0.0.1 and writes the port it got to
// DevToolsActivePort in its profile dir) and its own profile dir (default
// ~/.cache/cocoonbox/chromium of that user). One page, driven through a flat CDP session. A
// browser that died is started again by the next call; one left running by a crashed agent
// (found by its profile dir) is killed first. shutdown() and the destructor kill the whole
// process group and whatever else still runs on the profile dir (Chromium's crash handler
// leaves the group).
//
// Snapshots: the page's accessibility tree as an indented list, one element per line, each
// with a ref (`- button "Save" [ref=e7]`). Refs are numbered on from one snapshot to the next,
// so a ref from an older snapshot is recognised and refused instead of naming some other
// element. They are valid until the next snapshot or navigation.
//
// Dialogs: a page's alert, confirm, prompt or beforeunload blocks the page (and every DevTools
// command it would answer) until it is handled. Page.javascriptDialogOpening interrupts the
// command that waits (cdp::Connection's interrupting events); the call's result then names the
// dialog (type, message, a prompt's default) and says to answer it with browser_dialog. While
// it is open, browser_snapshot shows it instead of the blocked page and the tools that act on
// the page refuse with the same note; browser_navigate dismisses it, and accepts (leaves the
// page) a beforeunload dialog its own navigation raises.
//
// The browser gets SIGKILL as its parent-death signal (PR_SET_PDEATHSIG, set in the child after
// fork), so an agent killed with -9 does not leave Chromium running: its helpers (zygote,
// renderers) follow the browser process when it dies.
//
// Results follow MCP's CallToolResult (ToolResult, as BoxTools). A failure of the tool itself
// (a stale ref, a page that does not load, a browser that cannot start) is a result with
// is_error; only an unknown tool (kNotFound) or arguments that break the contract
// (kInvalidArgument naming the field) are errors of the call. Calls run one at a time (a second
// waits for the first); cancelling the awaiting coroutine (Asio per-operation cancellation)
// abandons the call's DevTools command and returns a "cancelled" result.
//
// Affinity: the agent's io_context.

#include "base/result.h"
#include "cdp/session.h"
#include "net/asio.h"
#include "proc/spawn.h"
#include "roles/agent/box_tools.h"
#include "roles/agent/exec_service.h"
#include "roles/agent/tool_set.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>

namespace cb::agent {

struct BrowserConfig {
  // The account the browser runs as when the agent is root (ExecConfig::desktop_user).
  std::string desktop_user = "user";
  // The program; "" looks for chromium, chromium-browser, google-chrome-stable and
  // google-chrome in the Exec PATH.
  std::string chromium;
  // The profile dir; "" is <home>/.cache/cocoonbox/chromium of the account.
  std::filesystem::path profile_dir;
  int width = 1280;
  int height = 800;
  size_t snapshot_lines = 600;
  size_t snapshot_bytes = 40000;
  std::chrono::milliseconds start_timeout{30000};
  std::chrono::milliseconds navigate_timeout{30000};
  std::chrono::milliseconds command_timeout{15000};
};

// What a snapshot's ref stands for.
struct SnapshotRef {
  int64_t backend_node_id = 0;  // DOM.BackendNodeId
  std::string label;            // `button "Save"`, for results
};

struct Snapshot {
  std::string text;                         // the lines, and a note when cut
  std::map<std::string, SnapshotRef> refs;  // "e7" -> the element
  uint64_t next_ref = 0;                    // the first number the next snapshot may use
  size_t lines_total = 0;                   // lines before the cap
  bool cut = false;
};

// Renders Accessibility.getFullAXTree's |nodes| as the snapshot list: depth-first from the
// root, ignored nodes and unnamed generic containers left out (their children moved up), a
// text node that repeats its parent's name left out, refs from e|first_ref| on, at most
// |max_lines| lines and |max_bytes| bytes. A pure function (tested without a browser).
Snapshot render_snapshot(const nlohmann::json& nodes, uint64_t first_ref, size_t max_lines,
                         size_t max_bytes);

// The defaults, for the desktop user of |exec|.
BrowserConfig browser_config_for(const ExecConfig& exec);

// A ToolSet (tool_set.h): the agent's model loop offers these tools next to the box tools.
class BrowserTools final : public ToolSet {
 public:
  BrowserTools(net::Executor executor, BrowserConfig config);
  // Kills the browser (SIGKILL to its group and its profile's processes) without waiting.
  ~BrowserTools() override;
  BrowserTools(const BrowserTools&) = delete;
  BrowserTools& operator=(const BrowserTools&) = delete;

  // The contract: MCP Tool objects (tools::browser_tools()).
  nlohmann::json defs() const override;
  // True for the names defs() lists.
  static bool handles(std::string_view name);

  // Runs the tool |name| with |arguments|. Errors: kNotFound (no such tool), kInvalidArgument
  // (arguments do not fit the contract).
  asio::awaitable<Result<ToolResult>> call(std::string_view name,
                                           const nlohmann::json& arguments) override;

  // Kills the browser and reaps it (waits at most a few seconds). Idempotent.
  asio::awaitable<void> shutdown();

  // The browser's pid, 0 when none runs (tests).
  pid_t browser_pid() const { return process_ ? process_->pid() : 0; }
  // The profile dir of the running browser ("" before the first start).
  const std::filesystem::path& profile_dir() const { return profile_; }

 private:
  struct Busy;

  asio::awaitable<ToolResult> run(std::string_view name, const nlohmann::json& args);
  // Starts the browser if needed and connects to its page. The error is the result's text.
  asio::awaitable<Status> ensure();
  asio::awaitable<Status> start();
  asio::awaitable<Status> attach();
  // Forget the connection; if the process died, reap it.
  asio::awaitable<void> lost();
  void kill_now();

  // One DevTools command on the page's session (|page| false: on the browser).
  asio::awaitable<Result<nlohmann::json>> page(std::string method, nlohmann::json params);
  asio::awaitable<Result<nlohmann::json>> evaluate(std::string expression);
  // Waits for the load event of the document |loader_id| names (Page.lifecycleEvent "load";
  // the plain Page.loadEventFired names no document, and the page a dialog held may fire
  // its own late), or of the document that replaced it in |frame_id| (a redirect by script).
  // Errors as cdp::Connection::wait_event().
  asio::awaitable<Status> wait_loaded(const std::string& frame_id, std::string loader_id,
                                      net::Deadline deadline);
  // The element behind |ref|, or a message saying why not.
  Result<SnapshotRef> resolve_ref(const std::string& ref) const;
  asio::awaitable<Status> press_key(std::string_view spec);
  ToolResult failure(const Status& s) const;

  asio::awaitable<ToolResult> navigate(const nlohmann::json& args);
  asio::awaitable<ToolResult> snapshot();
  asio::awaitable<ToolResult> click(const nlohmann::json& args);
  asio::awaitable<ToolResult> type(const nlohmann::json& args);
  asio::awaitable<ToolResult> press(const nlohmann::json& args);
  asio::awaitable<ToolResult> scroll(const nlohmann::json& args);
  asio::awaitable<ToolResult> screenshot();
  asio::awaitable<ToolResult> dialog(const nlohmann::json& args);

  // Takes the dialog events queued on the connection, in order, into dialog_.
  void absorb_dialog_events();
  // Page.handleJavaScriptDialog without being interrupted by the dialog's own (unread)
  // opening event. Errors as cdp::Connection::call().
  asio::awaitable<Status> handle_dialog(bool accept, const std::string* prompt_text);
  // "the page opened a confirm dialog: ..." with what to do about it.
  std::string dialog_note() const;
  nlohmann::json dialog_json() const;

  net::Executor executor_;
  BrowserConfig config_;
  std::filesystem::path profile_;
  // The browser's user, whose file system identity cleans the profile (UserFsScope in the
  // .cc), once start() resolved it.
  std::optional<ExecUser> profile_user_;
  std::optional<proc::Process> process_;
  std::unique_ptr<cdp::Connection> cdp_;
  uint16_t port_ = 0;
  std::string ws_path_;
  std::string session_;  // the page's flat session id

  std::map<std::string, SnapshotRef> refs_;
  uint64_t next_ref_ = 1;
  uint64_t refs_from_ = 0;  // refs below this number are stale; 0: no snapshot yet
  std::string refs_gone_;   // why the last refs went away ("" : a newer snapshot)

  // The page's JavaScript dialog, as the last Page.javascriptDialog* event left it.
  struct Dialog {
    bool open = false;
    std::string type;  // alert | confirm | prompt | beforeunload
    std::string message;
    std::string default_prompt;
    std::string url;
  };
  Dialog dialog_;
  uint64_t dialogs_opened_ = 0;
  bool interrupted_ = false;  // a command of the current call was cut short by a dialog

  bool busy_ = false;
  std::list<net::Timer*> waiters_;
};

}  // namespace cb::agent
