#pragma once
// LocalBackend ("local", the embedded default): a box is a process tree on this host.
//
// Isolated mode (root, and the kernel permits namespaces): the tree lives in its own mount,
// pid, uts and ipc namespaces. Its / is the host's /, read-only; /workspace, /home/user,
// /var/lib/cocoonbox-agent and /run/cocoonbox are writable binds of directories in box_dir;
// /tmp and /run are fresh tmpfs; /proc is the box's own; the hostname is the box id. Pid 1 is
// a small init that reaps orphans and forwards SIGTERM; the agent runs as an unprivileged
// user (LocalOptions::box_user) with no_new_privs. With the privilege split (the default as
// root) the box also gets a user namespace: the agent is root in it but box_user on the
// host, and its tools run as a second account (LocalOptions::desktop_user) that cannot read
// the agent's files.
//
// Plain mode (not root, namespaces refused, or LocalOptions::force_plain_processes): the same
// box_dir layout, the same init, but no namespaces. isolated() is false and isolation_note()
// says so loudly; in-box paths in the agent's argv and environment are rewritten to box_dir.
//
// Hibernate uses the cgroup v2 freezer (<v2 root>/<cgroup_parent>/<id>/cgroup.freeze) when a
// writable v2 hierarchy with cgroup.freeze exists, else SIGSTOP/SIGCONT to every process of
// the box. See README.md for the layout, the start sequence, and adoption.
//
// Affinity: one executor, like every Backend. create() and the synchronous calls block
// briefly on small local files; start() blocks for one clone(2).

#include "proc/user.h"
#include "roles/api/machines/machines.h"

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace cb::api::machines {

// The directories of box_dir that appear inside a box, and where (README.md §Layout).
struct BoxPath {
  std::string_view in_box;   // absolute path the agent sees
  std::string_view box_dir;  // subdirectory of box_dir on the host
};
inline constexpr BoxPath kBoxPaths[] = {
    {"/workspace", "workspace"},
    {"/home/user", "home"},
    {"/var/lib/cocoonbox-agent", "agent"},
    {"/run/cocoonbox", "run"},  // identity (written by the api) and agent.sock (by the agent)
};
inline constexpr std::string_view kIdentityFile = "identity";       // in <box_dir>/run
inline constexpr std::string_view kAgentSocket = "agent.sock";      // in <box_dir>/run
inline constexpr std::string_view kMachineRecord = "machine.json";  // in <box_dir>
inline constexpr std::string_view kAgentLog = "agent.log";          // in <box_dir>

struct LocalOptions {
  // Run boxes as plain child processes even when namespaces would work (tests, debugging).
  bool force_plain_processes = false;
  // When the api runs as root, agents run as this user; it is created with useradd(8) as a
  // system user if missing and |create_box_user| is set.
  std::string box_user = "cocoonbox-box";
  bool create_box_user = true;
  // The privilege split (README.md §Privilege split), when the api is root and boxes are
  // isolated: each box gets a user namespace in which the agent is root, mapped to
  // |box_user| on the host, and the tools' account is |desktop_user| (empty:
  // "<box_user>-desk"), mapped to itself. The agent's own files are then out of the tools'
  // reach. Created like |box_user| when missing. Off: agent and tools share |box_user|.
  bool split_users = true;
  std::string desktop_user;
  // Do not use cgroups at all: no limits, SIGSTOP for hibernate, signals for release.
  bool disable_cgroups = false;
  // The cgroup v2 mount to use; unset: the first cgroup2 mount in /proc/self/mountinfo
  // (/sys/fs/cgroup on pure v2 hosts, /sys/fs/cgroup/unified on hybrid ones).
  std::optional<std::filesystem::path> cgroup_v2_root;
  // Boxes get <v2 root>/<cgroup_parent>/<box id>.
  std::string cgroup_parent = "cocoonbox";
  // Host paths shown as empty directories inside isolated boxes, in addition to the api's
  // data dir (the parent of "boxes/" in box_dir, or box_dir's parent).
  std::vector<std::filesystem::path> hidden_paths;
  // How long start() waits for the agent's execve; hibernate()/wake() for the freezer;
  // release() for the agent to stop after SIGTERM, then for the tree to die after SIGKILL.
  std::chrono::milliseconds start_timeout{10'000};
  std::chrono::milliseconds freeze_timeout{10'000};
  std::chrono::milliseconds stop_grace{2'000};
  std::chrono::milliseconds kill_timeout{10'000};
};

// How hibernate() freezes a box.
enum class FreezeMethod {
  kCgroupFreezer,  // cgroup v2 cgroup.freeze; the kernel reports "frozen 1" in cgroup.events
  kSigstop,        // SIGSTOP to every process; state 'T' in /proc/<pid>/stat
};
std::string_view to_string(FreezeMethod method);

class LocalBackend final : public Backend {
 public:
  // Probes the host (root? namespaces? cgroup v2 and its freezer and controllers?), creates
  // the box user if needed, and prepares the box init. Blocks (it may run useradd).
  // Errors: kFailedPrecondition (root, but the box user is missing and cannot be created);
  //         kInternal (the init could not be prepared).
  static Result<std::unique_ptr<LocalBackend>> create(LocalOptions options);
  ~LocalBackend() override;

  std::string_view name() const override { return "local"; }
  bool isolated() const override { return isolated_; }
  std::string isolation_note() const override;

  Status deliver_identity(const MachineSpec& spec, std::string_view identity_json) override;
  asio::awaitable<Status> start(MachineSpec spec) override;
  asio::awaitable<Status> hibernate(std::string box_id) override;
  asio::awaitable<Status> wake(std::string box_id) override;
  asio::awaitable<Status> release(std::string box_id, DataPolicy data) override;
  Result<MachineState> status(std::string_view box_id) override;
  Result<Endpoint> address(std::string_view box_id) override;
  Status adopt(const MachineSpec& spec) override;

  FreezeMethod freeze_method() const { return freeze_method_; }
  // <v2 root>/<cgroup_parent>, when boxes get cgroups.
  const std::optional<std::filesystem::path>& cgroup_parent_dir() const { return cgroup_dir_; }
  // The user agents run as; unset when the api is not root (agents run as the api's user).
  const std::optional<proc::User>& box_user() const { return box_user_; }
  // The account the agent's tools run as, when the privilege split is in effect (the api is
  // root, boxes are isolated, user namespaces work); else unset and agent and tools share
  // box_user() (or the api's user).
  const std::optional<proc::User>& desktop_user() const { return desktop_user_; }

  // Host pids of every live process of the box, its init first.
  // Errors: kNotFound (unknown box); kInternal.
  Result<std::vector<pid_t>> processes(std::string_view box_id);

 private:
  struct Box;
  struct AgentCommand;
  explicit LocalBackend(LocalOptions options);

  // The lifecycle coroutines; the public ones run them through uninterruptible() (local.cc).
  asio::awaitable<Status> start_impl(MachineSpec spec);
  asio::awaitable<Status> hibernate_impl(std::string box_id);
  asio::awaitable<Status> wake_impl(std::string box_id);
  asio::awaitable<Status> release_impl(std::string box_id, DataPolicy data);

  std::shared_ptr<Box> find(std::string_view box_id);
  bool alive(Box& box);
  bool frozen(Box& box);
  std::vector<pid_t> box_pids(Box& box);
  // Creates box_dir's directories; sets their owners when |starting| (or when new), and
  // then hands a box from before the privilege split to the desktop account.
  Status prepare_dirs(const MachineSpec& spec, bool starting);
  Result<AgentCommand> agent_command(const MachineSpec& spec) const;
  std::vector<std::filesystem::path> hidden_paths(const MachineSpec& spec) const;
  asio::awaitable<Status> sigstop_all(Box& box, net::Deadline deadline);
  asio::awaitable<Status> wait_gone(Box& box, net::Deadline deadline);
  asio::awaitable<Status> kill_tree(Box& box);
  asio::awaitable<Status> stop_tree(Box& box);
  // Removes the box's host state (cgroup, record, socket; box_dir with kDelete) and drops it
  // from |boxes_|. REQUIRES: its processes are gone.
  asio::awaitable<Status> forget(std::shared_ptr<Box> box, DataPolicy data);

  LocalOptions options_;
  bool root_ = false;
  bool isolated_ = false;
  std::string plain_reason_;
  FreezeMethod freeze_method_ = FreezeMethod::kSigstop;
  std::optional<std::filesystem::path> cgroup_dir_;
  std::string cgroup_note_;
  bool memory_controller_ = false;
  bool cpu_controller_ = false;
  std::optional<proc::User> box_user_;
  std::optional<proc::User> desktop_user_;
  // The desktop account when the split is off but the account exists: boxes an earlier split
  // ran are handed back to the box user at start.
  std::optional<proc::User> former_desktop_;
  std::string split_note_;  // why there is no privilege split, when there is none
  int init_fd_ = -1;        // sealed memfd holding the box init (README.md §Init)
  // Shared with the coroutines working on a box, so a release() interleaving with another
  // operation cannot free the Box under it (Box::busy makes the second one fail instead).
  std::map<std::string, std::shared_ptr<Box>, std::less<>> boxes_;
};

}  // namespace cb::api::machines
