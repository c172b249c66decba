#include "state/retention.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace cb::state {
namespace {

using std::chrono::milliseconds;

constexpr int64_t kMinute = 60'000;
constexpr int64_t kHour = 60 * kMinute;
constexpr int64_t kDay = 24 * kHour;
constexpr int64_t kWeek = 7 * kDay;
// 2026-11-30T12:00:00Z, a Monday.
constexpr int64_t kNowMs = 1'796'040'000'000;
const auto kNow = std::chrono::system_clock::time_point(milliseconds(kNowMs));

// A timeline with one entry per age (ms before kNowMs), ids "s<age>" so they are readable.
struct Builder {
  Timeline timeline;
  Builder& at(int64_t age_ms, const std::string& id, bool pinned = false) {
    TimelineEntry e;
    e.snapshot_id = id;
    e.saved_at_ms = kNowMs - age_ms;
    e.pinned = pinned;
    timeline.entries.push_back(e);
    return *this;
  }
};

std::map<std::string, std::string> kept_with_reasons(const RetentionPlan& plan) {
  std::map<std::string, std::string> out;
  for (const auto& d : plan.decisions) {
    if (d.keep) out[d.snapshot_id] = d.reason;
  }
  return out;
}

std::set<std::string> as_set(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

TEST_CASE("retention: an empty timeline keeps and drops nothing", "[state][unit]") {
  auto plan = apply_retention(Timeline(), "", RetentionRule::time_machine(), kNow);
  CHECK(plan.decisions.empty());
  CHECK(plan.kept().empty());
  CHECK(plan.dropped().empty());
}

TEST_CASE("retention: the newest snapshot of each hour within 24 h is kept", "[state][unit]") {
  // now = 12:00. 11:50 and 11:10 share the 11:00 hour; 10:59 is the 10:00 hour.
  Builder b;
  b.at(50 * kMinute, "1110").at(10 * kMinute, "1150").at(61 * kMinute, "1059");
  auto plan = apply_retention(b.timeline, "", RetentionRule::time_machine(), kNow);
  CHECK(kept_with_reasons(plan) ==
        std::map<std::string, std::string>{{"1150", "hourly"}, {"1059", "hourly"}});
  CHECK(plan.dropped() == std::vector<std::string>{"1110"});
  // Decisions follow the timeline's order and carry the save time.
  REQUIRE(plan.decisions.size() == 3);
  CHECK(plan.decisions[0].snapshot_id == "1110");
  CHECK(plan.decisions[0].saved_at_ms == kNowMs - 50 * kMinute);
}

TEST_CASE("retention: the head and pinned snapshots are always kept", "[state][unit]") {
  Builder b;
  b.at(400 * kDay, "ancient-pinned", true)
      .at(300 * kDay, "ancient")
      .at(200 * kDay, "head")  // an old head: entries newer than it exist after a crash
      .at(10 * kMinute, "newer")
      .at(5 * kMinute, "newest");
  auto plan = apply_retention(b.timeline, "head", RetentionRule::time_machine(), kNow);
  CHECK(kept_with_reasons(plan) == std::map<std::string, std::string>{{"ancient-pinned", "pinned"},
                                                                      {"head", "head"},
                                                                      {"newest", "hourly"}});
  CHECK(as_set(plan.dropped()) == std::set<std::string>{"ancient", "newer"});

  SECTION("a head that is also pinned reads as the head") {
    Builder p;
    p.at(400 * kDay, "h", true);
    auto q = apply_retention(p.timeline, "h", RetentionRule::time_machine(), kNow);
    CHECK(kept_with_reasons(q) == std::map<std::string, std::string>{{"h", "head"}});
  }
  SECTION("a head id the timeline does not name changes nothing") {
    auto q = apply_retention(b.timeline, "elsewhere", RetentionRule::time_machine(), kNow);
    CHECK(as_set(q.kept()) == std::set<std::string>{"ancient-pinned", "newest"});
  }
}

TEST_CASE("retention: spans end exactly at their length", "[state][unit]") {
  // Only the tier boundary decides: each snapshot is alone in its buckets.
  const auto rule = RetentionRule::time_machine();
  auto decide = [&](int64_t age) {
    Builder b;
    b.at(age, "x");
    auto plan = apply_retention(b.timeline, "", rule, kNow);
    REQUIRE(plan.decisions.size() == 1);
    return plan.decisions[0].keep ? plan.decisions[0].reason : std::string("drop");
  };
  CHECK(decide(0) == "hourly");
  CHECK(decide(kDay - 1) == "hourly");
  CHECK(decide(kDay) == "daily");
  CHECK(decide(30 * kDay - 1) == "daily");
  CHECK(decide(30 * kDay) == "weekly");
  CHECK(decide(26 * kWeek - 1) == "weekly");
  CHECK(decide(26 * kWeek) == "drop");
  CHECK(decide(5 * 365 * kDay) == "drop");
}

TEST_CASE("retention: days are UTC days and weeks start on Monday 00:00 UTC", "[state][unit]") {
  const auto rule = RetentionRule::time_machine();
  SECTION("two saves one minute apart across midnight UTC are two days") {
    // now = Monday 12:00; 5 days back, 12 h back = Wednesday 00:00.
    const int64_t midnight = 5 * kDay + 12 * kHour;
    Builder b;
    b.at(midnight + kMinute, "before").at(midnight - kMinute, "after");
    auto plan = apply_retention(b.timeline, "", rule, kNow);
    CHECK(as_set(plan.kept()) == std::set<std::string>{"before", "after"});
  }
  SECTION("two saves in one UTC day keep the later") {
    const int64_t midnight = 5 * kDay + 12 * kHour;
    Builder b;
    b.at(midnight - kMinute, "early").at(midnight - 20 * kHour, "late");
    auto plan = apply_retention(b.timeline, "", rule, kNow);
    CHECK(plan.kept() == std::vector<std::string>{"late"});
  }
  SECTION("Sunday 23:59 and Monday 00:01 are two weeks; Saturday and Sunday one") {
    // Monday 00:00 ten weeks ago is 10 weeks + 12 h before now.
    const int64_t monday = 10 * kWeek + 12 * kHour;
    Builder b;
    b.at(monday + kDay + kMinute, "saturday")
        .at(monday + kMinute, "sunday")
        .at(monday - kMinute, "monday");
    auto plan = apply_retention(b.timeline, "", rule, kNow);
    CHECK(kept_with_reasons(plan) ==
          std::map<std::string, std::string>{{"sunday", "weekly"}, {"monday", "weekly"}});
  }
}

TEST_CASE("retention: snapshots from the future are kept and evict nothing", "[state][unit]") {
  // The api's clock went back an hour after these were saved.
  Builder b;
  b.at(-30 * kMinute, "future").at(5 * kMinute, "now-ish").at(10 * kMinute, "earlier");
  auto plan = apply_retention(b.timeline, "", RetentionRule::time_machine(), kNow);
  CHECK(kept_with_reasons(plan) ==
        std::map<std::string, std::string>{{"future", "future"}, {"now-ish", "hourly"}});
  CHECK(plan.dropped() == std::vector<std::string>{"earlier"});
}

TEST_CASE("retention: ties in a bucket go to the greater id, whatever the order", "[state][unit]") {
  Builder b;
  b.at(5 * kMinute, "b").at(5 * kMinute, "a").at(5 * kMinute, "c");
  auto plan = apply_retention(b.timeline, "", RetentionRule::time_machine(), kNow);
  CHECK(plan.kept() == std::vector<std::string>{"c"});
}

TEST_CASE("retention: keep_all_within keeps every snapshot younger than it", "[state][unit]") {
  auto rule = parse_retention_rule("all=2h,daily=7d");
  REQUIRE(rule.ok());
  Builder b;
  b.at(1 * kMinute, "a").at(2 * kMinute, "b").at(2 * kHour - 1, "c").at(2 * kHour, "d");
  b.at(2 * kHour + 1, "e");
  auto plan = apply_retention(b.timeline, "", *rule, kNow);
  // d and e are in today's day bucket with a, which is newer: only "all" keeps them.
  CHECK(kept_with_reasons(plan) ==
        std::map<std::string, std::string>{{"a", "all"}, {"b", "all"}, {"c", "all"}});
}

// A year of hourly saves, in random order: the kept set has the rule's shape and does not
// depend on the order of the timeline.
TEST_CASE("retention: a year of hourly saves keeps the rule's buckets", "[state][unit]") {
  Builder b;
  for (int64_t h = 0; h < 365 * 24; ++h) {
    b.at(h * kHour + 7 * kMinute, "h" + std::to_string(h));
  }
  const auto rule = RetentionRule::time_machine();
  const auto plan = apply_retention(b.timeline, "", rule, kNow);
  const auto kept = kept_with_reasons(plan);

  std::set<int64_t> hours, days, weeks;
  std::map<std::string, int> per_reason;
  for (const auto& d : plan.decisions) {
    const int64_t age = kNowMs - d.saved_at_ms;
    if (!d.keep) continue;
    ++per_reason[d.reason];
    CHECK(age < 26 * kWeek);
    if (age < kDay) CHECK(hours.insert(d.saved_at_ms / kHour).second);
    if (age < 30 * kDay) days.insert(d.saved_at_ms / kDay);
    weeks.insert((d.saved_at_ms + 3 * kDay) / kWeek);
  }
  // Every hour of the last 24 h (one save each) is kept; each UTC day of the last 30 and
  // each week of the last 26 has a snapshot.
  CHECK(hours.size() == 24);
  CHECK(days.size() >= 30);
  CHECK(weeks.size() >= 26);
  CHECK(per_reason["hourly"] == 24);
  // The newest of each UTC day: a save at hh:07 of hour 23 of that day.
  for (const auto& [id, reason] : kept) {
    if (reason != "daily") continue;
    const int64_t at = kNowMs - std::stoll(id.substr(1)) * kHour - 7 * kMinute;
    CHECK((at % kDay) / kHour == 23);
  }
  CHECK(kept.size() <= 24 + 31 + 27);

  std::vector<TimelineEntry> shuffled = b.timeline.entries;
  std::mt19937 rng(42);
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  const auto again = apply_retention(Timeline{shuffled}, "", rule, kNow);
  CHECK(as_set(again.kept()) == as_set(plan.kept()));
}

TEST_CASE("retention: rules parse, print and refuse bad specs", "[state][unit]") {
  auto def = parse_retention_rule("hourly=24h,daily=30d,weekly=26w");
  REQUIRE(def.ok());
  CHECK(*def == RetentionRule::time_machine());
  CHECK(format_retention_rule(*def) == "hourly=1d,daily=30d,weekly=26w");
  // Order in the spec does not matter; tiers come out hourly, daily, weekly.
  auto mixed = parse_retention_rule("weekly=4w,all=90m,hourly=6h");
  REQUIRE(mixed.ok());
  CHECK(mixed->keep_all_within == milliseconds(90 * kMinute));
  REQUIRE(mixed->tiers.size() == 2);
  CHECK(mixed->tiers[0].name == "hourly");
  CHECK(mixed->tiers[1].name == "weekly");
  CHECK(format_retention_rule(*mixed) == "all=90m,hourly=6h,weekly=4w");

  for (const char* bad :
       {"", "hourly", "hourly=", "hourly=0h", "hourly=5", "hourly=5y", "monthly=3w",
        "hourly=1h,hourly=2h", "hourly=1h,", "hourly=-1h", "daily=1x1d"}) {
    INFO(bad);
    auto r = parse_retention_rule(bad);
    CHECK(r.status().code() == Code::kInvalidArgument);
  }
}

}  // namespace
}  // namespace cb::state
