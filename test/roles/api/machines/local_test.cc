#include "roles/api/machines/local.h"

#include "net/stream.h"
#include "roles/api/machines/local_internal.h"

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_future.hpp>
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <future>
#include <grp.h>
#include <set>
#include <signal.h>
#include <sstream>
#include <stdlib.h>
#include <string>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace cb::api::machines {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

bool is_root() { return ::geteuid() == 0; }

class TempDir {
 public:
  explicit TempDir(const fs::path& base = fs::temp_directory_path()) {
    std::string pattern = (base / "cb-machines-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data()) != nullptr ? pattern : std::string();
    // Searchable: in plain mode the box's user reaches box_dir through this directory.
    if (!path_.empty()) ::chmod(path_.c_str(), 0711);
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string unique_id(std::string_view tag) {
  static int n = 0;
  return fmt::format("{}-{}-{}", tag, ::getpid(), ++n);
}

LocalOptions test_options() {
  LocalOptions o;
  // Per test process: parallel ctest runs never share (or remove) each other's parent.
  o.cgroup_parent = fmt::format("cocoonbox-test-{}", ::getpid());
  o.stop_grace = 300ms;
  return o;
}

// Runs |task| on a fresh io_context; fails the test if it takes longer than |limit|.
template <typename T>
T run(asio::awaitable<T> task, std::chrono::seconds limit = 60s) {
  asio::io_context io;
  std::optional<T> out;
  std::exception_ptr error;
  bool done = false;
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { out.emplace(co_await std::move(task)); },
      [&](std::exception_ptr e) {
        error = e;
        done = true;
      });
  io.run_for(limit);
  REQUIRE(done);
  if (error) std::rethrow_exception(error);
  return std::move(*out);
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

bool wait_for(const std::function<bool()>& pred, std::chrono::milliseconds limit = 10s) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return pred();
}

// The counter the fake agent writes; "echo n > file" truncates first, so retry an empty read.
long read_counter(const fs::path& p) {
  for (int i = 0; i < 50; ++i) {
    std::string s = read_text(p);
    if (!s.empty()) return std::stol(s);
    std::this_thread::sleep_for(5ms);
  }
  return -1;
}

bool gone(pid_t pid) {
  auto st = internal::read_proc_stat(pid);
  return !st.ok() || st->state == 'Z' || st->state == 'X';
}

// The fake agent: reports what it sees of its box, then counts in the workspace forever.
constexpr const char* kAgentScript = R"sh(
R="$COCOONBOX_RUN_DIR"; W="$COCOONBOX_WORKSPACE"
echo $$ > "$R/pid"
id -u > "$R/uid"
cat /proc/sys/kernel/hostname > "$R/hostname"
awk '$5 == "/" {print $6}' /proc/self/mountinfo > "$R/rootopts"
if touch "$PROBE_DIR/x" 2>/dev/null; then echo rw; else echo ro; fi > "$R/probe"
ls -A /tmp | wc -l > "$R/tmpcount"
ls -A /home > "$R/home"
cat "$R/identity" > "$R/identity-seen" 2>/dev/null
echo "$1" > "$R/arg1"
echo ready > "$R/ready"
n=0; while :; do n=$((n+1)); echo $n > "$W/counter"; sleep 0.05; done
)sh";

// A unix-socket echo server as the agent: answers "echo:<what it read>" on each connection.
constexpr const char* kEchoAgent = R"py(
import os, socket
s = socket.socket(socket.AF_UNIX)
s.bind(os.environ["COCOONBOX_RUN_DIR"] + "/agent.sock")
s.listen(8)
while True:
    c, _ = s.accept()
    c.sendall(b"echo:" + c.recv(100))
    c.close()
)py";

MachineSpec counting_spec(const fs::path& base, const std::string& id,
                          const fs::path& probe_dir = "/nonexistent") {
  MachineSpec spec;
  spec.box_id = id;
  spec.image = "host";
  spec.box_dir = base / "boxes" / id;
  spec.agent_argv = {"/bin/sh", "-c", kAgentScript, "sh", "/run/cocoonbox/argcheck"};
  spec.env = {"PROBE_DIR=" + probe_dir.string()};
  return spec;
}

// Kills and removes whatever the listed boxes left behind, even when a test failed half
// way and whatever Backend object started them is gone. It finds the trees through their
// machine.json, so declare it after the TempDir that holds box_dir (destroyed before it).
class Janitor {
 public:
  explicit Janitor(LocalOptions options) : options_(std::move(options)) {}
  ~Janitor() {
    for (const auto& [id, box_dir] : boxes_) clean(id, box_dir);
    auto root = options_.cgroup_v2_root ? options_.cgroup_v2_root : internal::find_cgroup2_mount();
    if (root) ::rmdir((*root / options_.cgroup_parent).c_str());
  }
  Janitor(const Janitor&) = delete;
  Janitor& operator=(const Janitor&) = delete;

  void watch(const MachineSpec& spec) { boxes_.emplace_back(spec.box_id, spec.box_dir); }

 private:
  void clean(const std::string& id, const fs::path& box_dir) {
    auto root = options_.cgroup_v2_root ? options_.cgroup_v2_root : internal::find_cgroup2_mount();
    std::optional<fs::path> cgroup;
    if (root) cgroup = *root / options_.cgroup_parent / id;
    if (cgroup && fs::exists(*cgroup)) {
      (void)internal::write_file(*cgroup / "cgroup.freeze", "0");
      (void)internal::write_file(*cgroup / "cgroup.kill", "1");
    }
    std::string record = read_text(box_dir / kMachineRecord);
    auto at = record.find("\"pid\":");
    if (at != std::string::npos) {
      pid_t pid = std::atoi(record.c_str() + at + 6);
      if (pid > 1 && !gone(pid)) {
        ::kill(-pid, SIGCONT);
        ::kill(-pid, SIGKILL);
        ::kill(pid, SIGKILL);
      }
      wait_for([&] { return gone(pid); }, 5s);
      ::waitpid(pid, nullptr, WNOHANG);
    }
    if (cgroup) {
      wait_for([&] { return internal::read_keyed(*cgroup / "cgroup.events", "populated") != 1; },
               5s);
      ::rmdir(cgroup->c_str());
    }
  }

  LocalOptions options_;
  std::vector<std::pair<std::string, fs::path>> boxes_;
};

std::unique_ptr<LocalBackend> make_backend(const LocalOptions& options) {
  auto created = LocalBackend::create(options);
  INFO(created.status().to_string());
  REQUIRE(created.ok());
  return std::move(created).value();
}

// start() + wait until the fake agent said "ready".
void start_counting(LocalBackend& backend, const MachineSpec& spec) {
  Status started = run(backend.start(spec));
  INFO(started.to_string() << "\nagent.log: " << read_text(spec.box_dir / kAgentLog));
  REQUIRE(started.ok());
  REQUIRE(wait_for([&] { return fs::exists(spec.box_dir / "run" / "ready"); }));
}

bool counter_advances(const fs::path& counter, std::chrono::milliseconds within = 10s) {
  long first = read_counter(counter);
  return wait_for([&] { return read_counter(counter) > first; }, within);
}

void release_and_check_gone(LocalBackend& backend, const MachineSpec& spec) {
  auto pids = backend.processes(spec.box_id);
  REQUIRE(pids.ok());
  auto cgroup = backend.cgroup_parent_dir();
  Status released = run(backend.release(spec.box_id, DataPolicy::kKeep));
  REQUIRE(released.ok());
  auto state = backend.status(spec.box_id);
  REQUIRE(state.ok());
  CHECK(*state == MachineState::kAbsent);
  for (pid_t pid : *pids) CHECK(gone(pid));
  if (cgroup) CHECK(!fs::exists(*cgroup / spec.box_id));
  CHECK(!fs::exists(spec.box_dir / kMachineRecord));
  CHECK(fs::exists(spec.box_dir / "workspace" / "counter"));  // data kept
}

TEST_CASE("LocalBackend: an isolated box has its own namespaces, a read-only / and its user",
          "[api][machines][integration]") {
  if (!is_root()) {
    WARN("not root: namespaces are not available, skipping");
    return;
  }
  LocalOptions options = test_options();
  TempDir dir;
  // World-writable on the host, so only a read-only mount can stop the box's user.
  TempDir probe("/var/tmp");
  ::chmod(probe.path().c_str(), 0777);
  // Declared after the directories: it must kill the trees before their box_dir goes.
  Janitor janitor(options);
  auto backend = make_backend(options);
  if (!backend->isolated()) {
    WARN("namespaces refused here: " << backend->isolation_note());
    return;
  }
  MachineSpec spec = counting_spec(dir.path(), unique_id("iso"), probe.path());
  janitor.watch(spec);
  REQUIRE(backend->deliver_identity(spec, R"({"box_id":"x"})").ok());
  start_counting(*backend, spec);
  const fs::path run_dir = spec.box_dir / "run";

  CHECK(backend->isolated());
  // Pid 1 is the init, the agent comes next: a pid from the box's own numbering.
  CHECK(std::stoi(read_text(run_dir / "pid")) <= 3);
  CHECK(read_text(run_dir / "hostname") == spec.box_id);
  CHECK(read_text(run_dir / "rootopts").rfind("ro", 0) == 0);
  CHECK(read_text(run_dir / "probe") == "ro");
  CHECK(!fs::exists(probe.path() / "x"));
  CHECK(read_text(run_dir / "tmpcount") == "0");
  CHECK(read_text(run_dir / "home") == "user");
  CHECK(read_text(run_dir / "identity-seen") == R"({"box_id":"x"})");
  CHECK(read_text(run_dir / "arg1") == "/run/cocoonbox/argcheck");
  REQUIRE(backend->box_user());
  // With the privilege split the agent is root of the box's user namespace (and the box
  // user on the host: the counter below); without it, the box user.
  CHECK(std::stoul(read_text(run_dir / "uid")) ==
        (backend->desktop_user() ? 0 : backend->box_user()->uid));

  // /workspace is <box_dir>/workspace; the agent's files in it are the box user's.
  const fs::path counter = spec.box_dir / "workspace" / "counter";
  CHECK(counter_advances(counter));
  struct stat st;
  REQUIRE(::stat(counter.c_str(), &st) == 0);
  CHECK(st.st_uid == backend->box_user()->uid);

  auto state = backend->status(spec.box_id);
  REQUIRE(state.ok());
  CHECK(*state == MachineState::kRunning);
  auto pids = backend->processes(spec.box_id);
  REQUIRE(pids.ok());
  REQUIRE(!pids->empty());
  CHECK(internal::pid_namespace_of(pids->front()) != internal::pid_namespace_of(::getpid()));
  CHECK(read_text(fs::path("/proc") / std::to_string(pids->front()) / "comm") == "cocoonbox-init");

  release_and_check_gone(*backend, spec);
}

// Hibernate, check the tree is frozen, wake, check the same processes go on.
void check_freeze_cycle(const LocalOptions& options, FreezeMethod expected) {
  TempDir dir;
  Janitor janitor(options);
  auto backend = make_backend(options);
  if (backend->freeze_method() != expected) {
    WARN("this host freezes by " << to_string(backend->freeze_method()) << ", skipping");
    return;
  }
  MachineSpec spec = counting_spec(dir.path(), unique_id("frz"));
  janitor.watch(spec);
  start_counting(*backend, spec);
  const fs::path counter = spec.box_dir / "workspace" / "counter";
  REQUIRE(counter_advances(counter));
  auto before = backend->processes(spec.box_id);
  REQUIRE(before.ok());
  REQUIRE(before->size() >= 2);
  std::string agent_pid = read_text(spec.box_dir / "run" / "pid");

  Status frozen = run(backend->hibernate(spec.box_id));
  INFO(frozen.to_string());
  REQUIRE(frozen.ok());
  auto state = backend->status(spec.box_id);
  REQUIRE(state.ok());
  CHECK(*state == MachineState::kFrozen);
  if (expected == FreezeMethod::kCgroupFreezer) {
    auto cgroup = *backend->cgroup_parent_dir() / spec.box_id;
    CHECK(internal::read_keyed(cgroup / "cgroup.events", "frozen") == 1);
  } else {
    auto frozen_pids = backend->processes(spec.box_id);
    REQUIRE(frozen_pids.ok());
    for (pid_t pid : *frozen_pids) CHECK(internal::stopped_or_stopping(pid));
    auto init = internal::read_proc_stat(frozen_pids->front());
    REQUIRE(init.ok());
    CHECK(init->state == 'T');
  }
  // Not a timing assertion: any progress at all in half a second would be a bug.
  long a = read_counter(counter);
  std::this_thread::sleep_for(500ms);
  long b = read_counter(counter);
  CHECK(a == b);
  Status again = run(backend->hibernate(spec.box_id));
  CHECK(again.ok());  // idempotent

  Status woken = run(backend->wake(spec.box_id));
  REQUIRE(woken.ok());
  state = backend->status(spec.box_id);
  REQUIRE(state.ok());
  CHECK(*state == MachineState::kRunning);
  CHECK(wait_for([&] { return read_counter(counter) > b; }));
  // The same tree: the same init, the same agent, in both numberings.
  auto after = backend->processes(spec.box_id);
  REQUIRE(after.ok());
  CHECK(after->front() == before->front());
  CHECK(read_text(spec.box_dir / "run" / "pid") == agent_pid);
  std::set<pid_t> after_set(after->begin(), after->end());
  int kept = 0;
  for (pid_t pid : *before) {
    if (read_text(fs::path("/proc") / std::to_string(pid) / "comm") == "sh") {
      CHECK(after_set.count(pid) == 1);
      ++kept;
    }
  }
  CHECK(kept == 1);

  // A hibernated box can be released as it is.
  Status refrozen = run(backend->hibernate(spec.box_id));
  REQUIRE(refrozen.ok());
  release_and_check_gone(*backend, spec);
}

TEST_CASE("LocalBackend: hibernate and wake with the cgroup v2 freezer",
          "[api][machines][integration]") {
  if (!is_root()) {
    WARN("not root: no writable cgroup, skipping");
    return;
  }
  check_freeze_cycle(test_options(), FreezeMethod::kCgroupFreezer);
}

TEST_CASE("LocalBackend: hibernate and wake with SIGSTOP when there are no cgroups",
          "[api][machines][integration]") {
  LocalOptions options = test_options();
  options.disable_cgroups = true;
  SECTION("isolated (when root)") { check_freeze_cycle(options, FreezeMethod::kSigstop); }
  SECTION("plain processes") {
    options.force_plain_processes = true;
    check_freeze_cycle(options, FreezeMethod::kSigstop);
  }
}

// The fake agent of the privilege split: as the box's root it keeps a secret in its data dir,
// then runs a "tool" as the desktop account (setpriv, as the real agent's spawn would) that
// tries to read it and writes the user's directories; and it tries to leave its mapping.
constexpr const char* kSplitAgentScript = R"sh(
R="$COCOONBOX_RUN_DIR"; A=/var/lib/cocoonbox-agent
id -u > "$R/uid"
echo "$COCOONBOX_DESKTOP_USER" > "$R/desktop-env"
echo secret > "$A/agent.db"; chmod 600 "$A/agent.db"
cat /etc/shadow > /dev/null 2> "$R/shadow"; echo $? >> "$R/shadow"
setpriv --reuid=65534 --regid=65534 --clear-groups true 2> "$R/nobody"; echo $? >> "$R/nobody"
setpriv --reuid="$DESK_UID" --regid="$DESK_GID" --clear-groups sh -c '
  id -u > /home/user/tool-uid
  cat /var/lib/cocoonbox-agent/agent.db > /home/user/db 2>&1
  ls /var/lib/cocoonbox-agent > /home/user/dir 2>&1
  echo hi > /home/user/written; echo hi > /workspace/written
  echo hi >> /home/user/old.txt 2> /home/user/old-err
'
echo ready > "$R/ready"
while :; do sleep 1; done
)sh";

std::string status_line(pid_t pid, std::string_view key) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) == 0) return line;
  }
  return {};
}

TEST_CASE("LocalBackend: as root, the agent and its tools run as different host accounts",
          "[api][machines][integration]") {
  if (!is_root()) {
    WARN("not root: there is no privilege split to test");
    return;
  }
  LocalOptions options = test_options();
  TempDir dir;
  Janitor janitor(options);
  auto backend = make_backend(options);
  if (!backend->isolated()) {
    WARN("namespaces refused here: " << backend->isolation_note());
    return;
  }
  INFO(backend->isolation_note());
  REQUIRE(backend->desktop_user());
  REQUIRE(backend->box_user());
  const proc::User& agent = *backend->box_user();
  const proc::User& desk = *backend->desktop_user();
  CHECK(desk.name == agent.name + "-desk");
  CHECK(desk.uid != agent.uid);
  CHECK(backend->isolation_note().find("tools as " + desk.name) != std::string::npos);

  MachineSpec spec;
  spec.box_id = unique_id("split");
  spec.image = "host";
  spec.box_dir = dir.path() / "boxes" / spec.box_id;
  spec.agent_argv = {"/bin/sh", "-c", kSplitAgentScript};
  spec.env = {fmt::format("DESK_UID={}", desk.uid), fmt::format("DESK_GID={}", desk.gid)};
  janitor.watch(spec);
  // A box from before the split: its home and what is in it belong to the agent's account.
  const fs::path home = spec.box_dir / "home";
  fs::create_directories(home);
  { std::ofstream(home / "old.txt") << "old\n"; }
  REQUIRE(::chown(home.c_str(), agent.uid, agent.gid) == 0);
  REQUIRE(::chown((home / "old.txt").c_str(), agent.uid, agent.gid) == 0);

  REQUIRE(backend->deliver_identity(spec, "{}").ok());
  Status started = run(backend->start(spec));
  INFO(started.to_string() << "\nagent.log: " << read_text(spec.box_dir / kAgentLog));
  REQUIRE(started.ok());
  const fs::path run_dir = spec.box_dir / "run";
  REQUIRE(wait_for([&] { return fs::exists(run_dir / "ready"); }));

  // The agent: root in the box, the box user on the host, with exactly two ids mapped.
  CHECK(read_text(run_dir / "uid") == "0");
  CHECK(read_text(run_dir / "desktop-env") == desk.name);
  auto pids = backend->processes(spec.box_id);
  REQUIRE(pids.ok());
  REQUIRE(!pids->empty());
  for (pid_t pid : *pids) {
    std::string uid = status_line(pid, "Uid:");
    INFO("pid " << pid << ": " << uid);
    CHECK(uid == fmt::format("Uid:\t{0}\t{0}\t{0}\t{0}", agent.uid));
  }
  std::istringstream map(read_text(fs::path("/proc") / std::to_string(pids->front()) / "uid_map"));
  std::vector<std::vector<unsigned long>> entries;
  for (std::string line; std::getline(map, line);) {
    std::istringstream words(line);
    unsigned long inside = 0, outside = 0, count = 0;
    words >> inside >> outside >> count;
    entries.push_back({inside, outside, count});
  }
  CHECK(entries ==
        std::vector<std::vector<unsigned long>>{{0, agent.uid, 1}, {desk.uid, desk.uid, 1}});
  CHECK(fs::read_symlink(fmt::format("/proc/{}/ns/user", pids->front())) !=
        fs::read_symlink("/proc/self/ns/user"));
  // Root of its namespace, yet no power over the host's files or other ids.
  CHECK(read_text(run_dir / "shadow").find("Permission denied") != std::string::npos);
  CHECK(read_text(run_dir / "nobody").back() != '0');

  // The tool: the desktop uid, kept out of the agent's data, at home in /home/user.
  CHECK(read_text(home / "tool-uid") == std::to_string(desk.uid));
  CHECK(read_text(home / "db").find("Permission denied") != std::string::npos);
  CHECK(read_text(home / "dir").find("Permission denied") != std::string::npos);
  for (const fs::path& written : {home / "written", spec.box_dir / "workspace" / "written"}) {
    struct stat st;
    INFO(written);
    REQUIRE(::stat(written.c_str(), &st) == 0);
    CHECK(st.st_uid == desk.uid);
    CHECK(st.st_gid == desk.gid);
  }
  // The old box's file was handed over, so the tool could append to it.
  CHECK(read_text(home / "old-err").empty());
  CHECK(read_text(home / "old.txt") == "old\nhi");
  struct stat st;
  REQUIRE(::stat(home.c_str(), &st) == 0);
  CHECK(st.st_uid == desk.uid);
  REQUIRE(::stat((spec.box_dir / "agent").c_str(), &st) == 0);
  CHECK(st.st_uid == agent.uid);
  CHECK((st.st_mode & 0777) == 0700);
  REQUIRE(::stat((spec.box_dir / "agent" / "agent.db").c_str(), &st) == 0);
  CHECK(st.st_uid == agent.uid);

  Status released = run(backend->release(spec.box_id, DataPolicy::kKeep));
  CHECK(released.ok());
}

TEST_CASE("LocalBackend: with split_users off, agent and tools share the box user",
          "[api][machines][integration]") {
  LocalOptions options = test_options();
  TempDir dir;
  Janitor janitor(options);
  // The desktop account, as a split made it (when root and isolated).
  std::optional<proc::User> desk;
  if (is_root()) desk = make_backend(options)->desktop_user();
  options.split_users = false;
  auto backend = make_backend(options);
  CHECK(!backend->desktop_user());
  if (!backend->isolated()) return;
  CHECK(backend->isolation_note().find("NO PRIVILEGE SPLIT") != std::string::npos);
  REQUIRE(backend->box_user());
  const proc::User& agent = *backend->box_user();
  MachineSpec spec = counting_spec(dir.path(), unique_id("nosplit"));
  janitor.watch(spec);
  // A box the split ran: its home is the desktop account's, and goes back to the box user.
  const fs::path home = spec.box_dir / "home";
  if (desk) {
    fs::create_directories(home / "sub");
    { std::ofstream(home / "sub" / "f") << "x"; }
    for (const fs::path& p : {home, home / "sub", home / "sub" / "f"}) {
      REQUIRE(::chown(p.c_str(), desk->uid, desk->gid) == 0);
    }
  }
  REQUIRE(backend->deliver_identity(spec, "{}").ok());
  start_counting(*backend, spec);
  CHECK(std::stoul(read_text(spec.box_dir / "run" / "uid")) == agent.uid);
  if (desk) {
    for (const fs::path& p : {home, home / "sub", home / "sub" / "f"}) {
      struct stat st;
      INFO(p);
      REQUIRE(::stat(p.c_str(), &st) == 0);
      CHECK(st.st_uid == agent.uid);
      CHECK(st.st_gid == agent.gid);
    }
  }
  release_and_check_gone(*backend, spec);
}

TEST_CASE("LocalBackend: plain processes keep the layout and say they are not isolated",
          "[api][machines][integration]") {
  LocalOptions options = test_options();
  options.force_plain_processes = true;
  TempDir dir;
  Janitor janitor(options);
  auto backend = make_backend(options);
  CHECK(!backend->isolated());
  CHECK(backend->isolation_note().find("NOT ISOLATED") != std::string::npos);
  MachineSpec spec = counting_spec(dir.path(), unique_id("plain"));
  janitor.watch(spec);
  REQUIRE(backend->deliver_identity(spec, "{}").ok());
  start_counting(*backend, spec);
  const fs::path run_dir = spec.box_dir / "run";
  // In-box paths in argv become their place in box_dir.
  CHECK(read_text(run_dir / "arg1") == (run_dir / "argcheck").string());
  CHECK(read_text(run_dir / "identity-seen") == "{}");
  if (backend->box_user()) {
    CHECK(std::stoul(read_text(run_dir / "uid")) == backend->box_user()->uid);
  }
  CHECK(counter_advances(spec.box_dir / "workspace" / "counter"));
  Status frozen = run(backend->hibernate(spec.box_id));
  REQUIRE(frozen.ok());
  Status woken = run(backend->wake(spec.box_id));
  REQUIRE(woken.ok());
  CHECK(counter_advances(spec.box_dir / "workspace" / "counter"));
  release_and_check_gone(*backend, spec);
}

TEST_CASE("LocalBackend: a new backend adopts the running tree", "[api][machines][integration]") {
  LocalOptions options = test_options();
  SECTION("isolated, with cgroups (when root)") {}
  SECTION("plain, without cgroups") {
    options.force_plain_processes = true;
    options.disable_cgroups = true;
  }
  TempDir dir;
  Janitor janitor(options);
  MachineSpec spec = counting_spec(dir.path(), unique_id("adopt"));
  janitor.watch(spec);
  pid_t init = 0;
  {
    auto first = make_backend(options);
    start_counting(*first, spec);
    auto pids = first->processes(spec.box_id);
    REQUIRE(pids.ok());
    REQUIRE(!pids->empty());
    init = pids->front();
  }  // the Backend is gone; the tree is not
  auto second = make_backend(options);
  auto state = second->status(spec.box_id);
  REQUIRE(state.ok());
  CHECK(*state == MachineState::kAbsent);
  Status adopted = second->adopt(spec);
  REQUIRE(adopted.ok());
  CHECK(second->adopt(spec).ok());  // idempotent
  state = second->status(spec.box_id);
  REQUIRE(state.ok());
  CHECK(*state == MachineState::kRunning);
  auto pids = second->processes(spec.box_id);
  REQUIRE(pids.ok());
  CHECK(pids->front() == init);
  Status twin = run(second->start(spec));
  CHECK(twin.code() == Code::kAlreadyExists);

  Status frozen = run(second->hibernate(spec.box_id));
  CHECK(frozen.ok());
  Status woken = run(second->wake(spec.box_id));
  CHECK(woken.ok());
  CHECK(counter_advances(spec.box_dir / "workspace" / "counter"));
  release_and_check_gone(*second, spec);

  Status again = second->adopt(spec);
  CHECK(again.code() == Code::kNotFound);
}

TEST_CASE("LocalBackend: the tree survives the process that started it",
          "[api][machines][integration]") {
  LocalOptions options = test_options();
  TempDir dir;
  Janitor janitor(options);
  MachineSpec spec = counting_spec(dir.path(), unique_id("orphan"));
  janitor.watch(spec);
  // The box's init is reparented to us when its starter exits, so we can reap it later
  // (this host's pid 1 does not reap orphans).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  int status_pipe[2];
  REQUIRE(::pipe(status_pipe) == 0);
  pid_t starter = ::fork();
  REQUIRE(starter >= 0);
  if (starter == 0) {
    // A stand-in for an api process: start the box and exit without releasing it.
    ::close(status_pipe[0]);
    int code = 1;
    auto backend = LocalBackend::create(options);
    if (backend.ok()) {
      asio::io_context io;
      auto f = asio::co_spawn(io, (*backend)->start(spec), asio::use_future);
      io.run();
      code = f.get().ok() ? 0 : 2;
    }
    [[maybe_unused]] ssize_t n = ::write(status_pipe[1], &code, sizeof code);
    ::_exit(code);
  }
  ::close(status_pipe[1]);
  int code = -1;
  [[maybe_unused]] ssize_t n = ::read(status_pipe[0], &code, sizeof code);
  ::close(status_pipe[0]);
  int status = 0;
  ::waitpid(starter, &status, 0);
  REQUIRE(code == 0);

  auto backend = make_backend(options);
  Status adopted = backend->adopt(spec);
  REQUIRE(adopted.ok());
  REQUIRE(wait_for([&] { return fs::exists(spec.box_dir / "run" / "ready"); }));
  CHECK(counter_advances(spec.box_dir / "workspace" / "counter"));
  release_and_check_gone(*backend, spec);
  ::prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
}

TEST_CASE("LocalBackend: deliver_identity replaces the identity file atomically",
          "[api][machines][unit]") {
  LocalOptions options = test_options();
  options.force_plain_processes = true;
  TempDir dir;
  Janitor janitor(options);  // create() makes the cgroup parent
  auto backend = make_backend(options);
  MachineSpec spec = counting_spec(dir.path(), unique_id("id"));
  const fs::path identity = spec.box_dir / "run" / std::string(kIdentityFile);

  REQUIRE(backend->deliver_identity(spec, R"({"wake_id":"1"})").ok());
  struct stat first;
  REQUIRE(::stat(identity.c_str(), &first) == 0);
  CHECK((first.st_mode & 07777) == 0644);
  CHECK(read_text(identity) == R"({"wake_id":"1"})");

  REQUIRE(backend->deliver_identity(spec, R"({"wake_id":"2"})").ok());
  struct stat second;
  REQUIRE(::stat(identity.c_str(), &second) == 0);
  // A new inode renamed into place: a reader holding the old file never sees a mix.
  CHECK(second.st_ino != first.st_ino);
  CHECK((second.st_mode & 07777) == 0644);
  CHECK(read_text(identity) == R"({"wake_id":"2"})");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(identity.parent_path())) {
    names.push_back(e.path().filename().string());
  }
  CHECK(names == std::vector<std::string>{"identity"});
  if (backend->box_user()) {
    // Root owns the sticky run dir; the agent may add its socket but not touch the identity.
    struct stat run_dir;
    REQUIRE(::stat(identity.parent_path().c_str(), &run_dir) == 0);
    CHECK(run_dir.st_uid == 0);
    CHECK(run_dir.st_gid == backend->box_user()->gid);
    CHECK((run_dir.st_mode & 07777) == 01775);
  }

  MachineSpec bad = spec;
  bad.box_id = "../etc";
  CHECK(backend->deliver_identity(bad, "{}").code() == Code::kInvalidArgument);
}

asio::awaitable<Result<std::string>> echo_through(Endpoint endpoint) {
  auto ex = co_await asio::this_coro::executor;
  auto until = net::after(15s);
  Result<std::unique_ptr<net::Stream>> stream = unavailable("not dialed");
  while (std::chrono::steady_clock::now() < until) {
    stream = co_await endpoint.dial(net::after(2s));
    if (stream.ok()) break;
    net::Timer timer(ex, net::after(50ms));
    co_await timer.async_wait();
  }
  if (!stream.ok()) co_return stream.status();
  std::string ping = "ping";
  Status wrote = co_await (*stream)->write(std::span<const char>(ping.data(), ping.size()));
  if (!wrote.ok()) co_return wrote;
  std::string got;
  char buf[64];
  while (true) {
    auto n = co_await (*stream)->read_some(std::span<char>(buf, sizeof buf));
    if (!n.ok()) break;  // the agent closes after answering
    got.append(buf, *n);
  }
  (*stream)->close();
  co_return got;
}

asio::awaitable<Status> dial_once(Endpoint endpoint) {
  auto stream = co_await endpoint.dial(net::after(2s));
  if (!stream.ok()) co_return stream.status();
  (*stream)->close();
  co_return ok_status();
}

TEST_CASE("LocalBackend: address() dials the agent's unix socket", "[api][machines][integration]") {
  LocalOptions options = test_options();
  SECTION("isolated (when root)") {}
  SECTION("plain processes") { options.force_plain_processes = true; }
  TempDir dir;
  Janitor janitor(options);
  auto backend = make_backend(options);
  MachineSpec spec;
  spec.box_id = unique_id("dial");
  spec.box_dir = dir.path() / "boxes" / spec.box_id;
  spec.agent_argv = {"/usr/bin/python3", "-c", kEchoAgent};
  janitor.watch(spec);
  CHECK(backend->address(spec.box_id).status().code() == Code::kNotFound);
  Status started = run(backend->start(spec));
  INFO(read_text(spec.box_dir / kAgentLog));
  REQUIRE(started.ok());
  auto endpoint = backend->address(spec.box_id);
  REQUIRE(endpoint.ok());
  CHECK(endpoint->key.rfind(fmt::format("local:{}:", spec.box_id), 0) == 0);
  auto answer = run(echo_through(*endpoint));
  INFO(answer.status().to_string() << "\nagent.log: " << read_text(spec.box_dir / kAgentLog));
  REQUIRE(answer.ok());
  CHECK(*answer == "echo:ping");

  SECTION("a symlink planted as agent.sock is not followed") {
    // Another socket on the host, owned by root, that the agent must not redirect us to.
    asio::io_context io;
    auto other = net::UnixListener::listen(io.get_executor(), (dir.path() / "other.sock").string());
    REQUIRE(other.ok());
    const fs::path sock = spec.box_dir / "run" / "agent.sock";
    fs::remove(sock);
    fs::create_symlink(dir.path() / "other.sock", sock);
    Status dialed = run(dial_once(*endpoint));
    CHECK(dialed.code() == Code::kUnavailable);
    CHECK(std::string(dialed.message()).find("not a socket") != std::string::npos);
  }
  Status released = run(backend->release(spec.box_id, DataPolicy::kDelete));
  REQUIRE(released.ok());
  CHECK(!fs::exists(spec.box_dir));
}

TEST_CASE("LocalBackend: start refuses bad specs, twins and missing programs",
          "[api][machines][integration]") {
  LocalOptions options = test_options();
  TempDir dir;
  Janitor janitor(options);
  auto backend = make_backend(options);

  MachineSpec bad = counting_spec(dir.path(), "Not_A_Valid_Id");
  CHECK(run(backend->start(bad)).code() == Code::kInvalidArgument);
  bad = counting_spec(dir.path(), unique_id("rel"));
  bad.box_dir = "relative/dir";
  CHECK(run(backend->start(bad)).code() == Code::kInvalidArgument);
  bad = counting_spec(dir.path(), unique_id("empty"));
  bad.agent_argv.clear();
  CHECK(run(backend->start(bad)).code() == Code::kInvalidArgument);

  SECTION("a program missing from PATH") {
    MachineSpec spec = counting_spec(dir.path(), unique_id("nopath"));
    spec.agent_argv = {"cocoonbox-no-such-program"};
    janitor.watch(spec);
    CHECK(run(backend->start(spec)).code() == Code::kNotFound);
  }
  SECTION("a missing program found out by the init") {
    MachineSpec spec = counting_spec(dir.path(), unique_id("noexec"));
    spec.agent_argv = {"/nonexistent/agent"};
    janitor.watch(spec);
    Status started = run(backend->start(spec));
    CHECK(started.code() == Code::kNotFound);
    CHECK(std::string(started.message()).find("/nonexistent/agent") != std::string::npos);
    auto state = backend->status(spec.box_id);
    REQUIRE(state.ok());
    CHECK(*state == MachineState::kAbsent);
    if (backend->cgroup_parent_dir()) {
      CHECK(!fs::exists(*backend->cgroup_parent_dir() / spec.box_id));
    }
  }
  SECTION("plain mode as root, with a box_dir the box's user cannot reach") {
    if (!is_root()) return;
    LocalOptions plain = test_options();
    plain.force_plain_processes = true;
    auto plain_backend = make_backend(plain);
    TempDir closed;
    ::chmod(closed.path().c_str(), 0700);
    MachineSpec spec = counting_spec(closed.path(), unique_id("closed"));
    janitor.watch(spec);
    Status started = run(plain_backend->start(spec));
    CHECK(started.code() == Code::kFailedPrecondition);
    CHECK(std::string(started.message()).find("cannot reach") != std::string::npos);
  }
  SECTION("a second start of a running box") {
    MachineSpec spec = counting_spec(dir.path(), unique_id("twin"));
    janitor.watch(spec);
    start_counting(*backend, spec);
    CHECK(run(backend->start(spec)).code() == Code::kAlreadyExists);
    release_and_check_gone(*backend, spec);
  }
}

TEST_CASE("LocalBackend: an agent that ends on its own leaves an exited box",
          "[api][machines][integration]") {
  LocalOptions options = test_options();
  TempDir dir;
  Janitor janitor(options);
  auto backend = make_backend(options);
  MachineSpec spec = counting_spec(dir.path(), unique_id("exit"));
  spec.agent_argv = {"/bin/sh", "-c", "sleep 0.2; exit 3"};
  // Limits: applied where the controllers exist, noted and skipped elsewhere (as on hybrid
  // hosts, where memory and cpu live in cgroup v1).
  spec.memory_limit_bytes = 256ull << 20;
  spec.cpu_limit = 0.5;
  janitor.watch(spec);
  Status started = run(backend->start(spec));
  REQUIRE(started.ok());
  CHECK(wait_for([&] {
    auto s = backend->status(spec.box_id);
    return s.ok() && *s == MachineState::kExited;
  }));
  CHECK(run(backend->hibernate(spec.box_id)).code() == Code::kFailedPrecondition);
  Status released = run(backend->release(spec.box_id, DataPolicy::kKeep));
  CHECK(released.ok());
  auto state = backend->status(spec.box_id);
  REQUIRE(state.ok());
  CHECK(*state == MachineState::kAbsent);
  CHECK(run(backend->release(spec.box_id, DataPolicy::kKeep)).code() == Code::kNotFound);
}

// The life of a box as seen by an api that is not root, run in a child that dropped to
// nobody. Returns "" or what went wrong. Uses no Catch2 macros: it runs in a forked child.
std::string run_unprivileged(const LocalOptions& options, const MachineSpec& spec) {
  if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) {
    return "cannot become nobody";
  }
  auto created = LocalBackend::create(options);
  if (!created.ok()) return "create: " + created.status().to_string();
  LocalBackend& backend = **created;
  if (backend.isolated() || backend.box_user()) return "isolated or switching users without root";
  if (backend.isolation_note().find("does not run as root") == std::string::npos) {
    return "note: " + backend.isolation_note();
  }
  auto sync = [](asio::awaitable<Status> task) {
    asio::io_context io;
    auto f = asio::co_spawn(io, std::move(task), asio::use_future);
    io.run();
    return f.get();
  };
  Status started = sync(backend.start(spec));
  if (!started.ok()) return "start: " + started.to_string();
  const fs::path counter = spec.box_dir / "workspace" / "counter";
  if (!wait_for([&] { return fs::exists(spec.box_dir / "run" / "ready"); })) return "not ready";
  if (read_text(spec.box_dir / "run" / "uid") != "65534") return "agent uid";
  if (!counter_advances(counter)) return "counter stands still";
  Status frozen = sync(backend.hibernate(spec.box_id));
  if (!frozen.ok()) return "hibernate: " + frozen.to_string();
  long a = read_counter(counter);
  std::this_thread::sleep_for(500ms);
  if (read_counter(counter) != a) return "counter moved while frozen";
  Status woken = sync(backend.wake(spec.box_id));
  if (!woken.ok()) return "wake: " + woken.to_string();
  if (!counter_advances(counter)) return "counter stands still after wake";
  Status released = sync(backend.release(spec.box_id, DataPolicy::kKeep));
  if (!released.ok()) return "release: " + released.to_string();
  auto state = backend.status(spec.box_id);
  if (!state.ok() || *state != MachineState::kAbsent) return "not absent after release";
  return {};
}

TEST_CASE("LocalBackend: an api that is not root runs boxes as its own plain processes",
          "[api][machines][integration]") {
  if (!is_root()) {
    WARN("already unprivileged: the plain-process cases above cover this");
    return;
  }
  LocalOptions options = test_options();
  TempDir dir;
  Janitor janitor(options);
  REQUIRE(::chown(dir.path().c_str(), 65534, 65534) == 0);
  MachineSpec spec = counting_spec(dir.path(), unique_id("nobody"));
  janitor.watch(spec);
  int report[2];
  REQUIRE(::pipe(report) == 0);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(report[0]);
    std::string error = run_unprivileged(options, spec);
    [[maybe_unused]] ssize_t n = ::write(report[1], error.data(), error.size());
    ::_exit(error.empty() ? 0 : 1);
  }
  ::close(report[1]);
  std::string error;
  char buf[512];
  ssize_t n;
  while ((n = ::read(report[0], buf, sizeof buf)) > 0) error.append(buf, static_cast<size_t>(n));
  ::close(report[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  INFO(error << "\nagent.log: " << read_text(spec.box_dir / kAgentLog));
  CHECK(error.empty());
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
}

}  // namespace
}  // namespace cb::api::machines
