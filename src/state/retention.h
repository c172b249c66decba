#pragma once
// Retention: which snapshots of a box's timeline to keep (product design §25.3, prune step 1).
// A pure function of the timeline, the head, a rule and the time; prune.h applies it.
//
// The rule is Time Machine's, in restic's terms: each tier cuts time into buckets of a fixed
// width (an hour, a UTC day, a week from Monday 00:00 UTC) and keeps the newest snapshot of
// every bucket among the snapshots younger than the tier's span. The default keeps hourly
// snapshots for 24 h, daily ones for 30 days and weekly ones for 26 weeks. On top of the tiers:
//
//   - the head and every pinned snapshot are always kept;
//   - a snapshot saved after |now| (a clock that went back, or skew between writers) is kept
//     and takes no part in the buckets: its age is unknown, so it is never a reason to drop;
//   - keep_all_within keeps every snapshot younger than it (0 by default).
//
// A snapshot of age a (now - saved_at) takes part in a tier when 0 <= a < span. Ties in one
// bucket go to the greater saved_at, then the greater snapshot id, so the result does not
// depend on the timeline's order.
//
// Thread-safety: pure functions.

#include "base/result.h"
#include "state/snapshot.h"

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace cb::state {

struct RetentionTier {
  std::string name;                     // "hourly", "daily", "weekly": shown as the keep reason
  std::chrono::milliseconds width;      // bucket width
  std::chrono::milliseconds offset{0};  // buckets start at offset + k * width (Unix time)
  std::chrono::milliseconds span;       // snapshots younger than this take part

  bool operator==(const RetentionTier&) const = default;
};

struct RetentionRule {
  std::chrono::milliseconds keep_all_within{0};
  std::vector<RetentionTier> tiers;

  // Hourly for 24 h, daily for 30 days, weekly (from Monday) for 26 weeks (§25.3, issue 7).
  static RetentionRule time_machine();

  bool operator==(const RetentionRule&) const = default;
};

// A rule from a config string: comma-separated `name=duration`, duration an integer and one
// of s, m, h, d, w. Names: `all` (keep_all_within), `hourly`, `daily`, `weekly` (the span of
// that tier). The default is "hourly=24h,daily=30d,weekly=26w".
// Errors: kInvalidArgument naming the part: empty spec, unknown name, a name twice, a bad
//   or zero duration.
Result<RetentionRule> parse_retention_rule(std::string_view spec);

// The rule back in parse_retention_rule()'s syntax (tiers of other widths are printed as
// `<width>=<span>`, which does not parse back).
std::string format_retention_rule(const RetentionRule& rule);

struct RetentionDecision {
  std::string snapshot_id;
  int64_t saved_at_ms = 0;
  bool keep = false;
  // Why it is kept, the first that applies: "head", "pinned", "future", "all", or a tier's
  // name. Empty when dropped.
  std::string reason;

  bool operator==(const RetentionDecision&) const = default;
};

struct RetentionPlan {
  std::vector<RetentionDecision> decisions;  // one per timeline entry, in timeline order

  std::vector<std::string> kept() const;
  std::vector<std::string> dropped() const;
};

// Applies |rule| to |timeline| at |now|. |head_id| is the head's snapshot id ("" for none).
RetentionPlan apply_retention(const Timeline& timeline, std::string_view head_id,
                              const RetentionRule& rule, std::chrono::system_clock::time_point now);

}  // namespace cb::state
