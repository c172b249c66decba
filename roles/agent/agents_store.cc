#include "roles/agent/agents_store.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace cb::agent {
namespace {

using nlohmann::json;

std::string col_text(const db::Statement& st, int col) { return std::string(st.column_text(col)); }

constexpr std::string_view kAgentCols =
    "a.id, a.name, a.model, a.created_ms, a.approval_mode, "
    "(SELECT t.id FROM turns t WHERE t.agent_id = a.id ORDER BY t.rowid DESC LIMIT 1), "
    "(SELECT t.state FROM turns t WHERE t.agent_id = a.id ORDER BY t.rowid DESC LIMIT 1), "
    "(SELECT t.error FROM turns t WHERE t.agent_id = a.id ORDER BY t.rowid DESC LIMIT 1)";

AgentRow read_agent(const db::Statement& st) {
  AgentRow a;
  a.id = col_text(st, 0);
  a.name = col_text(st, 1);
  a.model = col_text(st, 2);
  a.created_ms = st.column_int64(3);
  a.approval_mode = col_text(st, 4);
  if (!st.column_is_null(5)) {
    TurnRow t;
    t.id = col_text(st, 5);
    t.agent_id = a.id;
    t.state = col_text(st, 6);
    t.error = col_text(st, 7);
    a.last_turn = std::move(t);
  }
  return a;
}

constexpr std::string_view kApprovalCols =
    "id, agent_id, turn_id, call_id, tool, arguments, state, reason, created_ms, "
    "COALESCE(decided_ms, 0)";

ApprovalRow read_approval(const db::Statement& st) {
  ApprovalRow a;
  a.id = col_text(st, 0);
  a.agent_id = col_text(st, 1);
  a.turn_id = col_text(st, 2);
  a.call_id = col_text(st, 3);
  a.tool = col_text(st, 4);
  a.arguments = col_text(st, 5);
  a.state = col_text(st, 6);
  a.reason = col_text(st, 7);
  a.created_ms = st.column_int64(8);
  a.decided_ms = st.column_int64(9);
  return a;
}

Result<std::optional<ApprovalRow>> select_approval(db::Database& d, std::string_view where,
                                                   const std::string& v1,
                                                   const std::string& v2 = {}) {
  ASSIGN_OR_RETURN(db::Statement st, d.prepare(fmt::format("SELECT {} FROM approvals WHERE {}",
                                                           kApprovalCols, where)));
  RETURN_IF_ERROR(st.bind_text(1, v1));
  if (!v2.empty()) RETURN_IF_ERROR(st.bind_text(2, v2));
  ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return std::optional<ApprovalRow>();
  return std::optional<ApprovalRow>(read_approval(st));
}

Status append_approval_event(db::Database& d, const ApprovalRow& a) {
  ASSIGN_OR_RETURN(db::Statement st,
                   d.prepare("INSERT INTO events(channel, agent_id, payload) VALUES "
                             "('approvals', ?1, ?2)"));
  RETURN_IF_ERROR(st.bind_text(1, a.agent_id));
  RETURN_IF_ERROR(st.bind_text(2, approval_to_json(a)));
  return st.execute();
}

// The transcript item telling what became of approval |a|.
std::string approval_item(const ApprovalRow& a) {
  json j = {{"approval_id", a.id},
            {"call_id", a.call_id},
            {"name", a.tool},
            {"arguments", a.arguments},
            {"state", a.state}};
  if (!a.reason.empty()) j["reason"] = a.reason;
  return j.dump();
}

Result<std::optional<AgentRow>> select_agent(db::Database& d, std::string_view where,
                                             const std::string& value) {
  ASSIGN_OR_RETURN(db::Statement st,
                   d.prepare(fmt::format("SELECT {} FROM agents a WHERE {}", kAgentCols, where)));
  RETURN_IF_ERROR(st.bind_text(1, value));
  ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return std::optional<AgentRow>();
  return std::optional<AgentRow>(read_agent(st));
}

// Appends an "agents" event holding |agent_id|'s snapshot as it is now.
Status append_agent_event(db::Database& d, const std::string& agent_id) {
  ASSIGN_OR_RETURN(auto agent, select_agent(d, "a.id = ?1", agent_id));
  if (!agent) return not_found(fmt::format("agent {} not found", agent_id));
  ASSIGN_OR_RETURN(db::Statement st,
                   d.prepare("INSERT INTO events(channel, agent_id, payload) VALUES "
                             "('agents', ?1, ?2)"));
  RETURN_IF_ERROR(st.bind_text(1, agent_id));
  RETURN_IF_ERROR(st.bind_text(2, agent_to_json(*agent)));
  return st.execute();
}

Result<ItemRow> insert_item(db::Database& d, const std::string& agent_id,
                            const std::string& turn_id, std::string_view role,
                            std::string_view kind, const std::string& payload, int64_t now_ms) {
  ASSIGN_OR_RETURN(db::Statement ev, d.prepare("INSERT INTO events(channel, agent_id) VALUES "
                                               "('transcript', ?1)"));
  RETURN_IF_ERROR(ev.bind_text(1, agent_id));
  RETURN_IF_ERROR(ev.execute());
  ItemRow item;
  item.event_id = d.last_insert_rowid();
  ASSIGN_OR_RETURN(db::Statement seq,
                   d.prepare("SELECT COALESCE(MAX(seq), 0) + 1 FROM items WHERE agent_id = ?1"));
  RETURN_IF_ERROR(seq.bind_text(1, agent_id));
  ASSIGN_OR_RETURN(bool row, seq.step());
  if (!row) return internal_error("items: no next seq");
  item.seq = seq.column_int64(0);
  seq.reset();
  ASSIGN_OR_RETURN(db::Statement st,
                   d.prepare("INSERT INTO items(agent_id, seq, turn_id, role, kind, payload, "
                             "at_ms, event_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"));
  RETURN_IF_ERROR(st.bind_text(1, agent_id));
  RETURN_IF_ERROR(st.bind_int64(2, item.seq));
  RETURN_IF_ERROR(st.bind_text(3, turn_id));
  RETURN_IF_ERROR(st.bind_text(4, role));
  RETURN_IF_ERROR(st.bind_text(5, kind));
  RETURN_IF_ERROR(st.bind_text(6, payload));
  RETURN_IF_ERROR(st.bind_int64(7, now_ms));
  RETURN_IF_ERROR(st.bind_int64(8, item.event_id));
  RETURN_IF_ERROR(st.execute());
  item.agent_id = agent_id;
  item.turn_id = turn_id;
  item.role = std::string(role);
  item.kind = std::string(kind);
  item.payload = payload;
  item.at_ms = now_ms;
  return item;
}

ItemRow read_item(const db::Statement& st, int first) {
  ItemRow i;
  i.agent_id = col_text(st, first);
  i.seq = st.column_int64(first + 1);
  i.turn_id = col_text(st, first + 2);
  i.role = col_text(st, first + 3);
  i.kind = col_text(st, first + 4);
  i.payload = col_text(st, first + 5);
  i.at_ms = st.column_int64(first + 6);
  i.event_id = st.column_int64(first + 7);
  return i;
}

Status end_turn_in_txn(db::Database& d, const std::string& turn_id, std::string_view state,
                       const std::string& error, int64_t now_ms, std::string* agent_id) {
  ASSIGN_OR_RETURN(db::Statement st,
                   d.prepare("UPDATE turns SET state = ?2, error = ?3, ended_ms = ?4 "
                             "WHERE id = ?1 AND state = 'running' RETURNING agent_id"));
  RETURN_IF_ERROR(st.bind_text(1, turn_id));
  RETURN_IF_ERROR(st.bind_text(2, state));
  RETURN_IF_ERROR(st.bind_text(3, error));
  RETURN_IF_ERROR(st.bind_int64(4, now_ms));
  ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return ok_status();
  *agent_id = col_text(st, 0);
  st.reset();
  return append_agent_event(d, *agent_id);
}

Result<DecidedApproval> decide_approval_in_txn(db::Database& d, const std::string& id,
                                               std::span<const std::string_view> from,
                                               std::string_view state, const std::string& reason,
                                               int64_t now_ms) {
  ASSIGN_OR_RETURN(auto found, select_approval(d, "id = ?1", id));
  if (!found) return not_found(fmt::format("approval {} not found", id));
  DecidedApproval out;
  out.approval = std::move(*found);
  bool allowed = false;
  for (std::string_view f : from) allowed = allowed || out.approval.state == f;
  if (!allowed) return out;
  ASSIGN_OR_RETURN(db::Statement st,
                   d.prepare("UPDATE approvals SET state = ?2, reason = ?3, decided_ms = ?4 "
                             "WHERE id = ?1"));
  RETURN_IF_ERROR(st.bind_text(1, id));
  RETURN_IF_ERROR(st.bind_text(2, state));
  RETURN_IF_ERROR(st.bind_text(3, reason));
  RETURN_IF_ERROR(st.bind_int64(4, now_ms));
  RETURN_IF_ERROR(st.execute());
  out.approval.state = std::string(state);
  out.approval.reason = reason;
  out.approval.decided_ms = now_ms;
  out.changed = true;
  if (state == "always") {
    ASSIGN_OR_RETURN(db::Statement rule,
                     d.prepare("INSERT OR IGNORE INTO approval_rules(agent_id, tool, created_ms) "
                               "VALUES (?1, ?2, ?3)"));
    RETURN_IF_ERROR(rule.bind_text(1, out.approval.agent_id));
    RETURN_IF_ERROR(rule.bind_text(2, out.approval.tool));
    RETURN_IF_ERROR(rule.bind_int64(3, now_ms));
    RETURN_IF_ERROR(rule.execute());
  }
  ASSIGN_OR_RETURN(ItemRow item,
                   insert_item(d, out.approval.agent_id, out.approval.turn_id, "system", "approval",
                               approval_item(out.approval), now_ms));
  (void)item;
  RETURN_IF_ERROR(append_approval_event(d, out.approval));
  return out;
}

}  // namespace

std::string agent_to_json(const AgentRow& a) {
  json j = {{"id", a.id},
            {"name", a.name},
            {"model", a.model},
            {"created_ms", a.created_ms},
            {"approval_mode", a.approval_mode}};
  if (a.last_turn) {
    j["last_turn"] = {
        {"id", a.last_turn->id}, {"state", a.last_turn->state}, {"error", a.last_turn->error}};
  }
  return j.dump();
}

std::optional<AgentRow> agent_from_json(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  AgentRow a;
  a.id = j.value("id", "");
  a.name = j.value("name", "");
  a.model = j.value("model", "");
  a.created_ms = j.value("created_ms", int64_t{0});
  a.approval_mode = j.value("approval_mode", "auto");
  if (j.contains("last_turn") && j["last_turn"].is_object()) {
    const json& t = j["last_turn"];
    TurnRow turn;
    turn.id = t.value("id", "");
    turn.agent_id = a.id;
    turn.state = t.value("state", "");
    turn.error = t.value("error", "");
    a.last_turn = std::move(turn);
  }
  return a;
}

std::string approval_to_json(const ApprovalRow& a) {
  return json{{"id", a.id},
              {"agent_id", a.agent_id},
              {"turn_id", a.turn_id},
              {"call_id", a.call_id},
              {"tool", a.tool},
              {"arguments", a.arguments},
              {"state", a.state},
              {"reason", a.reason},
              {"created_ms", a.created_ms},
              {"decided_ms", a.decided_ms}}
      .dump();
}

std::optional<ApprovalRow> approval_from_json(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  ApprovalRow a;
  a.id = j.value("id", "");
  a.agent_id = j.value("agent_id", "");
  a.turn_id = j.value("turn_id", "");
  a.call_id = j.value("call_id", "");
  a.tool = j.value("tool", "");
  a.arguments = j.value("arguments", "");
  a.state = j.value("state", "");
  a.reason = j.value("reason", "");
  a.created_ms = j.value("created_ms", int64_t{0});
  a.decided_ms = j.value("decided_ms", int64_t{0});
  return a;
}

Result<AgentRow> create_agent(db::Database& d, const std::string& id, const std::string& name,
                              const std::string& model, const std::string& client_nonce,
                              int64_t now_ms, const std::string& approval_mode) {
  ASSIGN_OR_RETURN(db::Transaction txn, d.begin());
  if (!client_nonce.empty()) {
    ASSIGN_OR_RETURN(auto seen, select_agent(d, "a.client_nonce = ?1", client_nonce));
    if (seen) return std::move(*seen);
  }
  ASSIGN_OR_RETURN(db::Statement st,
                   d.prepare("INSERT INTO agents(id, name, model, client_nonce, created_ms, "
                             "approval_mode) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"));
  RETURN_IF_ERROR(st.bind_text(1, id));
  RETURN_IF_ERROR(st.bind_text(2, name));
  RETURN_IF_ERROR(st.bind_text(3, model));
  if (client_nonce.empty()) {
    RETURN_IF_ERROR(st.bind_null(4));
  } else {
    RETURN_IF_ERROR(st.bind_text(4, client_nonce));
  }
  RETURN_IF_ERROR(st.bind_int64(5, now_ms));
  RETURN_IF_ERROR(st.bind_text(6, approval_mode));
  RETURN_IF_ERROR(st.execute());
  RETURN_IF_ERROR(append_agent_event(d, id));
  RETURN_IF_ERROR(txn.commit());
  AgentRow a;
  a.id = id;
  a.name = name;
  a.model = model;
  a.created_ms = now_ms;
  a.approval_mode = approval_mode;
  return a;
}

Result<AgentRow> update_agent(db::Database& d, const std::string& id, const std::string& name,
                              const std::string& approval_mode) {
  ASSIGN_OR_RETURN(db::Transaction txn, d.begin());
  ASSIGN_OR_RETURN(auto agent, select_agent(d, "a.id = ?1", id));
  if (!agent) return not_found(fmt::format("agent {} not found", id));
  ASSIGN_OR_RETURN(db::Statement st,
                   d.prepare("UPDATE agents SET name = COALESCE(NULLIF(?2, ''), name), "
                             "approval_mode = COALESCE(NULLIF(?3, ''), approval_mode) "
                             "WHERE id = ?1"));
  RETURN_IF_ERROR(st.bind_text(1, id));
  RETURN_IF_ERROR(st.bind_text(2, name));
  RETURN_IF_ERROR(st.bind_text(3, approval_mode));
  RETURN_IF_ERROR(st.execute());
  RETURN_IF_ERROR(append_agent_event(d, id));
  ASSIGN_OR_RETURN(auto after, select_agent(d, "a.id = ?1", id));
  RETURN_IF_ERROR(txn.commit());
  return std::move(*after);
}

Result<std::optional<AgentRow>> find_agent(db::Database& d, const std::string& id) {
  return select_agent(d, "a.id = ?1", id);
}

Result<std::vector<AgentRow>> list_agents(db::Database& d) {
  ASSIGN_OR_RETURN(db::Statement st,
                   d.prepare(fmt::format("SELECT {} FROM agents a ORDER BY a.rowid", kAgentCols)));
  std::vector<AgentRow> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    out.push_back(read_agent(st));
  }
  return out;
}

Result<StartedTurn> start_turn(db::Database& d, const std::string& agent_id,
                               const std::string& turn_id, const std::string& client_nonce,
                               const std::string& user_payload, int64_t now_ms) {
  ASSIGN_OR_RETURN(db::Transaction txn, d.begin());
  ASSIGN_OR_RETURN(auto agent, select_agent(d, "a.id = ?1", agent_id));
  if (!agent) return not_found(fmt::format("agent {} not found", agent_id));
  if (!client_nonce.empty()) {
    ASSIGN_OR_RETURN(db::Statement seen,
                     d.prepare("SELECT t.id, (SELECT MIN(i.seq) FROM items i WHERE i.agent_id = "
                               "t.agent_id AND i.turn_id = t.id) FROM turns t WHERE t.agent_id = "
                               "?1 AND t.client_nonce = ?2"));
    RETURN_IF_ERROR(seen.bind_text(1, agent_id));
    RETURN_IF_ERROR(seen.bind_text(2, client_nonce));
    ASSIGN_OR_RETURN(bool row, seen.step());
    if (row) {
      StartedTurn t;
      t.turn_id = col_text(seen, 0);
      t.seq = seen.column_int64(1);
      t.existing = true;
      return t;
    }
  }
  if (agent->last_turn && agent->last_turn->state == "running") {
    return failed_precondition(fmt::format("agent {} is running turn {}; cancel it or wait",
                                           agent_id, agent->last_turn->id));
  }
  ASSIGN_OR_RETURN(db::Statement st,
                   d.prepare("INSERT INTO turns(id, agent_id, state, client_nonce, started_ms) "
                             "VALUES (?1, ?2, 'running', ?3, ?4)"));
  RETURN_IF_ERROR(st.bind_text(1, turn_id));
  RETURN_IF_ERROR(st.bind_text(2, agent_id));
  if (client_nonce.empty()) {
    RETURN_IF_ERROR(st.bind_null(3));
  } else {
    RETURN_IF_ERROR(st.bind_text(3, client_nonce));
  }
  RETURN_IF_ERROR(st.bind_int64(4, now_ms));
  RETURN_IF_ERROR(st.execute());
  ASSIGN_OR_RETURN(ItemRow item,
                   insert_item(d, agent_id, turn_id, "user", "text", user_payload, now_ms));
  RETURN_IF_ERROR(append_agent_event(d, agent_id));
  RETURN_IF_ERROR(txn.commit());
  StartedTurn t;
  t.turn_id = turn_id;
  t.seq = item.seq;
  return t;
}

Result<ItemRow> append_item(db::Database& d, const std::string& agent_id,
                            const std::string& turn_id, std::string_view role,
                            std::string_view kind, const std::string& payload, int64_t now_ms) {
  ASSIGN_OR_RETURN(db::Transaction txn, d.begin());
  ASSIGN_OR_RETURN(ItemRow item, insert_item(d, agent_id, turn_id, role, kind, payload, now_ms));
  RETURN_IF_ERROR(txn.commit());
  return item;
}

Result<std::vector<ItemRow>> append_items(db::Database& d, const std::string& agent_id,
                                          const std::string& turn_id,
                                          std::span<const NewItem> items, int64_t now_ms) {
  ASSIGN_OR_RETURN(db::Transaction txn, d.begin());
  std::vector<ItemRow> out;
  out.reserve(items.size());
  for (const NewItem& n : items) {
    ASSIGN_OR_RETURN(ItemRow item,
                     insert_item(d, agent_id, turn_id, n.role, n.kind, n.payload, now_ms));
    out.push_back(std::move(item));
  }
  RETURN_IF_ERROR(txn.commit());
  return out;
}

Status end_turn(db::Database& d, const std::string& turn_id, std::string_view state,
                const std::string& error, int64_t now_ms) {
  ASSIGN_OR_RETURN(db::Transaction txn, d.begin());
  std::string agent_id;
  RETURN_IF_ERROR(end_turn_in_txn(d, turn_id, state, error, now_ms, &agent_id));
  return txn.commit();
}

Result<std::string> cancel_waiting_turn(db::Database& d, const std::string& agent_id,
                                        int64_t now_ms) {
  ASSIGN_OR_RETURN(db::Transaction txn, d.begin());
  ASSIGN_OR_RETURN(auto agent, select_agent(d, "a.id = ?1", agent_id));
  if (!agent) return not_found(fmt::format("agent {} not found", agent_id));
  if (!agent->last_turn || agent->last_turn->state != "waiting_for_user") return std::string();
  const std::string turn_id = agent->last_turn->id;
  const std::string message = "cancelled by the user";
  ASSIGN_OR_RETURN(ItemRow item, insert_item(d, agent_id, turn_id, "system", "error",
                                             json{{"message", message}}.dump(), now_ms));
  (void)item;
  ASSIGN_OR_RETURN(db::Statement st,
                   d.prepare("UPDATE turns SET state = 'cancelled', error = ?2, ended_ms = ?3 "
                             "WHERE id = ?1"));
  RETURN_IF_ERROR(st.bind_text(1, turn_id));
  RETURN_IF_ERROR(st.bind_text(2, message));
  RETURN_IF_ERROR(st.bind_int64(3, now_ms));
  RETURN_IF_ERROR(st.execute());
  RETURN_IF_ERROR(append_agent_event(d, agent_id));
  RETURN_IF_ERROR(txn.commit());
  return turn_id;
}

Result<std::string> resume_turn(db::Database& d, const std::string& agent_id) {
  ASSIGN_OR_RETURN(db::Transaction txn, d.begin());
  ASSIGN_OR_RETURN(auto agent, select_agent(d, "a.id = ?1", agent_id));
  if (!agent) return not_found(fmt::format("agent {} not found", agent_id));
  if (!agent->last_turn) return failed_precondition(fmt::format("agent {} has no turn", agent_id));
  if (agent->last_turn->state != "waiting_for_user") {
    return failed_precondition(
        fmt::format("agent {}'s last turn {} is {}, not waiting for the user", agent_id,
                    agent->last_turn->id, agent->last_turn->state));
  }
  const std::string turn_id = agent->last_turn->id;
  ASSIGN_OR_RETURN(db::Statement st,
                   d.prepare("UPDATE turns SET state = 'running', error = '', ended_ms = NULL "
                             "WHERE id = ?1"));
  RETURN_IF_ERROR(st.bind_text(1, turn_id));
  RETURN_IF_ERROR(st.execute());
  RETURN_IF_ERROR(append_agent_event(d, agent_id));
  RETURN_IF_ERROR(txn.commit());
  return turn_id;
}

Result<ApprovalRow> create_approval(db::Database& d, const ApprovalRow& a) {
  ASSIGN_OR_RETURN(db::Transaction txn, d.begin());
  ASSIGN_OR_RETURN(db::Statement st,
                   d.prepare("INSERT INTO approvals(id, agent_id, turn_id, call_id, tool, "
                             "arguments, state, reason, created_ms) VALUES (?1, ?2, ?3, ?4, ?5, "
                             "?6, 'pending', '', ?7)"));
  RETURN_IF_ERROR(st.bind_text(1, a.id));
  RETURN_IF_ERROR(st.bind_text(2, a.agent_id));
  RETURN_IF_ERROR(st.bind_text(3, a.turn_id));
  RETURN_IF_ERROR(st.bind_text(4, a.call_id));
  RETURN_IF_ERROR(st.bind_text(5, a.tool));
  RETURN_IF_ERROR(st.bind_text(6, a.arguments));
  RETURN_IF_ERROR(st.bind_int64(7, a.created_ms));
  RETURN_IF_ERROR(st.execute());
  ApprovalRow out = a;
  out.state = "pending";
  out.reason.clear();
  out.decided_ms = 0;
  ASSIGN_OR_RETURN(ItemRow item, insert_item(d, a.agent_id, a.turn_id, "system", "approval",
                                             approval_item(out), a.created_ms));
  (void)item;
  RETURN_IF_ERROR(append_approval_event(d, out));
  RETURN_IF_ERROR(txn.commit());
  return out;
}

Result<DecidedApproval> decide_approval(db::Database& d, const std::string& id,
                                        std::span<const std::string_view> from,
                                        std::string_view state, const std::string& reason,
                                        int64_t now_ms) {
  ASSIGN_OR_RETURN(db::Transaction txn, d.begin());
  ASSIGN_OR_RETURN(DecidedApproval out, decide_approval_in_txn(d, id, from, state, reason, now_ms));
  if (out.changed) RETURN_IF_ERROR(txn.commit());
  return out;
}

Result<std::optional<ApprovalRow>> find_approval(db::Database& d, const std::string& id) {
  return select_approval(d, "id = ?1", id);
}

Result<std::optional<ApprovalRow>> approval_for_call(db::Database& d, const std::string& turn_id,
                                                     const std::string& call_id) {
  return select_approval(d, "turn_id = ?1 AND call_id = ?2 ORDER BY rowid DESC LIMIT 1", turn_id,
                         call_id);
}

Result<bool> approval_needed(db::Database& d, const std::string& agent_id,
                             const std::string& tool) {
  ASSIGN_OR_RETURN(db::Statement st,
                   d.prepare("SELECT a.approval_mode = 'ask' AND NOT EXISTS (SELECT 1 FROM "
                             "approval_rules r WHERE r.agent_id = a.id AND r.tool = ?2) "
                             "FROM agents a WHERE a.id = ?1"));
  RETURN_IF_ERROR(st.bind_text(1, agent_id));
  RETURN_IF_ERROR(st.bind_text(2, tool));
  ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return not_found(fmt::format("agent {} not found", agent_id));
  return st.column_int64(0) != 0;
}

Result<std::vector<ItemRow>> transcript_after(db::Database& d, const std::string& agent_id,
                                              int64_t after_seq, int limit) {
  ASSIGN_OR_RETURN(db::Statement st,
                   d.prepare("SELECT agent_id, seq, turn_id, role, kind, payload, at_ms, event_id "
                             "FROM items WHERE agent_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3"));
  RETURN_IF_ERROR(st.bind_text(1, agent_id));
  RETURN_IF_ERROR(st.bind_int64(2, after_seq));
  RETURN_IF_ERROR(st.bind_int64(3, limit));
  std::vector<ItemRow> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    out.push_back(read_item(st, 0));
  }
  return out;
}

Result<std::vector<EventRow>> events_after(db::Database& d, int64_t after_id, int limit) {
  ASSIGN_OR_RETURN(
      db::Statement st,
      d.prepare("SELECT e.id, e.channel, e.agent_id, e.payload, i.agent_id, i.seq, i.turn_id, "
                "i.role, i.kind, i.payload, i.at_ms, i.event_id FROM events e LEFT JOIN items i "
                "ON i.event_id = e.id WHERE e.id > ?1 ORDER BY e.id LIMIT ?2"));
  RETURN_IF_ERROR(st.bind_int64(1, after_id));
  RETURN_IF_ERROR(st.bind_int64(2, limit));
  std::vector<EventRow> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    EventRow e;
    e.id = st.column_int64(0);
    e.channel = col_text(st, 1);
    e.agent_id = col_text(st, 2);
    if (e.channel == "agents" && !st.column_is_null(3)) {
      e.agent = agent_from_json(st.column_text(3));
    } else if (e.channel == "approvals" && !st.column_is_null(3)) {
      e.approval = approval_from_json(st.column_text(3));
    } else if (!st.column_is_null(4)) {
      e.item = read_item(st, 4);
    }
    out.push_back(std::move(e));
  }
  return out;
}

Result<int> fail_running_turns(db::Database& d, int64_t now_ms) {
  ASSIGN_OR_RETURN(db::Transaction txn, d.begin());
  std::vector<std::pair<std::string, std::string>> running;  // turn, agent
  {
    ASSIGN_OR_RETURN(db::Statement st,
                     d.prepare("SELECT id, agent_id FROM turns WHERE state = 'running'"));
    while (true) {
      ASSIGN_OR_RETURN(bool row, st.step());
      if (!row) break;
      running.emplace_back(col_text(st, 0), col_text(st, 1));
    }
  }
  const std::string message = "agent restarted";
  const std::string payload = json{{"message", message}}.dump();
  const std::string waiting = "agent restarted while waiting for approval";
  constexpr std::string_view kPending[] = {"pending"};
  for (const auto& [turn, agent] : running) {
    std::vector<std::string> pending;
    {
      ASSIGN_OR_RETURN(db::Statement st, d.prepare("SELECT id FROM approvals WHERE turn_id = ?1 "
                                                   "AND state = 'pending' ORDER BY rowid"));
      RETURN_IF_ERROR(st.bind_text(1, turn));
      while (true) {
        ASSIGN_OR_RETURN(bool row, st.step());
        if (!row) break;
        pending.push_back(col_text(st, 0));
      }
    }
    std::string agent_id;
    if (!pending.empty()) {
      // The user can still answer: the turn waits, and Respond resumes it.
      for (const std::string& id : pending) {
        ASSIGN_OR_RETURN(DecidedApproval a,
                         decide_approval_in_txn(d, id, kPending, "expired", message, now_ms));
        (void)a;
      }
      RETURN_IF_ERROR(end_turn_in_txn(d, turn, "waiting_for_user", waiting, now_ms, &agent_id));
      continue;
    }
    ASSIGN_OR_RETURN(ItemRow item, insert_item(d, agent, turn, "system", "error", payload, now_ms));
    (void)item;
    RETURN_IF_ERROR(end_turn_in_txn(d, turn, "failed", message, now_ms, &agent_id));
  }
  RETURN_IF_ERROR(txn.commit());
  return static_cast<int>(running.size());
}

}  // namespace cb::agent
