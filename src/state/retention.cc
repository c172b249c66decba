#include "state/retention.h"

#include <cstdint>
#include <map>
#include <set>
#include <utility>

namespace cb::state {

namespace {

using std::chrono::milliseconds;

constexpr milliseconds kHour{3'600'000};
constexpr milliseconds kDay = kHour * 24;
constexpr milliseconds kWeek = kDay * 7;
// 1970-01-01 was a Thursday: weeks start on Monday 1969-12-29, 3 days before the epoch.
constexpr milliseconds kMondayOffset = -kDay * 3;

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// The known tiers by name, in the order they are printed.
struct NamedTier {
  const char* name;
  milliseconds width;
  milliseconds offset;
};
constexpr NamedTier kNamedTiers[] = {
    {"hourly", kHour, milliseconds(0)},
    {"daily", kDay, milliseconds(0)},
    {"weekly", kWeek, kMondayOffset},
};

Result<milliseconds> parse_duration(std::string_view what, std::string_view s) {
  if (s.size() < 2) return invalid_argument(std::string(what) + ": want <integer><s|m|h|d|w>");
  int64_t n = 0;
  for (char c : s.substr(0, s.size() - 1)) {
    if (c < '0' || c > '9' || n > 1'000'000'000) {
      return invalid_argument(std::string(what) + ": want <integer><s|m|h|d|w>");
    }
    n = n * 10 + (c - '0');
  }
  if (n == 0) return invalid_argument(std::string(what) + ": the duration must be above 0");
  switch (s.back()) {
    case 's':
      return milliseconds(n * 1000);
    case 'm':
      return milliseconds(n * 60'000);
    case 'h':
      return kHour * n;
    case 'd':
      return kDay * n;
    case 'w':
      return kWeek * n;
    default:
      return invalid_argument(std::string(what) + ": unit must be s, m, h, d or w");
  }
}

std::string format_duration(milliseconds d) {
  const int64_t ms = d.count();
  struct Unit {
    int64_t ms;
    char c;
  };
  for (Unit u : {Unit{kWeek.count(), 'w'}, Unit{kDay.count(), 'd'}, Unit{kHour.count(), 'h'},
                 Unit{60'000, 'm'}, Unit{1000, 's'}}) {
    if (ms != 0 && ms % u.ms == 0) return std::to_string(ms / u.ms) + u.c;
  }
  return std::to_string(ms) + "ms";
}

// Bucket order within a tier: the greater (saved_at, id) wins.
bool newer(const TimelineEntry& a, const TimelineEntry& b) {
  if (a.saved_at_ms != b.saved_at_ms) return a.saved_at_ms > b.saved_at_ms;
  return a.snapshot_id > b.snapshot_id;
}

}  // namespace

RetentionRule RetentionRule::time_machine() {
  RetentionRule r;
  r.tiers = {
      RetentionTier{"hourly", kHour, milliseconds(0), kDay},
      RetentionTier{"daily", kDay, milliseconds(0), kDay * 30},
      RetentionTier{"weekly", kWeek, kMondayOffset, kWeek * 26},
  };
  return r;
}

Result<RetentionRule> parse_retention_rule(std::string_view spec) {
  if (spec.empty()) return invalid_argument("retention rule: empty");
  RetentionRule rule;
  std::set<std::string> seen;
  std::map<int, RetentionTier> tiers;  // by index in kNamedTiers, so the order is fixed
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    std::string_view part = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    if (comma != std::string_view::npos && spec.empty()) {
      return invalid_argument("retention rule: trailing ','");
    }
    const size_t eq = part.find('=');
    if (eq == std::string_view::npos) {
      return invalid_argument("retention rule: \"" + std::string(part) + "\": want name=duration");
    }
    const std::string name(part.substr(0, eq));
    const std::string what = "retention rule: " + name;
    if (!seen.insert(name).second) return invalid_argument(what + ": given twice");
    ASSIGN_OR_RETURN(milliseconds d, parse_duration(what, part.substr(eq + 1)));
    if (name == "all") {
      rule.keep_all_within = d;
      continue;
    }
    bool known = false;
    for (int i = 0; i < int(std::size(kNamedTiers)); ++i) {
      if (name == kNamedTiers[i].name) {
        tiers[i] = RetentionTier{name, kNamedTiers[i].width, kNamedTiers[i].offset, d};
        known = true;
      }
    }
    if (!known) {
      return invalid_argument(what + ": unknown (want all, hourly, daily or weekly)");
    }
  }
  for (auto& [i, t] : tiers) rule.tiers.push_back(std::move(t));
  return rule;
}

std::string format_retention_rule(const RetentionRule& rule) {
  std::string out;
  auto add = [&](const std::string& name, milliseconds d) {
    if (!out.empty()) out += ",";
    out += name + "=" + format_duration(d);
  };
  if (rule.keep_all_within.count() > 0) add("all", rule.keep_all_within);
  for (const RetentionTier& t : rule.tiers) {
    bool named = false;
    for (const NamedTier& n : kNamedTiers) {
      named = named || (t.name == n.name && t.width == n.width && t.offset == n.offset);
    }
    add(named ? t.name : format_duration(t.width), t.span);
  }
  return out;
}

std::vector<std::string> RetentionPlan::kept() const {
  std::vector<std::string> out;
  for (const RetentionDecision& d : decisions) {
    if (d.keep) out.push_back(d.snapshot_id);
  }
  return out;
}

std::vector<std::string> RetentionPlan::dropped() const {
  std::vector<std::string> out;
  for (const RetentionDecision& d : decisions) {
    if (!d.keep) out.push_back(d.snapshot_id);
  }
  return out;
}

RetentionPlan apply_retention(const Timeline& timeline, std::string_view head_id,
                              const RetentionRule& rule,
                              std::chrono::system_clock::time_point now) {
  const int64_t now_ms = std::chrono::duration_cast<milliseconds>(now.time_since_epoch()).count();
  const size_t n = timeline.entries.size();
  std::vector<std::string> reasons(n);

  // The newest entry of each (tier, bucket), as an index into the timeline.
  std::vector<std::map<int64_t, size_t>> winners(rule.tiers.size());
  for (size_t i = 0; i < n; ++i) {
    const TimelineEntry& e = timeline.entries[i];
    const int64_t age = now_ms - e.saved_at_ms;
    if (age < 0) continue;  // from the future: kept below, no part in the buckets
    for (size_t t = 0; t < rule.tiers.size(); ++t) {
      const RetentionTier& tier = rule.tiers[t];
      if (tier.width.count() <= 0 || age >= tier.span.count()) continue;
      const int64_t bucket = floor_div(e.saved_at_ms - tier.offset.count(), tier.width.count());
      auto [it, inserted] = winners[t].emplace(bucket, i);
      if (!inserted && newer(e, timeline.entries[it->second])) it->second = i;
    }
  }
  for (size_t t = rule.tiers.size(); t-- > 0;) {  // so the first tier's name wins
    const std::string& name = rule.tiers[t].name.empty() ? "tier" : rule.tiers[t].name;
    for (const auto& [bucket, i] : winners[t]) reasons[i] = name;
  }

  RetentionPlan plan;
  plan.decisions.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const TimelineEntry& e = timeline.entries[i];
    const int64_t age = now_ms - e.saved_at_ms;
    std::string reason;
    if (!head_id.empty() && e.snapshot_id == head_id) {
      reason = "head";
    } else if (e.pinned) {
      reason = "pinned";
    } else if (age < 0) {
      reason = "future";
    } else if (age < rule.keep_all_within.count()) {
      reason = "all";
    } else {
      reason = reasons[i];
    }
    const bool keep = !reason.empty();
    plan.decisions.push_back(RetentionDecision{e.snapshot_id, e.saved_at_ms, keep, reason});
  }
  return plan;
}

}  // namespace cb::state
