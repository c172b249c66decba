#pragma once
// The machines layer of the api (architecture.md §5, seed §14.3–14.4): a Backend turns a box
// into something that runs (a namespaced process tree, a microVM, a sandboxd claim), freezes
// and thaws it, tears it down, and tells the edge how to reach the box's agent.
//
// The service layer owns every policy: which boxes should run, identities, retries, states
// shown to users. A Backend only does what it is told and reports what the host says.
//
// Lifecycle of one box on a Backend (seed §14.3 "Lifecycle mapping"):
//
//   deliver_identity ─> start ─> kRunning ─hibernate─> kFrozen ─wake─> kRunning
//                                   │                     │
//                                   └──── release ────────┴──> kAbsent (box_dir data kept
//                                   the agent exits on its own ─> kExited   unless kDelete)
//
// After an api restart the service layer calls adopt() for every box it believes is running;
// adopt() finds the tree again or answers kNotFound.
//
// Affinity: a Backend is used from one executor (the api's loop); it is not thread-safe.
// Coroutines take their arguments by value, so nothing the caller passes has to outlive the
// co_await. Not copyable; owned by unique_ptr.

#include "base/result.h"
#include "base/status.h"
#include "net/asio.h"
#include "net/stream.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cb::api::machines {

// What a box is made of, as the service layer knows it.
struct MachineSpec {
  // The box's id: 1 to 63 characters from [a-z0-9_-], starting with a letter or digit (it
  // becomes a hostname, a cgroup name and a path component). See validate_box_id().
  std::string box_id;
  // The image the box was created from. The local backend ignores it: its "image" is the
  // host's own / (read-only).
  std::string image;
  // <data-dir>/boxes/<id> on the api's host: everything the backend keeps for the box
  // (layout in README.md). REQUIRES: absolute.
  std::filesystem::path box_dir;
  // The command to run as the box's agent, with in-box paths, e.g. {"<path of cocoonbox>",
  // "agent", "--socket", "/run/cocoonbox/agent.sock", "--identity", "/run/cocoonbox/identity",
  // "--data-dir", "/var/lib/cocoonbox-agent"}. A program name without '/' is searched in
  // the host's PATH. REQUIRES: not empty.
  std::vector<std::string> agent_argv;
  // Extra environment for the agent as "NAME=value"; overrides the backend's defaults.
  std::vector<std::string> env;
  // Limits; a backend that cannot apply one logs a note and starts the box anyway.
  std::optional<uint64_t> memory_limit_bytes;
  std::optional<double> cpu_limit;  // in CPUs: 1.5 = one and a half cores
};

enum class MachineState {
  kAbsent,   // the backend knows no such box (never started, released, or not adopted)
  kRunning,  // the process tree runs (the agent may still be starting up)
  kFrozen,   // hibernated: memory and processes kept, nothing scheduled
  kExited,   // the agent's tree has ended on its own; release() cleans up
};
std::string_view to_string(MachineState state);

// How to reach a machine's agent (seed §14.4). |key| changes whenever the machine moves or is
// started again, so a cached connection can be told apart from a stale one.
struct Endpoint {
  std::string key;
  // Connects to the agent's HTTP/2 (h2c) listener; gives up at the deadline.
  // Errors: kUnavailable (nothing listening, or the socket is not the agent's),
  //         kDeadlineExceeded, kCancelled.
  // The function owns what it needs: it may be called after the Endpoint's Backend is gone.
  std::function<asio::awaitable<Result<std::unique_ptr<net::Stream>>>(net::Deadline)> dial;
};

// What release() does with the box's data (workspace, home, agent data).
enum class DataPolicy {
  kKeep,    // keep box_dir: the box can be started again with its files
  kDelete,  // remove box_dir and everything in it
};

class Backend {
 public:
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
  // Forgets the boxes; never stops them. Trees outlive the Backend and the api process.
  virtual ~Backend() = default;

  // "local", "vm", "sandboxd".
  virtual std::string_view name() const = 0;
  // False when boxes run as plain child processes, with no isolation from the host or each
  // other. The api must say so loudly (isolation_note()) at start and in its status.
  virtual bool isolated() const = 0;
  // One human sentence on how boxes are isolated, or why they are not.
  virtual std::string isolation_note() const = 0;

  // Writes |identity_json| as the identity file the agent reads (the §12 path; for `local`,
  // <box_dir>/run/identity = /run/cocoonbox/identity in the box), atomically: a temporary
  // file in the same directory, mode 0644, renamed over the old one, so the agent never reads
  // a partial file. Called before start() and before each wake().
  // Errors: kInvalidArgument (bad box id or box_dir); kPermissionDenied, kResourceExhausted,
  //         kInternal (the file system said no).
  virtual Status deliver_identity(const MachineSpec& spec, std::string_view identity_json) = 0;

  // Creates and boots the machine: on success the agent's process tree runs (the agent itself
  // may need a moment before it listens; dial() until it answers). The identity has already
  // been delivered. The tree survives the api process.
  // Errors: kInvalidArgument (bad id, relative box_dir, empty argv);
  //         kAlreadyExists (the box is running or frozen, here or in a tree adopt() would find);
  //         kNotFound (the agent program does not exist), kPermissionDenied (not executable);
  //         kDeadlineExceeded (the machine did not come up in time; it was torn down);
  //         kResourceExhausted, kInternal (a host setup step failed; the message names it).
  virtual asio::awaitable<Status> start(MachineSpec spec) = 0;

  // Freezes the machine: every process stops being scheduled; memory, open files and
  // sockets are kept. Idempotent. Returns once the host reports the tree frozen.
  // Errors: kNotFound (unknown box); kFailedPrecondition (the tree has exited);
  //         kDeadlineExceeded (not frozen in time; it was thawed again); kInternal.
  virtual asio::awaitable<Status> hibernate(std::string box_id) = 0;

  // Thaws a frozen machine; the same processes continue. Idempotent on a running box.
  // Errors: kNotFound; kFailedPrecondition (exited); kDeadlineExceeded; kInternal.
  virtual asio::awaitable<Status> wake(std::string box_id) = 0;

  // Ends the machine: stops the whole tree (politely first when it is running), waits until
  // every process is gone, releases host resources (cgroup) and, with kDelete, removes
  // box_dir. Afterwards status() is kAbsent.
  // Errors: kNotFound (unknown box: nothing to do); kDeadlineExceeded (processes survived
  //         the kill; the box stays known so release() can be retried); kInternal.
  virtual asio::awaitable<Status> release(std::string box_id, DataPolicy data) = 0;

  // What the host says about the box now. Unknown boxes are kAbsent, not an error.
  // Errors: kInternal (the host could not be asked).
  virtual Result<MachineState> status(std::string_view box_id) = 0;

  // Where the agent listens. Valid in every state; dialing a frozen machine connects but
  // nobody answers until wake(), dialing an exited one fails.
  // Errors: kNotFound (unknown box).
  virtual Result<Endpoint> address(std::string_view box_id) = 0;

  // After an api restart: finds the box's running (or frozen) tree again from what start()
  // left in box_dir, checking that the process is the one that was started, and tracks it.
  // Idempotent for a box already tracked.
  // Errors: kNotFound (no record, or the tree is gone; stale host state is cleaned up);
  //         kInvalidArgument (bad spec); kDataLoss (the record is unreadable); kInternal.
  virtual Status adopt(const MachineSpec& spec) = 0;
};

// ok, or kInvalidArgument naming what is wrong with |box_id| (see MachineSpec::box_id).
Status validate_box_id(std::string_view box_id);

}  // namespace cb::api::machines
