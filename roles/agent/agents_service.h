#pragma once
// cocoonbox.agent.v1.Agents (seed §4.4; README.md §Agents) and the event log behind
// Session.Events (seed §4.2(a)), with the model loop that runs each turn.
//
// A turn: Send appends the user's message and starts the loop on the agent's executor:
//   build the conversation from the transcript ─ call the main model through the model door
//   (model::Client, native wire, text deltas published live) ─ append the assistant's text and
//   tool calls ─ run each call through BoxTools, append its result ─ again, until the model
//   answers without tool calls (done), a gateway error (failed, the message in the
//   transcript), the step cap (failed), or Cancel (cancelled: the model stream is closed and
//   the running tool's process group killed).
// Every change is written to agent.db (agents_store.h) before it is announced; Events
// subscribers are woken and read the log from their offset, so nothing is lost or repeated.
//
// Affinity: the agent's io_context; SQL runs on the db worker.

#include "base/clock.h"
#include "base/result.h"
#include "cocoonbox/agent/v1/agents.cbgrpc.h"
#include "crypto/random.h"
#include "db/worker.h"
#include "model/client.h"
#include "model/conversation.h"
#include "model/wire.h"
#include "net/asio.h"
#include "roles/agent/agent_config.h"
#include "roles/agent/agents_store.h"
#include "roles/agent/box_tools.h"
#include "roles/agent/tool_set.h"

#include <deque>
#include <filesystem>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace cb::agent {

inline constexpr std::string_view kDefaultModelDoor = "unix:/run/cocoonbox/model.sock";

// The models the agent uses (per role) and the loop's limits: the defaults (from flags) of
// what <data-dir>/agent.json may override (agent_config.h), which is re-read for every turn.
struct AgentsConfig {
  std::string model_endpoint = std::string(kDefaultModelDoor);  // model::parse_endpoint()
  model::ModelInfo main;       // name empty: Send is FAILED_PRECONDITION ("no model configured")
  model::ModelInfo summarize;  // name empty: main
  model::ModelInfo computer;   // name empty: main
  std::string approval_mode = "auto";  // new agents' default: "auto" | "ask"
  std::string system_prompt;           // empty: kDefaultSystemPrompt
  int max_steps = 50;                  // model calls per turn
  std::filesystem::path config_file;   // agent.json; empty: none (the fields above only)
  int max_tokens = 4096;
  model::RetryPolicy retry;
  std::chrono::milliseconds model_call_timeout{std::chrono::minutes(10)};
  // How long a tool call waits for Respond before the turn ends as waiting_for_user.
  std::chrono::milliseconds approval_timeout{std::chrono::minutes(10)};
};

extern const std::string_view kDefaultSystemPrompt;

// The conversation a transcript stands for (errors left out; tool calls a cancelled or
// crashed turn never answered get an error result, as both wires require an answer).
std::vector<model::Message> conversation_from_transcript(const std::vector<ItemRow>& items);

// The conversation of one agent's transcript, kept between turns so that a turn parses only
// the items it has not seen and copies, compares and counts only the messages it has not
// sent (README.md §Agents, "The conversation in memory"): add() the items in seq order as
// they are committed, and conversation() is what conversation_from_transcript() makes of all
// of them. Holds the messages after the latest summary's through_seq, one entry per model
// part with the seq of its item, and those messages as conversation() gives them, kept up to
// date by add() (only the messages an item changes are built again).
//
// A turn borrows the messages (lend()) instead of copying them, appends to them as it runs
// and gives them back at its end (give_back()): the messages it did not change are kept, the
// rest are built again from the items added meanwhile, so the next turn sends what a rebuild
// from the transcript gives. While lent, add() only keeps the items.
//
// Not thread-safe; the agents service keeps one per agent on its executor. Copyable.
class TranscriptConversation {
 public:
  // Built from every item of an agent, oldest first (as transcript_after(…, 0, …) reads them).
  static TranscriptConversation from_items(std::span<const ItemRow> items);

  // Adds the agent's next item. False, with nothing changed, when it cannot be added on top
  // (its seq is not last_seq() + 1, or a summary reaching back before an earlier summary's
  // through_seq): then rebuild with from_items().
  bool add(const ItemRow& item);

  // The messages to send (conversation_from_transcript()'s rules: summary in front, errors
  // left out, unanswered tool calls answered as interrupted unless in the last message): a
  // copy of the kept ones. REQUIRES: !lent().
  std::vector<model::Message> conversation() const;

  // The messages handed to a turn, and what its first model call need not look at again.
  struct Lent {
    std::vector<model::Message> messages;  // conversation()
    // messages[0, unchanged) went out in the last model call of the turn that gave them back
    // and have not changed since (RequestEncoder's |unchanged|); 0 after a rebuild.
    size_t unchanged = 0;
    int64_t unchanged_tokens = 0;  // model::estimate_tokens() of those for the model asked
  };
  // Moves the messages out to a turn that calls |model|. REQUIRES: !lent().
  Lent lend(const model::ModelInfo& model);
  // Takes back the messages lent, as the turn leaves them: |messages|[0, intact) are the lent
  // ones unchanged, [0, unchanged) went out in the turn's last model call (to |model|, whose
  // estimate of them is |unchanged_tokens|) and have not changed since. A no-op unless lent().
  void give_back(std::vector<model::Message> messages, size_t intact, size_t unchanged,
                 int64_t unchanged_tokens, const model::ModelInfo& model);
  bool lent() const { return lent_; }

  // The last item added (0 / empty before any): a turn checks that agent.db still holds it
  // (a restore may have replaced the database) before reading only what follows.
  int64_t last_seq() const { return last_seq_; }
  int64_t last_event_id() const { return last_event_id_; }
  const std::string& last_turn_id() const { return last_turn_id_; }

  // conversation() built from all the entries at once, independently of add(): the
  // reference the kept messages are tested against.
  std::vector<model::Message> assemble() const;

 private:
  struct Entry {
    model::Role role = model::Role::kUser;
    int64_t seq = 0;
    model::Part part;
  };
  void append_parts(const ItemRow& item);
  // Adds entries_[|entry|] to messages_ (a new message, or the last one's next part).
  void push_part(size_t entry);
  // Answers, in messages_.back(), the calls of the message before it that it does not answer.
  void answer_interrupted();
  // messages_ from the summary and all the entries.
  void rebuild_messages();

  std::vector<Entry> entries_;  // parts of the items after through_ (summaries left out)
  bool has_summary_ = false;
  int64_t through_ = 0;  // the latest summary's through_seq: older items are gone from entries_
  std::string summary_text_;
  int64_t last_seq_ = 0;
  int64_t last_event_id_ = 0;
  std::string last_turn_id_;

  std::vector<model::Message> messages_;  // conversation(); empty while lent_
  // Per message of messages_ (kept while lent_): the index in entries_ of its first entry.
  std::vector<size_t> starts_;
  size_t last_fixups_ = 0;  // interrupted-call results answer_interrupted() put in front
  bool lent_ = false;
  // While lent_: the leading lent messages that items added since cannot have changed.
  size_t lent_stable_ = 0;
  // What Lent::unchanged and unchanged_tokens give, for |sent_model_|.
  size_t sent_ = 0;
  int64_t sent_tokens_ = 0;
  model::ModelInfo sent_model_;
};

// The tool calls of turn |turn_id| that have no tool_result item (a turn that waits for the
// user stopped before answering them).
std::vector<model::Part> unanswered_calls(const std::vector<ItemRow>& items,
                                          const std::string& turn_id);

// MCP Tool objects (a JSON array) as model tool definitions.
std::vector<model::ToolDef> tool_defs(const nlohmann::json& tools);
// The box tools' contract as model tool definitions.
std::vector<model::ToolDef> box_tool_defs();

class AgentsService final : public cocoonbox::agent::v1::Agents::Service {
 public:
  // |db| and |tools| are not owned and must outlive the service. The box tools are the
  // first tool set.
  AgentsService(net::Executor executor, db::Worker& db, BoxTools& tools, AgentsConfig config,
                const Clock& clock, crypto::Random& random);
  ~AgentsService() override;

  // Adds a tool set for the model loop (before start(); not owned, must outlive the service).
  void add_tool_set(ToolSet& set) { tool_sets_.push_back(&set); }

  // The config a turn starting now runs with: AgentsConfig under agent.json.
  // Errors: load_agent_config()'s (kFailedPrecondition naming the bad field).
  asio::awaitable<Result<TurnConfig>> turn_config();

  // Ends the turns a crashed agent left running (failed, "agent restarted").
  asio::awaitable<Status> start();
  // Cancels every running turn (they end as failed, "agent stopped") and waits for them.
  asio::awaitable<void> stop();
  // For a quiesced save (state_service.h): waits until no turn is running. True when none
  // runs, false when one still does at |deadline|. Turns are not held back meanwhile.
  asio::awaitable<bool> wait_for_turns(net::Deadline deadline);

  asio::awaitable<Result<cocoonbox::agent::v1::Agent>> Create(
      grpc::CallContext& ctx, cocoonbox::agent::v1::CreateAgentRequest&& req) override;
  asio::awaitable<Result<cocoonbox::agent::v1::ListAgentsResponse>> List(
      grpc::CallContext& ctx, cocoonbox::agent::v1::ListAgentsRequest&& req) override;
  asio::awaitable<Result<cocoonbox::agent::v1::SendAccepted>> Send(
      grpc::CallContext& ctx, cocoonbox::agent::v1::SendRequest&& req) override;
  asio::awaitable<Result<cocoonbox::agent::v1::TranscriptPage>> Transcript(
      grpc::CallContext& ctx, cocoonbox::agent::v1::TranscriptRequest&& req) override;
  asio::awaitable<Result<cocoonbox::agent::v1::CancelResponse>> Cancel(
      grpc::CallContext& ctx, cocoonbox::agent::v1::AgentRef&& req) override;
  asio::awaitable<Result<cocoonbox::agent::v1::Agent>> Update(
      grpc::CallContext& ctx, cocoonbox::agent::v1::UpdateAgentRequest&& req) override;
  asio::awaitable<Result<cocoonbox::agent::v1::RespondResponse>> Respond(
      grpc::CallContext& ctx, cocoonbox::agent::v1::RespondRequest&& req) override;

  // Session.Events: the log after req.from_offset_key, then live until the client goes away.
  // Errors: kInvalidArgument (bad offset key or channel), the writer's.
  asio::awaitable<Status> events(grpc::CallContext& ctx, cocoonbox::agent::v1::EventsRequest req,
                                 grpc::ServerWriter<cocoonbox::agent::v1::Event>& writer);

 private:
  struct Running;
  struct Subscriber;

  // What the loop asks of the user before a destructive call: run it, deny it (|reason| for
  // the model), or end the turn waiting for the user (|reason| says why).
  struct Verdict {
    enum class Kind { kRun, kDeny, kWait } kind = Kind::kRun;
    std::string reason;
  };

  void start_running(const std::string& agent_id, const std::string& turn_id, TurnConfig tc);
  asio::awaitable<void> run_turn(std::string agent_id, std::string turn_id, TurnConfig tc);
  struct PendingWrites;
  // Ok with |*waiting| set: the turn ends as waiting_for_user for that reason. Tool results
  // may still be in |writes| when it returns (the caller drains it); |*tool_us| adds up the
  // time the tool calls took.
  asio::awaitable<Status> loop(const std::string& agent_id, const std::string& turn_id,
                               const TurnConfig& tc, std::string* waiting, PendingWrites& writes,
                               int64_t* tool_us);
  // Replaces the older part of |request|'s conversation by a summary from the summarize
  // model, kept as a summary item (README.md §Compaction).
  asio::awaitable<Status> compact(const std::string& agent_id, const std::string& turn_id,
                                  const TurnConfig& tc, model::Client& client,
                                  model::Request& request);
  asio::awaitable<Result<Verdict>> approve(const std::string& agent_id, const std::string& turn_id,
                                           const model::Part& call);
  asio::awaitable<Result<ItemRow>> append(const std::string& agent_id, const std::string& turn_id,
                                          std::string_view role, std::string_view kind,
                                          const std::string& payload);
  // Writes |sub|'s queued deltas, each with |offset_key|.
  asio::awaitable<Status> write_deltas(Subscriber& sub,
                                       grpc::ServerWriter<cocoonbox::agent::v1::Event>& writer,
                                       const std::string& offset_key);
  // The request encoder kept for |agent_id| (created on first use); valid while its turn runs.
  model::RequestEncoder& encoder_for(const std::string& agent_id);
  // The conversation of |agent_id|'s transcript for a turn starting now, lent by the kept one
  // (give it back with give_back_conversation()) after adding the items committed since
  // (checked against agent.db first), else all items read again. |model|: the turn's main
  // model (for the token estimate). |*turn_items| gets the items of |turn_id| read here (all
  // of them when that turn already had items in the kept conversation, e.g. a resumed turn:
  // then everything is re-read).
  asio::awaitable<Result<TranscriptConversation::Lent>> conversation_for(
      const std::string& agent_id, const std::string& turn_id, const model::ModelInfo& model,
      std::vector<ItemRow>* turn_items);
  // TranscriptConversation::give_back() to |agent_id|'s kept conversation, if it still lends.
  void give_back_conversation(const std::string& agent_id, std::vector<model::Message> messages,
                              size_t intact, size_t unchanged, int64_t unchanged_tokens,
                              const model::ModelInfo& model);
  // Adds committed |rows| to |agent_id|'s kept conversation (dropping it when they do not
  // follow on; the next turn then reads everything again).
  void remember(const std::string& agent_id, std::span<const ItemRow> rows);
  // Writes |items| (a tool result; a step whose calls are all read-only) in one transaction
  // without waiting for the commit (README.md §Agents, "Writes"): the worker runs writes in
  // order, subscribers are told once it is durable, and |pending| counts it until then.
  void append_later(PendingWrites& pending, const std::string& agent_id, const std::string& turn_id,
                    std::vector<NewItem> items);
  // Waits until every write of |pending| is committed; the first failure, if any.
  asio::awaitable<Status> drain(PendingWrites& pending);
  // Wakes the Events subscribers after a commit whose events are not known here: the next
  // read of each goes to agent.db (recent_events_ is emptied).
  void notify();
  // The same after a commit of transcript items |rows| (in event order): their events are
  // kept in recent_events_, so subscribers that have read up to them need no read of agent.db.
  void notify_items(std::span<const ItemRow> rows);
  // The events after |offset| (at most |limit|) when recent_events_ holds them all and no
  // write is in flight, else nullopt (the caller reads agent.db).
  std::optional<std::vector<EventRow>> recent_events_after(int64_t offset, size_t limit) const;
  // Marks every Events subscriber pending and wakes it.
  void wake_subscribers();
  // After a commit of |agent_id|'s items |rows|: remember() and notify_items().
  void committed(const std::string& agent_id, std::span<const ItemRow> rows);
  void publish_delta(const std::string& agent_id, const std::string& turn_id,
                     const std::string& text);
  std::string new_id(std::string_view prefix);
  int64_t now_ms() const;

  net::Executor executor_;
  db::Worker& db_;
  BoxToolSet box_tool_set_;
  std::vector<ToolSet*> tool_sets_;
  AgentsConfig config_;
  const Clock& clock_;
  crypto::Random& random_;
  std::map<std::string, std::shared_ptr<Running>> running_;  // by agent id
  std::list<Subscriber*> subscribers_;
  // The latest transcript events this service committed and knows in full, ids contiguous
  // (README.md §Agents, "Events"); at most kMaxRecentEvents.
  std::deque<EventRow> recent_events_;
  // Writes append_later() handed to the db worker whose result has not come back yet.
  int writes_in_flight_ = 0;
  std::map<std::string, std::unique_ptr<model::RequestEncoder>> encoders_;  // by agent id
  std::map<std::string, TranscriptConversation> conversations_;             // by agent id
  // Shared by every loop, so its kept-alive connections to the model door serve all steps.
  std::unique_ptr<model::Client> client_;
  bool stopping_ = false;
};

}  // namespace cb::agent
