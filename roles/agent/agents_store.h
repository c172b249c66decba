#pragma once
// The Agents tables of agent.db (README.md §Agents, migration 2): agents, their turns, their
// transcript items, and the event log Session.Events reads. Plain functions on a
// db::Database, meant to run inside db::Worker::run(); each write is one transaction that also
// appends the event(s) it causes, so the log and the tables never disagree.
//
//   ASSIGN_OR_RETURN(ItemRow item, append_item(d, agent, turn, "assistant", "text", payload,
//                                              now_ms));   // item.event_id: its log position
//
// Thread-safety: as the Database (the worker thread).

#include "base/result.h"
#include "db/database.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cb::agent {

struct TurnRow {
  std::string id;
  std::string agent_id;
  std::string state;  // "running" | "done" | "failed" | "cancelled" | "waiting_for_user"
  std::string error;  // with "failed" (and "cancelled"): what happened; "waiting_for_user": why
};

struct AgentRow {
  std::string id;
  std::string name;
  std::string model;
  int64_t created_ms = 0;
  std::optional<TurnRow> last_turn;
  std::string approval_mode = "auto";  // "auto" | "ask"
};

// A tool call that waits (or waited) for the user (README.md §Approvals).
struct ApprovalRow {
  std::string id;
  std::string agent_id;
  std::string turn_id;
  std::string call_id;
  std::string tool;
  std::string arguments;  // JSON text, as the model wrote it
  // "pending" | "approved" | "always" | "denied" | "expired" | "cancelled"
  std::string state = "pending";
  std::string reason;
  int64_t created_ms = 0;
  int64_t decided_ms = 0;  // 0 while pending
};

struct ItemRow {
  std::string agent_id;
  int64_t seq = 0;  // 1, 2, ... per agent
  std::string turn_id;
  std::string role;     // "user" | "assistant" | "tool" | "system"
  std::string kind;     // "text" | "tool_call" | "tool_result" | "error" | "approval" | "summary"
  std::string payload;  // JSON text
  int64_t at_ms = 0;
  int64_t event_id = 0;
};

struct EventRow {
  int64_t id = 0;
  std::string channel;  // "transcript" | "agents" | "approvals"
  std::string agent_id;
  std::optional<ItemRow> item;          // channel transcript
  std::optional<AgentRow> agent;        // channel agents: the agent as it was after the change
  std::optional<ApprovalRow> approval;  // channel approvals: the approval after the change
};

// Creates an agent with |id| unless |client_nonce| (non-empty) already created one, which is
// then returned unchanged. Appends an "agents" event for a new agent.
// |approval_mode|: "auto" | "ask".
Result<AgentRow> create_agent(db::Database& d, const std::string& id, const std::string& name,
                              const std::string& model, const std::string& client_nonce,
                              int64_t now_ms, const std::string& approval_mode = "auto");

// Sets the name (unless empty) and the approval mode (unless empty) and appends an "agents"
// event. Errors: kNotFound.
Result<AgentRow> update_agent(db::Database& d, const std::string& id, const std::string& name,
                              const std::string& approval_mode);

Result<std::optional<AgentRow>> find_agent(db::Database& d, const std::string& id);
Result<std::vector<AgentRow>> list_agents(db::Database& d);

struct StartedTurn {
  std::string turn_id;
  int64_t seq = 0;        // the user message's
  bool existing = false;  // the nonce was seen: nothing was started
};

// Send's write: dedupe by (agent, client_nonce); otherwise, if no turn of the agent is
// running, a new running turn |turn_id| and the user's text item |user_payload|.
// Errors: kNotFound (no such agent), kFailedPrecondition (a turn is running).
Result<StartedTurn> start_turn(db::Database& d, const std::string& agent_id,
                               const std::string& turn_id, const std::string& client_nonce,
                               const std::string& user_payload, int64_t now_ms);

// Appends one transcript item (seq = the agent's next) and its event.
Result<ItemRow> append_item(db::Database& d, const std::string& agent_id,
                            const std::string& turn_id, std::string_view role,
                            std::string_view kind, const std::string& payload, int64_t now_ms);

// One item for append_items().
struct NewItem {
  std::string role;
  std::string kind;
  std::string payload;
};

// Appends |items| (seq = the agent's next, in order) and their events in one transaction, so
// a model step's text and tool calls cost one commit. Returns the rows, in order.
Result<std::vector<ItemRow>> append_items(db::Database& d, const std::string& agent_id,
                                          const std::string& turn_id,
                                          std::span<const NewItem> items, int64_t now_ms);

// Ends a running turn as |state| ("done" | "failed" | "cancelled" | "waiting_for_user") with
// |error| and appends an "agents" event. A turn already ended is left alone (returns ok).
Status end_turn(db::Database& d, const std::string& turn_id, std::string_view state,
                const std::string& error, int64_t now_ms);

// Cancel of a turn that waits for the user: it ends as "cancelled" with an error item.
// Returns the turn's id, or "" when the agent's last turn is not waiting.
Result<std::string> cancel_waiting_turn(db::Database& d, const std::string& agent_id,
                                        int64_t now_ms);

// Respond's resume: the agent's last turn, when it waits for the user, runs again (agents
// event). Errors: kNotFound (no such agent), kFailedPrecondition (its last turn does not
// wait; the message says what it is).
Result<std::string> resume_turn(db::Database& d, const std::string& agent_id);

// A new pending approval |a| (id, agent_id, turn_id, call_id, tool, arguments, created_ms),
// with its transcript item and its "approvals" event, in one transaction.
Result<ApprovalRow> create_approval(db::Database& d, const ApprovalRow& a);

// Moves approval |id| from one of |from| ("pending", or "pending" and "expired") to |state|
// with |reason|, appends a transcript item and an "approvals" event; "always" also keeps the
// rule (agent, tool). Returns the approval as it is afterwards and whether this call changed
// it (false: it was in another state, left alone). Errors: kNotFound.
struct DecidedApproval {
  ApprovalRow approval;
  bool changed = false;
};
Result<DecidedApproval> decide_approval(db::Database& d, const std::string& id,
                                        std::span<const std::string_view> from,
                                        std::string_view state, const std::string& reason,
                                        int64_t now_ms);

Result<std::optional<ApprovalRow>> find_approval(db::Database& d, const std::string& id);

// The latest approval of call |call_id| in |turn_id|, if any.
Result<std::optional<ApprovalRow>> approval_for_call(db::Database& d, const std::string& turn_id,
                                                     const std::string& call_id);

// Whether a call of |tool| by |agent_id| must wait: the agent is in "ask" mode and has no
// "always" rule for the tool.
Result<bool> approval_needed(db::Database& d, const std::string& agent_id, const std::string& tool);

// Items of |agent_id| with seq > |after_seq|, at most |limit| (+1 to tell whether there is more).
Result<std::vector<ItemRow>> transcript_after(db::Database& d, const std::string& agent_id,
                                              int64_t after_seq, int limit);

// Events with id > |after_id|, oldest first, at most |limit|.
Result<std::vector<EventRow>> events_after(db::Database& d, int64_t after_id, int limit);

// At start: every turn a crashed agent left running ends as failed ("agent restarted"), with an
// error item in its transcript; a turn that was waiting for an approval instead ends as
// waiting_for_user ("agent restarted while waiting for approval") and the approval expires,
// so Respond can still answer it. Returns how many turns.
Result<int> fail_running_turns(db::Database& d, int64_t now_ms);

// The agent's JSON snapshot stored with an "agents" event, and back.
std::string agent_to_json(const AgentRow& a);
std::optional<AgentRow> agent_from_json(std::string_view text);
std::string approval_to_json(const ApprovalRow& a);
std::optional<ApprovalRow> approval_from_json(std::string_view text);

}  // namespace cb::agent
