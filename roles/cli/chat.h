#pragma once
// `cocoonbox agents` and `cocoonbox chat` (README.md §Chat; seed §4.4, issue 6 item 6): talk to
// the agent that lives in a box from a terminal.
//
//   cocoonbox agents [--box B] [--json]
//   cocoonbox chat [--box B] [--agent ID] [--new] [PROMPT] [--json]
//
// Both go through the api's edge (cocoonbox.agent.v1.Agents and Session.Events with
// x-cocoonbox-box), which wakes a hibernated box. chat sends the prompt (Agents.Send with a
// client_nonce, so a retried Send starts one turn) and follows Session.Events for that agent
// until the turn ends: text as it streams, one line per tool call, the first line of each
// result, the end state. A dropped events stream is resumed from the last offset_key. Without
// PROMPT it reads prompts from stdin, one per line, until EOF; Ctrl-C during a turn cancels it
// (Agents.Cancel), a second Ctrl-C exits. A tool call waiting for approval is asked about on
// the terminal and answered with Agents.Respond.
//
// Exit codes: 0 ok (the turn ended done), 1 error or a turn that failed, 2 usage, 130 a turn
// cancelled with Ctrl-C.

#include "cocoonbox/agent/v1/agents.pb.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace cb::cli {

struct ChatOptions {
  std::string box;
  bool json = false;
  std::string agent;       // chat --agent
  bool new_agent = false;  // chat --new
  std::string prompt;      // chat PROMPT (empty: interactive)
};

// Adds `agents` and `chat` to |app|; their options land in |o|.
void add_chat_commands(CLI::App& app, ChatOptions& o);

// True for "agents" and "chat".
bool is_chat_command(std::string_view command);

// Runs |command| signed in with the stored login. Returns the exit status.
int run_chat_command(std::string_view command, const ChatOptions& o);

// "running", "done", "failed", "cancelled", "waiting_for_user", or "" for an agent with no
// turn yet.
std::string turn_state_name(cocoonbox::agent::v1::TurnState s);

// The one-line summary of a tool call: `shell: ls -la`, `read_file: src/main.cc`; other tools
// show their arguments as compact JSON. At most |width| characters, newlines as spaces.
std::string tool_call_summary(std::string_view name, std::string_view arguments_json,
                              size_t width = 120);

// What chat shows of one turn, from the Session.Events of its agent (sans I/O: events in,
// text out). Events of other agents, other turns, repeated items and the user's own prompt
// (text mode) are left out; a text item whose deltas were already shown prints only what the
// deltas missed.
class TurnView {
 public:
  // |color|: dim tool results and the end line with ANSI escapes (a terminal).
  TurnView(bool json, bool color) : json_(json), color_(color) {}

  // Starts following |turn_id| of |agent_id|. Keeps the offset: the next turn continues from
  // where this one ended.
  void follow(std::string agent_id, std::string turn_id);

  // The text to print for |ev| (possibly empty). Updates offset() and ended().
  std::string feed(const cocoonbox::agent::v1::Event& ev);

  // The offset_key of the last event seen; resume Events from here.
  const std::string& offset() const { return offset_; }
  void set_offset(std::string offset) { offset_ = std::move(offset); }
  bool ended() const { return ended_; }
  // A tool call of this turn that waits for the user's answer (Agents.Respond), once: the
  // next call returns nullopt until another one is asked.
  std::optional<cocoonbox::agent::v1::Approval> take_pending_approval() {
    auto a = std::move(pending_approval_);
    pending_approval_.reset();
    return a;
  }
  cocoonbox::agent::v1::TurnState state() const { return state_; }
  const std::string& error() const { return error_; }

 private:
  std::string item_text(const cocoonbox::agent::v1::TranscriptItem& item);
  std::string line_break();
  std::string dim(std::string_view s) const;

  bool json_;
  bool color_;
  std::string agent_id_;
  std::string turn_id_;
  std::string offset_;
  bool ended_ = false;
  cocoonbox::agent::v1::TurnState state_ = cocoonbox::agent::v1::TURN_RUNNING;
  std::string error_;
  std::optional<cocoonbox::agent::v1::Approval> pending_approval_;
  std::set<std::string> asked_;  // approval ids already handed out
  std::set<int64_t> seen_;       // item seqs already shown
  std::string streamed_;         // deltas shown since the last assistant text item
  std::string shown_text_;       // the last assistant text item shown, until a tool item
  std::string late_deltas_;      // deltas after |shown_text_| (suppressed while they match it)
  bool at_line_start_ = true;    // text mode: the last thing printed ended a line
};

}  // namespace cb::cli
