#pragma once
// Pieces of the local backend that local.cc composes and the tests reach directly: the
// box's root file system plan, the code that runs between clone(2) and the init's execve,
// cgroup v2 files, /proc parsing and atomic file writes. Not a contract for other folders.

#include "base/result.h"
#include "base/status.h"
#include "roles/api/machines/init_protocol.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace cb::api::machines::internal {

// Owns one file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset();

 private:
  int fd_ = -1;
};

// errno -> Status, the one place in this folder (house style H7):
//   ENOENT, ENOTDIR, ESRCH -> kNotFound; EACCES, EPERM, EROFS -> kPermissionDenied;
//   EEXIST -> kAlreadyExists; EMFILE, ENFILE, ENOMEM, EAGAIN, ENOSPC -> kResourceExhausted;
//   EINVAL -> kInvalidArgument; anything else -> kInternal. Message: "<what>: <strerror>".
Status errno_status(int err, std::string_view what);

// ---------------------------------------------------------------------------------------
// The box's root (README.md §Layout). A plan is a list of steps run in the box's mount
// namespace; every path in it is absolute on the host, under |new_root| for targets.

enum class MountOpKind : uint8_t {
  kMkdir,         // mkdir(target, mode); an existing directory is fine
  kSymlink,       // symlink(source, target)
  kTouch,         // create an empty file at target (a mount point for a file)
  kBindHost,      // bind source onto target, recursively; made read-only by kReadOnlyTree
  kReadOnlyTree,  // mount_setattr(target, AT_RECURSIVE, MOUNT_ATTR_RDONLY)
  kTmpfs,         // a fresh tmpfs at target with options |data|
  kBindWritable,  // bind source onto target, recursively, keeping it writable
  kProc,          // a fresh proc for the box's pid namespace
};

struct MountOp {
  MountOpKind kind;
  std::string source;
  std::string target;
  std::string data;
  uint32_t mode = 0755;
  // A host entry that cannot be bound (an autofs point, an unbindable mount) is left as an
  // empty mount point instead of failing the start.
  bool optional = false;
};

struct RootLayout {
  std::filesystem::path host_root = "/";  // what the box's / shows; tests use a fake tree
  std::filesystem::path new_root;         // where the plan builds it (<box_dir>/rootfs)
  std::filesystem::path box_dir;
  // In-box paths shown as empty directories. Paths under a fresh mount (/tmp, /run, ...) or
  // an already empty directory are dropped; "/" is refused.
  std::vector<std::filesystem::path> hidden;
};

// Builds the plan: first the read-only view of the host (for each directory on the way to a
// special path, its host entries one by one, so the special path can get a mount point in a
// tree that is otherwise the host's), then kReadOnlyTree over new_root, then the writable
// mounts (/proc, /dev, /dev/shm, /tmp, /run, /run/cocoonbox, /home/user, /workspace,
// /var/lib/cocoonbox-agent). Reads the host's directories (blocking, small).
// Errors: kInvalidArgument (relative paths).
Result<std::vector<MountOp>> plan_box_root(const RootLayout& layout);

// ---------------------------------------------------------------------------------------
// What the cloned child needs, prepared by the parent so that the child allocates nothing
// and calls only async-signal-safe functions (the api has other threads; see README.md).

struct ChildPlan {
  bool isolated = false;
  int report_fd = -1;        // write end of the report pipe; handed to the init
  int cgroup_procs_fd = -1;  // <box cgroup>/cgroup.procs open for writing, or -1
  int stdin_fd = -1;         // /dev/null
  int log_fd = -1;           // <box_dir>/agent.log, for stdout and stderr
  int init_fd = -1;          // the sealed memfd with the init
  const char* new_root = nullptr;
  std::span<const MountOp> ops;
  const char* hostname = nullptr;
  std::size_t hostname_len = 0;
  // The privilege split (README.md §Privilege split): after pivot_root the child enters a
  // new user namespace, reports CB_STEP_USERNS_READY, and waits for one byte on |go_fd|
  // while the api writes its id maps; |go_write_fd| is the api's end, which the child closes
  // first so that an api gone away means end of file. The ids below are then in-namespace.
  bool new_user_ns = false;
  int go_fd = -1;
  int go_write_fd = -1;
  bool change_identity = false;
  std::span<const gid_t> groups;
  gid_t gid = 0;
  uid_t uid = 0;
  bool no_new_privs = false;
  const char* cwd = nullptr;
  const char* const* init_argv = nullptr;  // null-terminated
  const char* const* envp = nullptr;       // null-terminated
};

// Runs in the child of clone(2): joins the cgroup, builds the root (isolated), drops
// privileges and execs the init. Never returns; on failure writes a cb_box_report and exits.
[[noreturn]] void run_box_child(const ChildPlan& plan);

// "mount /proc" style text for a report, naming the step and, for mount ops, the target.
Status report_status(const cb_box_report& report, std::span<const MountOp> ops,
                     std::string_view agent);

// ---------------------------------------------------------------------------------------
// /proc

struct ProcStat {
  char state = '?';  // R, S, D, T, t, Z, X, ...
  pid_t ppid = 0;
  uint64_t start_time = 0;  // field 22: clock ticks after boot
};
// Errors: kNotFound (no such process); kInternal (unparseable).
Result<ProcStat> read_proc_stat(pid_t pid);
// True if |pid| is gone, a zombie, stopped (state T or t), or has a SIGSTOP pending: a task
// in an uninterruptible wait (a vfork parent whose child was stopped before its exec) takes
// the stop only when it leaves the kernel, and runs no user code before that.
bool stopped_or_stopping(pid_t pid);
// Every pid in /proc, ascending.
std::vector<pid_t> list_pids();
// The inode of /proc/<pid>/ns/pid, or 0.
uint64_t pid_namespace_of(pid_t pid);

// ---------------------------------------------------------------------------------------
// cgroup v2

// The mount point of the first cgroup2 file system in |mountinfo|, or nullopt.
std::optional<std::filesystem::path> find_cgroup2_mount(
    const std::filesystem::path& mountinfo = "/proc/self/mountinfo");
// The value of |key| in a flat keyed file such as cgroup.events ("populated 1\nfrozen 0").
std::optional<int64_t> read_keyed(const std::filesystem::path& file, std::string_view key);
// Pids listed in <dir>/cgroup.procs.
Result<std::vector<pid_t>> cgroup_procs(const std::filesystem::path& dir);
// Writes |value| to |file| in one write(2) (cgroup files want exactly that).
Status write_file(const std::filesystem::path& file, std::string_view value);

// ---------------------------------------------------------------------------------------
// Files

// Writes |content| to |path| atomically: a fresh temporary file next to it (O_EXCL,
// O_NOFOLLOW, so a planted symlink cannot redirect it), |mode|, then rename(2).
// Errors: as errno_status().
Status write_atomically(const std::filesystem::path& path, std::string_view content, uint32_t mode);
// The whole file, or an error (kNotFound if missing).
Result<std::string> read_small_file(const std::filesystem::path& path);

// The box init program (box_init.c), a static ELF embedded at build time (init_blob.cc).
std::span<const unsigned char> box_init_elf();

}  // namespace cb::api::machines::internal
