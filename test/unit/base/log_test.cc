#include "base/log.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

namespace cb::log {
namespace {

TEST_CASE("log: a line is one JSON object with ts, level, msg and fields in order",
          "[base][unit]") {
  std::string line = format_line(Level::kWarn, "listening",
                                 {{"port", 7443}, {"addr", "127.0.0.1"}, {"tls", false}});
  REQUIRE(line.back() == '\n');
  auto j = nlohmann::json::parse(line);
  CHECK(j["level"] == "warn");
  CHECK(j["msg"] == "listening");
  CHECK(j["port"] == 7443);
  CHECK(j["addr"] == "127.0.0.1");
  CHECK(j["tls"] == false);
  CHECK(j["ts"].get<std::string>().size() == 24);
  CHECK(line.find("\"msg\"") < line.find("\"port\""));
}

TEST_CASE("log: control characters and invalid UTF-8 still give valid JSON", "[base][unit]") {
  std::string bad = "a\"b\\c\n\x01\xff\xc3\xa9";
  std::string line = format_line(Level::kInfo, bad, {});
  auto j = nlohmann::json::parse(line);
  CHECK(j["msg"] == "a\"b\\c\n\x01\xEF\xBF\xBD\xc3\xa9");
}

TEST_CASE("log: lines below the minimum level are dropped", "[base][unit]") {
  std::vector<std::string> lines;
  set_sink([&](std::string_view l) { lines.emplace_back(l); });
  set_min_level(Level::kWarn);
  info("dropped");
  error("kept", {{"code", 13}});
  set_min_level(Level::kInfo);
  set_sink(nullptr);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("\"kept\"") != std::string::npos);
}

}  // namespace
}  // namespace cb::log
