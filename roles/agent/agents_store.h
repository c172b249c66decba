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
#include <string>
#include <string_view>
#include <vector>

namespace cb::agent {

struct TurnRow {
  std::string id;
  std::string agent_id;
  std::string state;  // "running" | "done" | "failed" | "cancelled"
  std::string error;  // with "failed" (and "cancelled"): what happened
};

struct AgentRow {
  std::string id;
  std::string name;
  std::string model;
  int64_t created_ms = 0;
  std::optional<TurnRow> last_turn;
};

struct ItemRow {
  std::string agent_id;
  int64_t seq = 0;  // 1, 2, ... per agent
  std::string turn_id;
  std::string role;     // "user" | "assistant" | "tool" | "system"
  std::string kind;     // "text" | "tool_call" | "tool_result" | "error"
  std::string payload;  // JSON text
  int64_t at_ms = 0;
  int64_t event_id = 0;
};

struct EventRow {
  int64_t id = 0;
  std::string channel;  // "transcript" | "agents"
  std::string agent_id;
  std::optional<ItemRow> item;    // channel transcript
  std::optional<AgentRow> agent;  // channel agents: the agent as it was after the change
};

// Creates an agent with |id| unless |client_nonce| (non-empty) already created one, which is
// then returned unchanged. Appends an "agents" event for a new agent.
Result<AgentRow> create_agent(db::Database& d, const std::string& id, const std::string& name,
                              const std::string& model, const std::string& client_nonce,
                              int64_t now_ms);

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

// Ends a running turn as |state| ("done" | "failed" | "cancelled") with |error| and appends an
// "agents" event. A turn already ended is left alone (returns ok).
Status end_turn(db::Database& d, const std::string& turn_id, std::string_view state,
                const std::string& error, int64_t now_ms);

// Items of |agent_id| with seq > |after_seq|, at most |limit| (+1 to tell whether there is more).
Result<std::vector<ItemRow>> transcript_after(db::Database& d, const std::string& agent_id,
                                              int64_t after_seq, int limit);

// Events with id > |after_id|, oldest first, at most |limit|.
Result<std::vector<EventRow>> events_after(db::Database& d, int64_t after_id, int limit);

// At start: every turn a crashed agent left running ends as failed ("agent restarted"), with an
// error item in its transcript. Returns how many.
Result<int> fail_running_turns(db::Database& d, int64_t now_ms);

// The agent's JSON snapshot stored with an "agents" event, and back.
std::string agent_to_json(const AgentRow& a);
std::optional<AgentRow> agent_from_json(std::string_view text);

}  // namespace cb::agent
