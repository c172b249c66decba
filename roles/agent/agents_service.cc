#include "roles/agent/agents_service.h"

#include "base/base64.h"
#include "base/log.h"
#include "crypto/hash.h"
#include "model/compact.h"
#include "tools/contract.h"

#include <asio/bind_executor.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <chrono>
#include <set>

namespace cb::agent {

namespace pb = cocoonbox::agent::v1;
using nlohmann::json;

const std::string_view kDefaultSystemPrompt =
    "You are the agent in the user's cocoonbox box, a persistent Linux machine. Act in the box "
    "with the tools (shell, files); relative paths start in /workspace. Answer briefly.";

namespace {

constexpr int kEventBatch = 200;
// Events kept in memory for subscribers that are caught up (recent_events_).
constexpr size_t kMaxRecentEvents = 256;
constexpr size_t kMaxQueuedDeltas = 1000;
// Agents whose request encoder (model/wire.h) is kept between turns; 8 is more than a box
// runs at once.
constexpr size_t kMaxEncoders = 8;

pb::TurnState turn_state(std::string_view s) {
  if (s == "running") return pb::TURN_RUNNING;
  if (s == "done") return pb::TURN_DONE;
  if (s == "failed") return pb::TURN_FAILED;
  if (s == "cancelled") return pb::TURN_CANCELLED;
  if (s == "waiting_for_user") return pb::TURN_WAITING_FOR_USER;
  return pb::TURN_STATE_UNSPECIFIED;
}

pb::ApprovalMode approval_mode(std::string_view s) {
  return s == "ask" ? pb::APPROVAL_ASK : pb::APPROVAL_AUTO;
}

pb::ApprovalState approval_state(std::string_view s) {
  if (s == "pending") return pb::APPROVAL_PENDING;
  if (s == "approved") return pb::APPROVAL_APPROVED;
  if (s == "always") return pb::APPROVAL_ALWAYS;
  if (s == "denied") return pb::APPROVAL_DENIED;
  if (s == "expired") return pb::APPROVAL_EXPIRED;
  if (s == "cancelled") return pb::APPROVAL_CANCELLED;
  return pb::APPROVAL_STATE_UNSPECIFIED;
}

pb::Approval to_proto(const ApprovalRow& a) {
  pb::Approval out;
  out.set_id(a.id);
  out.set_agent_id(a.agent_id);
  out.set_turn_id(a.turn_id);
  out.set_call_id(a.call_id);
  out.set_tool(a.tool);
  out.set_arguments_json(a.arguments);
  out.set_state(approval_state(a.state));
  out.set_reason(a.reason);
  out.set_created_unix_ms(a.created_ms);
  out.set_decided_unix_ms(a.decided_ms);
  return out;
}

std::string denied_text(const std::string& reason) {
  std::string t = "The user denied this tool call; it did not run.";
  if (!reason.empty()) t += " The user said: " + reason;
  return t;
}

pb::ItemKind item_kind(std::string_view s) {
  if (s == "text") return pb::ITEM_TEXT;
  if (s == "tool_call") return pb::ITEM_TOOL_CALL;
  if (s == "tool_result") return pb::ITEM_TOOL_RESULT;
  if (s == "error") return pb::ITEM_ERROR;
  if (s == "approval") return pb::ITEM_APPROVAL;
  if (s == "summary") return pb::ITEM_SUMMARY;
  return pb::ITEM_KIND_UNSPECIFIED;
}

pb::Agent to_proto(const AgentRow& a) {
  pb::Agent out;
  out.set_id(a.id);
  out.set_name(a.name);
  out.set_model(a.model);
  out.set_created_unix_ms(a.created_ms);
  out.set_approval_mode(approval_mode(a.approval_mode));
  if (a.last_turn) {
    out.mutable_last_turn()->set_id(a.last_turn->id);
    out.mutable_last_turn()->set_state(turn_state(a.last_turn->state));
    out.mutable_last_turn()->set_error(a.last_turn->error);
  }
  return out;
}

pb::TranscriptItem to_proto(const ItemRow& i) {
  pb::TranscriptItem out;
  out.set_agent_id(i.agent_id);
  out.set_seq(i.seq);
  out.set_turn_id(i.turn_id);
  out.set_role(i.role);
  out.set_kind(item_kind(i.kind));
  out.set_payload_json(i.payload);
  out.set_at_unix_ms(i.at_ms);
  return out;
}

std::vector<model::Part> parts_from_mcp(const json& content) {
  std::vector<model::Part> parts;
  if (!content.is_array()) return parts;
  for (const json& block : content) {
    const std::string type = block.value("type", "");
    if (type == "text") {
      parts.push_back(model::Part::text_part(block.value("text", "")));
    } else if (type == "image") {
      parts.push_back(
          model::Part::image_part(block.value("mimeType", "image/png"), block.value("data", "")));
    }
  }
  return parts;
}

// Whether MCP tool object |tool| says it changes nothing (annotations.readOnlyHint).
bool is_read_only(const json& tool) {
  if (!tool.is_object()) return false;
  auto a = tool.find("annotations");
  if (a == tool.end() || !a->is_object()) return false;
  auto r = a->find("readOnlyHint");
  return r != a->end() && r->is_boolean() && r->get<bool>();
}

bool cancelled_now(asio::cancellation_state cs) {
  return cs.cancelled() != asio::cancellation_type::none;
}

}  // namespace

namespace {

// Calls |add(role, part)| for each model part transcript item |item| stands for (none for
// summaries, errors and approvals, or a payload that is not a JSON object).
template <typename Add>
void item_parts(const ItemRow& item, Add&& add) {
  json p = json::parse(item.payload, nullptr, false);
  if (!p.is_object()) return;
  if (item.kind == "text" && item.role == "user") {
    add(model::Role::kUser, model::Part::text_part(p.value("text", "")));
    if (p.contains("attachments") && p["attachments"].is_array()) {
      for (const json& a : p["attachments"]) {
        const std::string type = a.value("media_type", "");
        if (type.rfind("image/", 0) == 0) {
          add(model::Role::kUser, model::Part::image_part(type, a.value("data", "")));
        } else {
          auto text = base64_decode(a.value("data", ""));
          add(model::Role::kUser,
              model::Part::text_part(fmt::format("Attachment {}:\n{}", a.value("name", ""),
                                                 text.ok() ? *text : std::string())));
        }
      }
    }
  } else if (item.kind == "text" && item.role == "assistant") {
    add(model::Role::kAssistant, model::Part::text_part(p.value("text", "")));
  } else if (item.kind == "tool_call") {
    add(model::Role::kAssistant, model::Part::tool_call_part(p.value("id", ""), p.value("name", ""),
                                                             p.value("arguments", "{}")));
  } else if (item.kind == "tool_result") {
    add(model::Role::kUser,
        model::Part::tool_result_part(p.value("id", ""),
                                      parts_from_mcp(p.value("content", json::array())),
                                      p.value("is_error", false)));
  }
}

// The messages of |items| (summary items and errors left out), and for each message the seq
// of its first item.
std::vector<model::Message> build_messages(std::span<const ItemRow> items,
                                           std::vector<int64_t>* first_seqs) {
  std::vector<model::Message> msgs;
  for (const ItemRow& item : items) {
    item_parts(item, [&msgs, first_seqs, &item](model::Role role, model::Part part) {
      if (msgs.empty() || msgs.back().role != role) {
        model::Message m;
        m.role = role;
        msgs.push_back(std::move(m));
        if (first_seqs != nullptr) first_seqs->push_back(item.seq);
      }
      msgs.back().parts.push_back(std::move(part));
    });
  }
  return msgs;
}

// The summary item's text and through_seq.
std::pair<std::string, int64_t> summary_of(const ItemRow& item) {
  json p = json::parse(item.payload, nullptr, false);
  if (!p.is_object()) return {std::string(), 0};
  return {p.value("text", ""), p.value("through_seq", int64_t{0})};
}

}  // namespace

TranscriptConversation TranscriptConversation::from_items(std::span<const ItemRow> items) {
  TranscriptConversation c;
  // The latest summary stands for every item up to its through_seq (compaction).
  const ItemRow* summary = nullptr;
  for (const ItemRow& item : items) {
    if (item.kind == "summary") summary = &item;
  }
  if (summary != nullptr) {
    c.has_summary_ = true;
    std::tie(c.summary_text_, c.through_) = summary_of(*summary);
  }
  for (const ItemRow& item : items) {
    c.last_seq_ = item.seq;
    c.last_event_id_ = item.event_id;
    c.last_turn_id_ = item.turn_id;
    if (item.kind == "summary" || (c.has_summary_ && item.seq <= c.through_)) continue;
    c.append_parts(item);
  }
  c.rebuild_messages();
  return c;
}

bool TranscriptConversation::add(const ItemRow& item) {
  if (item.seq != last_seq_ + 1) return false;
  if (item.kind == "summary") {
    auto [text, through] = summary_of(item);
    // Items up to an earlier summary's through_seq are gone; a later summary that keeps some
    // of them cannot be applied on top.
    if (has_summary_ && through < through_) return false;
    has_summary_ = true;
    through_ = through;
    summary_text_ = std::move(text);
    std::erase_if(entries_, [through](const Entry& e) { return e.seq <= through; });
    // Every message may have changed (rare: once per compaction).
    lent_stable_ = 0;
    if (!lent_) rebuild_messages();
  } else if (!has_summary_ || item.seq > through_) {
    const size_t first = entries_.size();
    append_parts(item);
    for (size_t i = first; !lent_ && i < entries_.size(); ++i) push_part(i);
  }
  last_seq_ = item.seq;
  last_event_id_ = item.event_id;
  last_turn_id_ = item.turn_id;
  return true;
}

void TranscriptConversation::append_parts(const ItemRow& item) {
  item_parts(item, [this, &item](model::Role role, model::Part part) {
    Entry e;
    e.role = role;
    e.seq = item.seq;
    e.part = std::move(part);
    entries_.push_back(std::move(e));
  });
}

void TranscriptConversation::push_part(size_t entry) {
  const Entry& e = entries_[entry];
  if (messages_.empty() || messages_.back().role != e.role) {
    model::Message m;
    m.role = e.role;
    m.parts.push_back(e.part);
    messages_.push_back(std::move(m));
    starts_.push_back(entry);
  } else {
    // The last message grows: it changed, and its answers for interrupted calls are counted
    // again after the part joins it.
    if (sent_ == messages_.size()) {
      --sent_;
      sent_tokens_ -= model::estimate_tokens(messages_.back(), sent_model_);
    }
    auto& parts = messages_.back().parts;
    parts.erase(parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(last_fixups_));
    parts.push_back(e.part);
  }
  last_fixups_ = 0;
  answer_interrupted();
}

void TranscriptConversation::answer_interrupted() {
  // Every tool call must be answered in the next message (both wires refuse otherwise); a
  // cancelled or crashed turn may have left some unanswered. A call in the last message is
  // left for the loop to answer.
  const size_t n = messages_.size();
  if (n < 2 || messages_[n - 2].role != model::Role::kAssistant) return;
  std::vector<std::string> missing;
  std::set<std::string> answered;
  for (const auto& part : messages_[n - 1].parts) {
    if (part.kind == model::PartKind::kToolResult) answered.insert(part.id);
  }
  for (const model::Part& call : messages_[n - 2].parts) {
    if (call.kind == model::PartKind::kToolCall && !answered.count(call.id))
      missing.push_back(call.id);
  }
  auto& parts = messages_[n - 1].parts;
  for (const std::string& id : missing) {
    parts.insert(
        parts.begin(),
        model::Part::tool_result_part(
            id, {model::Part::text_part("the tool call was interrupted (the turn ended)")}, true));
  }
  last_fixups_ = missing.size();
}

void TranscriptConversation::rebuild_messages() {
  messages_.clear();
  starts_.clear();
  last_fixups_ = 0;
  sent_ = 0;
  sent_tokens_ = 0;
  if (has_summary_) {
    // apply_compaction()'s summary message; a first user message joins it.
    messages_ = model::apply_compaction({}, 0, summary_text_);
    starts_.push_back(0);
  }
  for (size_t i = 0; i < entries_.size(); ++i) push_part(i);
}

std::vector<model::Message> TranscriptConversation::conversation() const { return messages_; }

TranscriptConversation::Lent TranscriptConversation::lend(const model::ModelInfo& model) {
  Lent out;
  if (!(model == sent_model_)) {
    sent_model_ = model;
    sent_tokens_ = 0;
    for (size_t i = 0; i < sent_ && i < messages_.size(); ++i)
      sent_tokens_ += model::estimate_tokens(messages_[i], model);
  }
  out.unchanged = std::min(sent_, messages_.size());
  out.unchanged_tokens = sent_tokens_;
  // Items added while the turn runs join the last message or follow it: the others stay.
  lent_stable_ = messages_.empty() ? 0 : messages_.size() - 1;
  out.messages = std::move(messages_);
  messages_.clear();
  lent_ = true;
  return out;
}

void TranscriptConversation::give_back(std::vector<model::Message> messages, size_t intact,
                                       size_t unchanged, int64_t unchanged_tokens,
                                       const model::ModelInfo& model) {
  if (!lent_) return;
  lent_ = false;
  const size_t keep = std::min({intact, lent_stable_, messages.size()});
  if (keep == 0 || keep >= starts_.size() || starts_[keep] >= entries_.size()) {
    rebuild_messages();
    return;
  }
  // What the turn's last call sent and what is kept: their common part is unchanged.
  for (size_t i = keep; i < unchanged && i < messages.size(); ++i)
    unchanged_tokens -= model::estimate_tokens(messages[i], model);
  sent_ = std::min(unchanged, keep);
  sent_tokens_ = unchanged_tokens;
  sent_model_ = model;
  // The messages from |keep| on, built again from the items (the turn's own copies of its
  // steps may differ from what the transcript makes of them: the transcript is the truth).
  const size_t from = starts_[keep];
  messages.resize(keep);
  messages_ = std::move(messages);
  starts_.resize(keep);
  for (size_t i = from; i < entries_.size(); ++i) push_part(i);
}

std::vector<model::Message> TranscriptConversation::assemble() const {
  std::vector<model::Message> rest;
  for (const Entry& e : entries_) {
    if (rest.empty() || rest.back().role != e.role) {
      model::Message m;
      m.role = e.role;
      rest.push_back(std::move(m));
    }
    rest.back().parts.push_back(e.part);
  }
  std::vector<model::Message> msgs;
  if (!has_summary_) {
    msgs = std::move(rest);
  } else {
    // The messages the loop had right after it compacted: apply_compaction() on
    // [placeholder, kept...] with split 1. When everything was summarized, the summary is a
    // user message of its own, and what came later follows it.
    std::vector<model::Message> hist(1);
    if (rest.empty() || rest.front().role != model::Role::kUser) {
      msgs = model::apply_compaction(hist, 1, summary_text_);
      for (auto& m : rest) msgs.push_back(std::move(m));
    } else {
      for (auto& m : rest) hist.push_back(std::move(m));
      msgs = model::apply_compaction(hist, 1, summary_text_);
    }
  }
  // Every tool call must be answered in the next message (both wires refuse otherwise); a
  // cancelled or crashed turn may have left some unanswered.
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (msgs[i].role != model::Role::kAssistant) continue;
    std::vector<std::string> missing;
    std::set<std::string> answered;
    if (i + 1 < msgs.size()) {
      for (const auto& part : msgs[i + 1].parts) {
        if (part.kind == model::PartKind::kToolResult) answered.insert(part.id);
      }
    }
    for (const model::Part* call : msgs[i].tool_calls()) {
      if (!answered.count(call->id)) missing.push_back(call->id);
    }
    if (missing.empty()) continue;
    if (i + 1 >= msgs.size()) break;  // the last message: the loop answers it
    for (const std::string& id : missing) {
      msgs[i + 1].parts.insert(
          msgs[i + 1].parts.begin(),
          model::Part::tool_result_part(
              id, {model::Part::text_part("the tool call was interrupted (the turn ended)")},
              true));
    }
  }
  return msgs;
}

std::vector<model::Message> conversation_from_transcript(const std::vector<ItemRow>& items) {
  // from_items() has built the messages already; assemble() would build them a second time.
  return TranscriptConversation::from_items(items).conversation();
}

std::vector<model::Part> unanswered_calls(const std::vector<ItemRow>& items,
                                          const std::string& turn_id) {
  std::vector<model::Part> calls;
  std::set<std::string> answered;
  for (const ItemRow& item : items) {
    if (item.turn_id != turn_id) continue;
    json p = json::parse(item.payload, nullptr, false);
    if (!p.is_object()) continue;
    if (item.kind == "tool_call") {
      calls.push_back(model::Part::tool_call_part(p.value("id", ""), p.value("name", ""),
                                                  p.value("arguments", "{}")));
    } else if (item.kind == "tool_result") {
      answered.insert(p.value("id", ""));
    }
  }
  std::erase_if(calls, [&answered](const model::Part& c) { return answered.count(c.id) > 0; });
  return calls;
}

std::vector<model::ToolDef> tool_defs(const json& tools) {
  std::vector<model::ToolDef> defs;
  if (!tools.is_array()) return defs;
  for (const json& t : tools) {
    model::ToolDef d;
    d.name = t.value("name", "");
    d.description = t.value("description", "");
    d.input_schema = t.value("inputSchema", json::object());
    defs.push_back(std::move(d));
  }
  return defs;
}

std::vector<model::ToolDef> box_tool_defs() { return tool_defs(tools::box_tools()); }

struct AgentsService::Running {
  explicit Running(net::Executor ex) : ended(std::move(ex)) {
    ended.expires_at(net::Deadline::max());
  }
  std::string turn_id;
  asio::cancellation_signal signal;
  net::Timer ended;  // cancelled when the turn has ended
  bool done = false;
  // The approval the loop waits for and the timer it waits on (Respond cancels it).
  std::string waiting_approval;
  net::Timer* approval_timer = nullptr;
};

struct AgentsService::Subscriber {
  explicit Subscriber(net::Executor ex) : wake(std::move(ex)) {}
  net::Timer wake;
  bool pending = false;
  bool want_deltas = true;
  std::string agent_filter;
  std::deque<pb::Event> deltas;
};

// The tool results a turn has handed to the db worker and not seen committed yet.
struct AgentsService::PendingWrites {
  explicit PendingWrites(net::Executor ex) : done(std::move(ex)) {}
  net::Timer done;  // cancelled at each commit
  int outstanding = 0;
  Status first_error = ok_status();
};

AgentsService::AgentsService(net::Executor executor, db::Worker& db, BoxTools& tools,
                             AgentsConfig config, const Clock& clock, crypto::Random& random)
    : executor_(std::move(executor)),
      db_(db),
      box_tool_set_(tools),
      tool_sets_{&box_tool_set_},
      config_(std::move(config)),
      clock_(clock),
      random_(random) {
  if (config_.system_prompt.empty()) config_.system_prompt = std::string(kDefaultSystemPrompt);
}

AgentsService::~AgentsService() = default;

asio::awaitable<Result<TurnConfig>> AgentsService::turn_config() {
  TurnConfig defaults;
  defaults.main = config_.main;
  defaults.summarize = config_.summarize;
  defaults.computer = config_.computer;
  defaults.approval_mode = config_.approval_mode;
  defaults.system_prompt = config_.system_prompt;
  defaults.max_steps = config_.max_steps;
  if (config_.config_file.empty()) co_return defaults;
  // A small file, but a read all the same: off the loop, on the db worker.
  const std::filesystem::path path = config_.config_file;
  auto loaded = co_await db_.run(
      [&path, &defaults](db::Database&) { return load_agent_config(path, defaults); });
  co_return loaded;
}

int64_t AgentsService::now_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock_.now().time_since_epoch())
      .count();
}

std::string AgentsService::new_id(std::string_view prefix) {
  uint8_t bytes[8];
  random_.fill(bytes);
  return std::string(prefix) + crypto::hex_encode(std::span<const uint8_t>(bytes));
}

model::RequestEncoder& AgentsService::encoder_for(const std::string& agent_id) {
  auto it = encoders_.find(agent_id);
  if (it != encoders_.end()) return *it->second;
  // Each kept encoder holds a copy of its agent's conversation: keep those of a few agents,
  // dropping one whose turn is not running (so no loop holds a reference to it).
  if (encoders_.size() >= kMaxEncoders) {
    for (auto e = encoders_.begin(); e != encoders_.end(); ++e) {
      if (running_.count(e->first) == 0) {
        encoders_.erase(e);
        break;
      }
    }
  }
  auto [slot, inserted] = encoders_.emplace(agent_id, std::make_unique<model::RequestEncoder>());
  return *slot->second;
}

asio::awaitable<Result<TranscriptConversation::Lent>> AgentsService::conversation_for(
    const std::string& agent_id, const std::string& turn_id, const model::ModelInfo& model,
    std::vector<ItemRow>* turn_items) {
  auto kept = conversations_.find(agent_id);
  // A turn that has items in the kept conversation (resumed by Respond) reads them all: its
  // unanswered calls are looked for in its own items. One whose messages are still lent (a
  // turn that ended without giving them back) is read again too.
  if (kept != conversations_.end() && kept->second.last_seq() > 0 &&
      kept->second.last_turn_id() != turn_id && !kept->second.lent()) {
    // From the last item kept, to check that agent.db still holds it (a whole restore may
    // have put another database in place), then what was committed since.
    const int64_t from = kept->second.last_seq() - 1;
    auto rows = co_await db_.run([&agent_id, from](db::Database& d) {
      return transcript_after(d, agent_id, from, INT32_MAX);
    });
    if (!rows.ok()) co_return rows.status();
    kept = conversations_.find(agent_id);
    bool same = kept != conversations_.end() && !kept->second.lent() && !rows->empty() &&
                rows->front().seq == kept->second.last_seq() &&
                rows->front().event_id == kept->second.last_event_id() &&
                rows->front().turn_id == kept->second.last_turn_id();
    for (size_t i = 1; same && i < rows->size(); ++i) {
      same = kept->second.add((*rows)[i]);
      if ((*rows)[i].turn_id == turn_id) turn_items->push_back((*rows)[i]);
    }
    if (same) co_return kept->second.lend(model);
    turn_items->clear();
    if (kept != conversations_.end()) conversations_.erase(kept);
  }
  auto items = co_await db_.run(
      [&agent_id](db::Database& d) { return transcript_after(d, agent_id, 0, INT32_MAX); });
  if (!items.ok()) co_return items.status();
  for (const ItemRow& item : *items) {
    if (item.turn_id == turn_id) turn_items->push_back(item);
  }
  // Each kept conversation holds a copy of its agent's messages: keep those of a few agents.
  if (conversations_.size() >= kMaxEncoders && conversations_.count(agent_id) == 0) {
    for (auto c = conversations_.begin(); c != conversations_.end(); ++c) {
      if (running_.count(c->first) == 0) {
        conversations_.erase(c);
        break;
      }
    }
  }
  TranscriptConversation& conv = conversations_[agent_id];
  conv = TranscriptConversation::from_items(*items);
  co_return conv.lend(model);
}

void AgentsService::give_back_conversation(const std::string& agent_id,
                                           std::vector<model::Message> messages, size_t intact,
                                           size_t unchanged, int64_t unchanged_tokens,
                                           const model::ModelInfo& model) {
  auto kept = conversations_.find(agent_id);
  if (kept == conversations_.end()) return;
  kept->second.give_back(std::move(messages), intact, unchanged, unchanged_tokens, model);
}

void AgentsService::remember(const std::string& agent_id, std::span<const ItemRow> rows) {
  auto kept = conversations_.find(agent_id);
  if (kept == conversations_.end()) return;
  for (const ItemRow& row : rows) {
    if (!kept->second.add(row)) {
      conversations_.erase(kept);
      return;
    }
  }
}

void AgentsService::append_later(PendingWrites& pending, const std::string& agent_id,
                                 const std::string& turn_id, std::vector<NewItem> items) {
  ++pending.outstanding;
  ++writes_in_flight_;
  const int64_t now = now_ms();
  // The worker runs functions in submission order, so this commits before anything the loop
  // writes later; the handler runs on our executor (|pending| lives until drain() saw it).
  db_.async_run<Result<std::vector<ItemRow>>>(
      [agent_id, turn_id, items = std::move(items), now](db::Database& d) {
        return append_items(d, agent_id, turn_id, items, now);
      },
      asio::bind_executor(executor_, [this, &pending, agent_id](Result<std::vector<ItemRow>> rows) {
        --pending.outstanding;
        --writes_in_flight_;
        if (rows.ok()) {
          committed(agent_id, *rows);
        } else if (pending.first_error.ok()) {
          pending.first_error = rows.status();
        }
        pending.done.cancel();
      }));
}

asio::awaitable<Status> AgentsService::drain(PendingWrites& pending) {
  while (pending.outstanding > 0) {
    pending.done.expires_at(net::Deadline::max());
    co_await pending.done.async_wait();
  }
  co_return pending.first_error;
}

void AgentsService::notify() {
  recent_events_.clear();
  wake_subscribers();
}

void AgentsService::wake_subscribers() {
  for (Subscriber* s : subscribers_) {
    s->pending = true;
    s->wake.cancel();
  }
}

void AgentsService::committed(const std::string& agent_id, std::span<const ItemRow> rows) {
  remember(agent_id, rows);
  notify_items(rows);
}

void AgentsService::notify_items(std::span<const ItemRow> rows) {
  // Commits reach this executor in the order the worker made them, and callers come here
  // right after theirs: the events kept stay those of agent.db, in order, without a gap
  // (an event id that does not follow on starts the list again).
  for (const ItemRow& row : rows) {
    if (!recent_events_.empty() && row.event_id != recent_events_.back().id + 1)
      recent_events_.clear();
    EventRow ev;
    ev.id = row.event_id;
    ev.channel = "transcript";
    ev.agent_id = row.agent_id;
    ev.item = row;
    recent_events_.push_back(std::move(ev));
    if (recent_events_.size() > kMaxRecentEvents) recent_events_.pop_front();
  }
  wake_subscribers();
}

std::optional<std::vector<EventRow>> AgentsService::recent_events_after(int64_t offset,
                                                                        size_t limit) const {
  // A write the loop did not wait for (a tool result) may hold events that come before the
  // deltas queued since (the next model call's): read agent.db then, which the worker serves
  // after that write, so the subscriber sends its events before those deltas.
  if (writes_in_flight_ > 0 || recent_events_.empty() || offset + 1 < recent_events_.front().id ||
      offset > recent_events_.back().id)
    return std::nullopt;
  std::vector<EventRow> out;
  for (size_t i = static_cast<size_t>(offset + 1 - recent_events_.front().id);
       i < recent_events_.size() && out.size() < limit; ++i)
    out.push_back(recent_events_[i]);
  return out;
}

void AgentsService::publish_delta(const std::string& agent_id, const std::string& turn_id,
                                  const std::string& text) {
  for (Subscriber* s : subscribers_) {
    if (!s->want_deltas) continue;
    if (!s->agent_filter.empty() && s->agent_filter != agent_id) continue;
    if (s->deltas.size() >= kMaxQueuedDeltas) s->deltas.pop_front();
    pb::Event ev;
    ev.set_channel("transcript");
    ev.mutable_delta()->set_agent_id(agent_id);
    ev.mutable_delta()->set_turn_id(turn_id);
    ev.mutable_delta()->set_text(text);
    s->deltas.push_back(std::move(ev));
    s->pending = true;
    s->wake.cancel();
  }
}

asio::awaitable<Status> AgentsService::start() {
  const int64_t now = now_ms();
  auto failed = co_await db_.run([now](db::Database& d) { return fail_running_turns(d, now); });
  if (!failed.ok()) co_return failed.status();
  if (*failed > 0) log::warn("turns left running ended as failed", {{"turns", *failed}});
  co_return ok_status();
}

asio::awaitable<void> AgentsService::stop() {
  stopping_ = true;
  std::vector<std::shared_ptr<Running>> turns;
  for (auto& [agent, r] : running_) turns.push_back(r);
  for (auto& r : turns) r->signal.emit(asio::cancellation_type::terminal);
  for (auto& r : turns) {
    if (!r->done) co_await r->ended.async_wait();
  }
  for (Subscriber* s : subscribers_) s->wake.cancel();
}

asio::awaitable<bool> AgentsService::wait_for_turns(net::Deadline deadline) {
  using namespace asio::experimental::awaitable_operators;
  for (;;) {
    std::shared_ptr<Running> turn;
    for (auto& [agent, r] : running_) {
      if (!r->done) turn = r;
    }
    if (!turn) co_return true;
    if (std::chrono::steady_clock::now() >= deadline) co_return false;
    // |ended| is cancelled when the turn ends; the limit timer bounds the wait.
    net::Timer limit(executor_);
    limit.expires_at(deadline);
    co_await (turn->ended.async_wait() || limit.async_wait());
  }
}

asio::awaitable<Result<pb::Agent>> AgentsService::Create(grpc::CallContext&,
                                                         pb::CreateAgentRequest&& req) {
  std::string id = new_id("ag_");
  std::string name = req.name().empty() ? std::string("agent") : req.name();
  auto tc = co_await turn_config();
  if (!tc.ok()) co_return tc.status();
  const std::string model = tc->main.name;
  const std::string nonce = req.client_nonce();
  const int64_t now = now_ms();
  std::string mode = tc->approval_mode;
  if (req.approval_mode() == pb::APPROVAL_AUTO) mode = "auto";
  if (req.approval_mode() == pb::APPROVAL_ASK) mode = "ask";
  auto row = co_await db_.run(
      [&](db::Database& d) { return create_agent(d, id, name, model, nonce, now, mode); });
  if (!row.ok()) co_return row.status();
  notify();
  co_return to_proto(*row);
}

asio::awaitable<Result<pb::ListAgentsResponse>> AgentsService::List(grpc::CallContext&,
                                                                    pb::ListAgentsRequest&&) {
  auto rows = co_await db_.run([](db::Database& d) { return list_agents(d); });
  if (!rows.ok()) co_return rows.status();
  pb::ListAgentsResponse out;
  for (const AgentRow& a : *rows) *out.add_agents() = to_proto(a);
  co_return out;
}

asio::awaitable<Result<pb::SendAccepted>> AgentsService::Send(grpc::CallContext&,
                                                              pb::SendRequest&& req) {
  if (stopping_) co_return unavailable("the agent is stopping");
  if (req.prompt().empty() && req.attachments_size() == 0)
    co_return invalid_argument("prompt: empty (and no attachments)");
  json payload = {{"text", req.prompt()}};
  if (req.attachments_size() > 0) {
    json atts = json::array();
    for (const auto& a : req.attachments()) {
      atts.push_back({{"name", a.name()},
                      {"media_type", a.media_type()},
                      {"bytes", a.data().size()},
                      {"data", base64_encode(a.data())}});
    }
    payload["attachments"] = std::move(atts);
  }
  const std::string agent_id = req.agent_id();
  const std::string turn_id = new_id("tu_");
  const std::string nonce = req.client_nonce();
  const std::string text = payload.dump();
  const int64_t now = now_ms();
  auto tc = co_await turn_config();
  if (!tc.ok()) co_return tc.status();
  const bool have_model = !tc->main.name.empty();
  if (!have_model)
    co_return failed_precondition("no model configured (agent --model, or agent.json models.main)");
  auto started = co_await db_.run(
      [&](db::Database& d) { return start_turn(d, agent_id, turn_id, nonce, text, now); });
  if (!started.ok()) co_return started.status();
  pb::SendAccepted out;
  out.set_turn_id(started->turn_id);
  out.set_seq(started->seq);
  if (started->existing) co_return out;
  notify();
  start_running(agent_id, turn_id, std::move(*tc));
  co_return out;
}

void AgentsService::start_running(const std::string& agent_id, const std::string& turn_id,
                                  TurnConfig tc) {
  auto running = std::make_shared<Running>(executor_);
  running->turn_id = turn_id;
  running_[agent_id] = running;
  asio::co_spawn(
      executor_, run_turn(agent_id, turn_id, std::move(tc)),
      // The handler keeps |running| (and so the signal behind the slot) alive
      // until the coroutine has completed.
      asio::bind_cancellation_slot(running->signal.slot(), [running](std::exception_ptr) {}));
}

asio::awaitable<Result<pb::TranscriptPage>> AgentsService::Transcript(grpc::CallContext&,
                                                                      pb::TranscriptRequest&& req) {
  int limit = req.limit() <= 0 ? 200 : std::min(req.limit(), 1000);
  const std::string agent_id = req.agent_id();
  const int64_t after = req.after_seq();
  auto items = co_await db_.run([&](db::Database& d) -> Result<std::vector<ItemRow>> {
    ASSIGN_OR_RETURN(auto agent, find_agent(d, agent_id));
    if (!agent) return not_found(fmt::format("agent {} not found", agent_id));
    return transcript_after(d, agent_id, after, limit + 1);
  });
  if (!items.ok()) co_return items.status();
  pb::TranscriptPage page;
  for (size_t i = 0; i < items->size() && i < static_cast<size_t>(limit); ++i) {
    *page.add_items() = to_proto((*items)[i]);
  }
  page.set_more(items->size() > static_cast<size_t>(limit));
  co_return page;
}

asio::awaitable<Result<pb::CancelResponse>> AgentsService::Cancel(grpc::CallContext&,
                                                                  pb::AgentRef&& req) {
  pb::CancelResponse out;
  auto it = running_.find(req.agent_id());
  if (it == running_.end()) {
    // Not running; a turn that waits for the user ends cancelled.
    const std::string agent_id = req.agent_id();
    const int64_t now = now_ms();
    auto turn =
        co_await db_.run([&](db::Database& d) { return cancel_waiting_turn(d, agent_id, now); });
    if (!turn.ok()) co_return turn.status();
    if (!turn->empty()) notify();
    out.set_turn_id(*turn);
    co_return out;
  }
  std::shared_ptr<Running> r = it->second;
  out.set_turn_id(r->turn_id);
  r->signal.emit(asio::cancellation_type::terminal);
  if (!r->done) co_await r->ended.async_wait();
  co_return out;
}

asio::awaitable<Result<pb::Agent>> AgentsService::Update(grpc::CallContext&,
                                                         pb::UpdateAgentRequest&& req) {
  const std::string agent_id = req.agent_id();
  const std::string name = req.name();
  std::string mode;
  if (req.approval_mode() == pb::APPROVAL_AUTO) mode = "auto";
  if (req.approval_mode() == pb::APPROVAL_ASK) mode = "ask";
  auto row =
      co_await db_.run([&](db::Database& d) { return update_agent(d, agent_id, name, mode); });
  if (!row.ok()) co_return row.status();
  notify();
  co_return to_proto(*row);
}

asio::awaitable<Result<pb::RespondResponse>> AgentsService::Respond(grpc::CallContext&,
                                                                    pb::RespondRequest&& req) {
  if (stopping_) co_return unavailable("the agent is stopping");
  pb::RespondResponse out;
  const std::string agent_id = req.agent_id();
  if (agent_id.empty()) co_return invalid_argument("agent_id: empty");
  std::string state;
  switch (req.decision()) {
    case pb::APPROVE_ONCE:
      state = "approved";
      break;
    case pb::APPROVE_ALWAYS:
      state = "always";
      break;
    case pb::DENY:
      state = "denied";
      break;
    case pb::CONTINUE:
      break;
    default:
      co_return invalid_argument("decision: unspecified");
  }
  if (!state.empty()) {
    if (req.approval_id().empty()) co_return invalid_argument("approval_id: empty");
    const std::string approval_id = req.approval_id();
    const std::string reason = req.message();
    const int64_t now = now_ms();
    auto found = co_await db_.run([&](db::Database& d) { return find_approval(d, approval_id); });
    if (!found.ok()) co_return found.status();
    if (!*found || (*found)->agent_id != agent_id)
      co_return not_found(fmt::format("approval {} of agent {} not found", approval_id, agent_id));
    out.set_turn_id((*found)->turn_id);
    auto it = running_.find(agent_id);
    const bool running = it != running_.end() && it->second->turn_id == (*found)->turn_id;
    // A pending approval goes to the loop that waits; an expired one resumes the turn that
    // waits for the user (checked against the turn's state below).
    constexpr std::string_view kPending[] = {"pending"};
    constexpr std::string_view kPendingOrExpired[] = {"pending", "expired"};
    std::span<const std::string_view> from = kPending;
    if (!running) from = kPendingOrExpired;
    if (!running && (*found)->state == "expired") {
      auto agent = co_await db_.run([&](db::Database& d) { return find_agent(d, agent_id); });
      if (!agent.ok()) co_return agent.status();
      const bool waits = *agent && (*agent)->last_turn &&
                         (*agent)->last_turn->id == (*found)->turn_id &&
                         (*agent)->last_turn->state == "waiting_for_user";
      if (!waits) {
        co_return failed_precondition(fmt::format(
            "approval {} expired and its turn {} no longer waits", approval_id, (*found)->turn_id));
      }
    }
    auto decided = co_await db_.run(
        [&](db::Database& d) { return decide_approval(d, approval_id, from, state, reason, now); });
    if (!decided.ok()) co_return decided.status();
    if (!decided->changed) {
      co_return failed_precondition(
          fmt::format("approval {} is already {}", approval_id, decided->approval.state));
    }
    notify();
    if (running) {
      // Looked up again: the turn may have moved on while the database worked.
      auto now_running = running_.find(agent_id);
      if (now_running != running_.end() && now_running->second->waiting_approval == approval_id &&
          now_running->second->approval_timer != nullptr)
        now_running->second->approval_timer->cancel();
      co_return out;
    }
  }
  // Resume the turn that waits for the user.
  if (running_.count(agent_id))
    co_return failed_precondition(fmt::format("agent {} is running a turn", agent_id));
  auto tc = co_await turn_config();
  if (!tc.ok()) co_return tc.status();
  auto turn = co_await db_.run([&](db::Database& d) { return resume_turn(d, agent_id); });
  if (!turn.ok()) co_return turn.status();
  notify();
  out.set_turn_id(*turn);
  out.set_resumed(true);
  start_running(agent_id, *turn, std::move(*tc));
  co_return out;
}

asio::awaitable<Result<ItemRow>> AgentsService::append(const std::string& agent_id,
                                                       const std::string& turn_id,
                                                       std::string_view role, std::string_view kind,
                                                       const std::string& payload) {
  const int64_t now = now_ms();
  auto item = co_await db_.run(
      [&](db::Database& d) { return append_item(d, agent_id, turn_id, role, kind, payload, now); });
  if (item.ok()) committed(agent_id, std::span<const ItemRow>(&*item, 1));
  co_return item;
}

asio::awaitable<void> AgentsService::run_turn(std::string agent_id, std::string turn_id,
                                              TurnConfig tc) {
  co_await asio::this_coro::throw_if_cancelled(false);
  Status st = ok_status();
  std::string waiting;
  PendingWrites writes(executor_);
  int64_t tool_us = 0;
  try {
    st = co_await loop(agent_id, turn_id, tc, &waiting, writes, &tool_us);
  } catch (const std::exception& e) {
    st = internal_error(fmt::format("agent loop: {}", e.what()));
  }
  const bool was_cancelled =
      cancelled_now(co_await asio::this_coro::cancellation_state) || st.code() == Code::kCancelled;
  co_await asio::this_coro::reset_cancellation_state();
  // Tool results the loop did not wait for are committed before the turn ends.
  Status written = co_await drain(writes);
  if (st.ok() && !written.ok()) st = written;
  std::string state = "done";
  std::string error;
  if (st.ok() && !waiting.empty()) {
    state = "waiting_for_user";
    error = waiting;
  } else if (was_cancelled) {
    state = stopping_ ? "failed" : "cancelled";
    error = stopping_ ? "agent stopped" : "cancelled by the user";
  } else if (!st.ok()) {
    state = "failed";
    error = std::string(st.message());
  }
  if (state != "done" && state != "waiting_for_user") {
    const std::string payload = json{{"message", error}}.dump();
    auto item = co_await append(agent_id, turn_id, "system", "error", payload);
    if (!item.ok()) log::warn("agent turn: error item", {{"error", item.status().to_string()}});
  }
  const int64_t now = now_ms();
  Status ended =
      co_await db_.run([&](db::Database& d) { return end_turn(d, turn_id, state, error, now); });
  if (!ended.ok()) log::warn("agent turn: end", {{"error", ended.to_string()}});
  // Anything but done may leave the transcript in a shape the next turn had better read
  // from agent.db (cancelled calls, a resumed turn's approvals): forget the kept one.
  if (state != "done") conversations_.erase(agent_id);
  // tool_us: the tool calls' own time in this turn (scripts/bench agent reads it).
  log::info("agent turn ended",
            {{"agent", agent_id}, {"turn", turn_id}, {"state", state}, {"tool_us", tool_us}});
  notify();
  auto it = running_.find(agent_id);
  if (it != running_.end() && it->second->turn_id == turn_id) {
    it->second->done = true;
    it->second->ended.cancel();
    running_.erase(it);
  }
}

asio::awaitable<Result<AgentsService::Verdict>> AgentsService::approve(const std::string& agent_id,
                                                                       const std::string& turn_id,
                                                                       const model::Part& call) {
  Verdict run;
  // A resumed turn: the user may have answered this call already.
  auto prior =
      co_await db_.run([&](db::Database& d) { return approval_for_call(d, turn_id, call.id); });
  if (!prior.ok()) co_return prior.status();
  if (*prior && ((*prior)->state == "approved" || (*prior)->state == "always")) co_return run;
  if (*prior && (*prior)->state == "denied") {
    Verdict deny;
    deny.kind = Verdict::Kind::kDeny;
    deny.reason = (*prior)->reason;
    co_return deny;
  }
  auto needed =
      co_await db_.run([&](db::Database& d) { return approval_needed(d, agent_id, call.name); });
  if (!needed.ok()) co_return needed.status();
  if (!*needed) co_return run;

  ApprovalRow row;
  row.id = new_id("ap_");
  row.agent_id = agent_id;
  row.turn_id = turn_id;
  row.call_id = call.id;
  row.tool = call.name;
  row.arguments = call.arguments;
  row.created_ms = now_ms();
  auto created = co_await db_.run([&](db::Database& d) { return create_approval(d, row); });
  if (!created.ok()) co_return created.status();
  notify();
  log::info("approval asked", {{"agent", agent_id}, {"approval", row.id}, {"tool", row.tool}});

  // Wait for Respond (which cancels the timer), the timeout, or Cancel.
  std::shared_ptr<Running> r = running_.count(agent_id) ? running_[agent_id] : nullptr;
  net::Timer timer(executor_);
  timer.expires_after(config_.approval_timeout);
  if (r) {
    r->waiting_approval = row.id;
    r->approval_timer = &timer;
  }
  co_await timer.async_wait();
  if (r) {
    r->waiting_approval.clear();
    r->approval_timer = nullptr;
  }
  const bool was_cancelled = cancelled_now(co_await asio::this_coro::cancellation_state);
  constexpr std::string_view kPending[] = {"pending"};
  std::string to = "expired";
  std::string reason = fmt::format(
      "no answer within {} s",
      std::chrono::duration_cast<std::chrono::seconds>(config_.approval_timeout).count());
  if (was_cancelled && stopping_) reason = "agent stopped";
  if (was_cancelled && !stopping_) {
    to = "cancelled";
    reason = "the turn was cancelled";
  }
  const int64_t now = now_ms();
  const std::string id = row.id;
  auto decided = co_await db_.run(
      [&](db::Database& d) { return decide_approval(d, id, kPending, to, reason, now); });
  if (!decided.ok()) co_return decided.status();
  if (decided->changed) notify();
  const std::string& state = decided->approval.state;
  if (state == "approved" || state == "always") co_return run;
  if (state == "denied") {
    Verdict deny;
    deny.kind = Verdict::Kind::kDeny;
    deny.reason = decided->approval.reason;
    co_return deny;
  }
  if (state == "cancelled") co_return cancelled("cancelled");
  Verdict wait;
  wait.kind = Verdict::Kind::kWait;
  wait.reason =
      fmt::format("approval {} for {} {}; answer it with Respond, or Respond CONTINUE to ask again",
                  id, row.tool, decided->approval.reason);
  co_return wait;
}

asio::awaitable<Status> AgentsService::compact(const std::string& agent_id,
                                               const std::string& turn_id, const TurnConfig& tc,
                                               model::Client& client, model::Request& request) {
  auto items = co_await db_.run(
      [&](db::Database& d) { return transcript_after(d, agent_id, 0, INT32_MAX); });
  if (!items.ok()) co_return items.status();
  // The messages as the loop has them (the conversation since the last summary).
  std::vector<ItemRow> since;
  int64_t through = 0;
  for (const ItemRow& item : *items) {
    if (item.kind != "summary") continue;
    json p = json::parse(item.payload, nullptr, false);
    if (p.is_object()) through = p.value("through_seq", int64_t{0});
  }
  for (const ItemRow& item : *items) {
    if (item.seq > through && item.kind != "summary") since.push_back(item);
  }
  std::vector<int64_t> first_seqs;
  std::vector<model::Message> msgs = build_messages(since, &first_seqs);
  size_t split = model::compaction_split(msgs, tc.main, tc.main.context_tokens / 4);
  if (split == 0 || msgs.empty()) co_return ok_status();  // nothing can be cut
  const int64_t new_through = split < msgs.size() ? first_seqs[split] - 1 : items->back().seq;
  // The older part, with the previous summary in front (it is part of what is summarized).
  std::vector<model::Message> hist = request.messages;
  const size_t old_count = hist.size() >= msgs.size() ? hist.size() - msgs.size() : 0;
  model::Request sreq =
      model::summarize_request(std::span<const model::Message>(hist.data(), old_count + split));
  sreq.max_tokens = config_.max_tokens;
  const model::ModelInfo& summarizer = tc.summarize_model();
  model::CallOptions options;
  options.deadline = net::after(config_.model_call_timeout);
  options.retry = config_.retry;
  auto resp = co_await client.call(summarizer, sreq, std::move(options));
  if (!resp.ok()) co_return resp.status().with_prefix(std::string("compaction"));
  const std::string summary = resp->message.text();
  const std::string payload =
      json{{"text", summary}, {"through_seq", new_through}, {"model", summarizer.name}}.dump();
  auto item = co_await append(agent_id, turn_id, "system", "summary", payload);
  if (!item.ok()) co_return item.status();
  log::info("conversation compacted",
            {{"agent", agent_id}, {"through_seq", new_through}, {"model", summarizer.name}});
  items->push_back(std::move(*item));
  request.messages = conversation_from_transcript(*items);
  co_return ok_status();
}

asio::awaitable<Status> AgentsService::loop(const std::string& agent_id, const std::string& turn_id,
                                            const TurnConfig& tc, std::string* waiting,
                                            PendingWrites& writes, int64_t* tool_us) {
  if (client_ == nullptr) {
    auto endpoint = model::parse_endpoint(config_.model_endpoint);
    if (!endpoint.ok()) co_return endpoint.status().with_prefix(std::string("model endpoint"));
    client_ = std::make_unique<model::Client>(executor_, std::move(*endpoint));
  }
  model::Client& client = *client_;
  std::vector<ItemRow> turn_items;
  auto conversation = co_await conversation_for(agent_id, turn_id, tc.main, &turn_items);
  if (!conversation.ok()) co_return conversation.status();
  model::Request request;
  request.system = tc.system_prompt.empty() ? std::string(kDefaultSystemPrompt) : tc.system_prompt;
  // The tools of every set, each name routed to its set.
  std::map<std::string, std::pair<ToolSet*, json>, std::less<>> tool_of;
  for (ToolSet* set : tool_sets_) {
    json defs = set->defs();
    for (const json& d : defs) tool_of.emplace(d.value("name", ""), std::make_pair(set, d));
    for (model::ToolDef& d : tool_defs(defs)) request.tools.push_back(std::move(d));
  }
  request.max_tokens = config_.max_tokens;
  // Lent by the kept conversation, given back when the turn ends done (README.md §Agents,
  // "The conversation in memory"); request.messages[0, intact) are still the lent ones.
  request.messages = std::move(conversation->messages);
  size_t intact = request.messages.size();
  const int64_t tool_tokens = model::estimate_tool_tokens(request.tools);
  model::Request head;
  head.system = request.system;
  const int64_t head_tokens = model::estimate_tokens(head, tc.main, tool_tokens);
  // request.messages[0, unchanged) went out in this agent's last model call (this turn's,
  // or the last step of the turn before, as the kept conversation says) and have not changed
  // since (the loop only appends): the encoder does not compare them again, and their token
  // estimate is |unchanged_tokens|.
  size_t unchanged = conversation->unchanged;
  int64_t unchanged_tokens = conversation->unchanged_tokens;

  // A resumed turn may hold tool calls of its last model step that have no result yet (an
  // approval nobody answered, or the agent restarted while one waited): answer them first.
  std::vector<model::Part> pending = unanswered_calls(turn_items, turn_id);
  if (!pending.empty() && !request.messages.empty() &&
      request.messages.back().role == model::Role::kUser) {
    // conversation_from_transcript() answered them as interrupted; they are not.
    intact = std::min(intact, request.messages.size() - 1);
    unchanged = 0;
    unchanged_tokens = 0;
    std::set<std::string> ids;
    for (const auto& c : pending) ids.insert(c.id);
    auto& parts = request.messages.back().parts;
    std::erase_if(parts, [&ids](const model::Part& p) {
      return p.kind == model::PartKind::kToolResult && ids.count(p.id) > 0;
    });
  }

  int step = 0;
  while (true) {
    std::vector<model::Part> calls;
    if (!pending.empty()) {
      calls = std::move(pending);
      pending.clear();
    } else {
      if (step >= tc.max_steps) {
        *waiting = fmt::format(
            "stopped after {} model steps without a final answer; Respond CONTINUE to go on",
            tc.max_steps);
        co_return ok_status();
      }
      ++step;
      // A Cancel that came while no cancellable operation was pending (a database write) is
      // only recorded in the state: look before each model call and each tool.
      if (cancelled_now(co_await asio::this_coro::cancellation_state))
        co_return cancelled("cancelled");
      model::CallOptions options;
      options.on_delta = [this, &agent_id, &turn_id](const model::Delta& d) {
        if (d.kind == model::Delta::Kind::kText) publish_delta(agent_id, turn_id, d.text);
      };
      options.deadline = net::after(config_.model_call_timeout);
      options.retry = config_.retry;
      options.encoder = &encoder_for(agent_id);
      int64_t message_tokens = unchanged_tokens;
      for (size_t i = unchanged; i < request.messages.size(); ++i)
        message_tokens += model::estimate_tokens(request.messages[i], tc.main);
      // Near the main model's context budget: the summarize model compacts older turns.
      // (The same test as model::needs_compaction(request, tc.main, tool_tokens, 0.8).)
      if (model::over_budget(head_tokens + message_tokens, tc.main, 0.8)) {
        Status compacted = co_await compact(agent_id, turn_id, tc, client, request);
        if (!compacted.ok()) co_return compacted;
        if (cancelled_now(co_await asio::this_coro::cancellation_state))
          co_return cancelled("cancelled");
        unchanged = 0;  // compact() replaced the messages
        intact = 0;
        message_tokens = 0;
        for (const model::Message& m : request.messages)
          message_tokens += model::estimate_tokens(m, tc.main);
      }
      options.encoder_unchanged = unchanged;
      unchanged = request.messages.size();
      unchanged_tokens = message_tokens;
      auto resp = co_await client.call(tc.main, request, std::move(options));
      if (!resp.ok()) co_return resp.status();
      if (cancelled_now(co_await asio::this_coro::cancellation_state))
        co_return cancelled("cancelled");
      // The step's text and tool calls in one transaction (one commit, one hop to the db
      // worker, one wake of the Events subscribers).
      std::vector<NewItem> step_items;
      for (const model::Part& part : resp->message.parts) {
        NewItem item;
        item.role = "assistant";
        if (part.kind == model::PartKind::kText) {
          if (part.text.empty()) continue;
          item.kind = "text";
          item.payload = json{{"text", part.text}}.dump();
        } else if (part.kind == model::PartKind::kToolCall) {
          item.kind = "tool_call";
          item.payload =
              json{{"id", part.id}, {"name", part.name}, {"arguments", part.arguments}}.dump();
        } else {
          continue;
        }
        step_items.push_back(std::move(item));
      }
      // The last step's tool results were written while the model answered; they are
      // committed (and announced) before anything of this step.
      Status written = co_await drain(writes);
      if (!written.ok()) co_return written;
      for (const model::Part* c : resp->message.tool_calls()) calls.push_back(*c);
      // Calls of read-only tools only (readOnlyHint): they may run while the step's record
      // commits, since a crash before that commit loses only the record of calls that changed
      // nothing (the turn then ends failed at restart). Any other call runs after it.
      bool read_only = !calls.empty();
      for (const model::Part& c : calls) {
        auto t = tool_of.find(c.name);
        read_only = read_only && t != tool_of.end() && is_read_only(t->second.second);
      }
      if (!step_items.empty() && read_only) {
        append_later(writes, agent_id, turn_id, std::move(step_items));
      } else if (!step_items.empty()) {
        const int64_t now = now_ms();
        auto rows = co_await db_.run(
            [&](db::Database& d) { return append_items(d, agent_id, turn_id, step_items, now); });
        if (!rows.ok()) co_return rows.status();
        committed(agent_id, *rows);
      }
      request.messages.push_back(std::move(resp->message));
      if (calls.empty()) {
        give_back_conversation(agent_id, std::move(request.messages), intact, unchanged,
                               unchanged_tokens, tc.main);
        co_return ok_status();
      }
    }

    std::vector<model::Part> results;
    for (const model::Part& call : calls) {
      json args =
          json::parse(call.arguments.empty() ? std::string("{}") : call.arguments, nullptr, false);
      ToolResult result;
      if (args.is_discarded()) {
        result = text_result("the arguments are not valid JSON", true);
      } else {
        if (cancelled_now(co_await asio::this_coro::cancellation_state))
          co_return cancelled("cancelled");
        auto tool = tool_of.find(call.name);
        bool run = true;
        if (tool != tool_of.end() && is_destructive(tool->second.second)) {
          auto verdict = co_await approve(agent_id, turn_id, call);
          if (!verdict.ok()) co_return verdict.status();
          if (verdict->kind == Verdict::Kind::kWait) {
            *waiting = verdict->reason;
            co_return ok_status();
          }
          if (verdict->kind == Verdict::Kind::kDeny) {
            run = false;
            result = text_result(denied_text(verdict->reason), true);
          }
        }
        if (run) {
          Result<ToolResult> r = not_found(fmt::format("no tool named {:?}", call.name));
          const auto tool_start = std::chrono::steady_clock::now();
          if (tool != tool_of.end())
            r = co_await tool->second.first->call_for(agent_id, call.name, args);
          *tool_us += std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::steady_clock::now() - tool_start)
                          .count();
          if (cancelled_now(co_await asio::this_coro::cancellation_state)) {
            const std::string payload = json{
                {"id", call.id},
                {"name", call.name},
                {"content", text_result("cancelled").content},
                {"is_error", true}}.dump();
            auto item = co_await append(agent_id, turn_id, "tool", "tool_result", payload);
            (void)item;
            co_return cancelled("cancelled");
          }
          result = r.ok() ? std::move(*r) : text_result(std::string(r.status().message()), true);
        }
      }
      std::string payload = json{
          {"id", call.id},
          {"name", call.name},
          {"content", result.content},
          {"is_error",
           result.is_error}}.dump();
      // Not waited for: the next model call goes out while the worker commits it (a crash
      // before the commit leaves the call unanswered, and the turn ends failed at restart).
      std::vector<NewItem> result_item(1);
      result_item[0].role = "tool";
      result_item[0].kind = "tool_result";
      result_item[0].payload = std::move(payload);
      append_later(writes, agent_id, turn_id, std::move(result_item));
      results.push_back(
          model::Part::tool_result_part(call.id, parts_from_mcp(result.content), result.is_error));
    }
    if (!request.messages.empty() && request.messages.back().role == model::Role::kUser) {
      // Results of a resumed step join the results already given for that step.
      auto& parts = request.messages.back().parts;
      for (auto& p : results) parts.push_back(std::move(p));
      intact = std::min(intact, request.messages.size() - 1);
      unchanged = 0;  // the last message changed
      unchanged_tokens = 0;
    } else {
      request.messages.push_back(model::Message::user(std::move(results)));
    }
  }
}

asio::awaitable<Status> AgentsService::write_deltas(Subscriber& sub,
                                                    grpc::ServerWriter<pb::Event>& writer,
                                                    const std::string& offset_key) {
  while (!sub.deltas.empty()) {
    pb::Event ev = std::move(sub.deltas.front());
    sub.deltas.pop_front();
    ev.set_offset_key(offset_key);
    Status w = co_await writer.write(ev);
    if (!w.ok()) co_return w;
  }
  co_return ok_status();
}

asio::awaitable<Status> AgentsService::events(grpc::CallContext& ctx, pb::EventsRequest req,
                                              grpc::ServerWriter<pb::Event>& writer) {
  co_await asio::this_coro::throw_if_cancelled(false);
  int64_t offset = 0;
  if (!req.from_offset_key().empty()) {
    const std::string& k = req.from_offset_key();
    auto [p, ec] = std::from_chars(k.data(), k.data() + k.size(), offset);
    if (ec != std::errc() || p != k.data() + k.size() || offset < 0)
      co_return invalid_argument(fmt::format("from_offset_key {:?} is not one of ours", k));
  }
  bool want_transcript = req.channels_size() == 0;
  bool want_agents = req.channels_size() == 0;
  bool want_approvals = req.channels_size() == 0;
  for (const std::string& c : req.channels()) {
    if (c == "transcript") {
      want_transcript = true;
    } else if (c == "approvals") {
      want_approvals = true;
    } else if (c == "agents") {
      want_agents = true;
    } else {
      co_return invalid_argument(fmt::format("channels: unknown channel {:?}", c));
    }
  }
  Subscriber sub(executor_);
  sub.want_deltas = want_transcript && !req.no_deltas();
  sub.agent_filter = req.agent_id();
  subscribers_.push_back(&sub);
  struct Unsubscribe {
    std::list<Subscriber*>& list;
    Subscriber* sub;
    ~Unsubscribe() { list.remove(sub); }
  } unsubscribe{subscribers_, &sub};
  (void)ctx.send_initial_metadata();

  // The offset of the last durable event written (deltas carry it as their offset key).
  int64_t offset_sent = offset;
  while (true) {
    sub.pending = false;
    // Caught up with the events kept in memory: no read of agent.db.
    std::optional<std::vector<EventRow>> recent =
        recent_events_after(offset, static_cast<size_t>(kEventBatch));
    Result<std::vector<EventRow>> rows = std::vector<EventRow>();
    if (recent) {
      rows = std::move(*recent);
    } else {
      rows = co_await db_.run(
          [offset](db::Database& d) { return events_after(d, offset, kEventBatch); });
    }
    if (!rows.ok()) co_return rows.status();
    for (const EventRow& row : *rows) {
      offset = row.id;
      if (!req.agent_id().empty() && row.agent_id != req.agent_id()) continue;
      pb::Event ev;
      ev.set_offset_key(std::to_string(row.id));
      ev.set_channel(row.channel);
      if (row.channel == "transcript" && want_transcript && row.item) {
        *ev.mutable_item() = to_proto(*row.item);
      } else if (row.channel == "agents" && want_agents && row.agent) {
        *ev.mutable_agent() = to_proto(*row.agent);
      } else if (row.channel == "approvals" && want_approvals && row.approval) {
        *ev.mutable_approval() = to_proto(*row.approval);
      } else {
        continue;
      }
      if (ev.has_item() && row.item->role == "assistant" && row.item->kind == "text") {
        // The deltas still queued were published before this item was written (a model
        // call's deltas all come before its text is stored): send them first, so a client
        // never gets a delta for text whose durable item it already has.
        const std::string key = std::to_string(offset_sent);
        Status d = co_await write_deltas(sub, writer, key);
        if (!d.ok()) co_return d;
      }
      Status w = co_await writer.write(ev);
      if (!w.ok()) co_return w;
      offset_sent = row.id;
    }
    if (rows->size() == static_cast<size_t>(kEventBatch)) continue;
    const std::string key = std::to_string(offset);
    Status d = co_await write_deltas(sub, writer, key);
    if (!d.ok()) co_return d;
    if (sub.pending) continue;
    if (stopping_) co_return ok_status();
    sub.wake.expires_at(net::Deadline::max());
    co_await sub.wake.async_wait();
    if (cancelled_now(co_await asio::this_coro::cancellation_state) || ctx.cancelled())
      co_return cancelled("client went away");
  }
}

}  // namespace cb::agent
