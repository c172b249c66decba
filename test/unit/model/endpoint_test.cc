#include "model/client.h"

#include <catch2/catch.hpp>

namespace cb::model {
namespace {

using namespace std::chrono_literals;

http::Headers fields(std::initializer_list<std::pair<const char*, const char*>> list) {
  http::Headers h;
  for (auto& [n, v] : list) h.push_back(http::Header{n, v});
  return h;
}

TEST_CASE("parse_endpoint: http, https with a prefix, and the unix model door", "[model][unit]") {
  auto a = parse_endpoint("http://127.0.0.1:8080");
  REQUIRE(a.ok());
  CHECK(a->host == "127.0.0.1");
  CHECK(a->port == 8080);
  CHECK_FALSE(a->tls);
  CHECK(a->path_prefix.empty());
  auto b = parse_endpoint("https://gw.example.com/api/");
  REQUIRE(b.ok());
  CHECK(b->tls);
  CHECK(b->port == 443);
  CHECK(b->path_prefix == "/api");
  auto c = parse_endpoint("unix:/run/cocoonbox/model.sock");
  REQUIRE(c.ok());
  CHECK(c->unix_path == "/run/cocoonbox/model.sock");
  auto d = parse_endpoint("http://[::1]:9");
  REQUIRE(d.ok());
  CHECK(d->host == "::1");
  CHECK(d->port == 9);
  CHECK(parse_endpoint("ftp://x").status().code() == Code::kInvalidArgument);
  CHECK(parse_endpoint("unix:relative.sock").status().code() == Code::kInvalidArgument);
  CHECK(parse_endpoint("http://h:99999").status().code() == Code::kInvalidArgument);
  auto creds = parse_endpoint("https://user:sk-secret@gw.example.com");
  CHECK(creds.status().code() == Code::kInvalidArgument);
  CHECK(std::string(creds.status().message()).find("sk-secret") == std::string::npos);
}

TEST_CASE("request_headers: the key goes in the wire's own field, and only when given",
          "[model][unit]") {
  Endpoint ep;
  ModelInfo openai{"m", Wire::kOpenAi, false, 1};
  ModelInfo anthropic{"m", Wire::kAnthropic, false, 1};
  http::Headers h = request_headers(ep, openai, true);
  CHECK(http::find_header(h, "authorization") == nullptr);
  CHECK(http::find_header(h, "x-api-key") == nullptr);
  CHECK(*http::find_header(h, "accept") == "text/event-stream");
  h = request_headers(ep, anthropic, false);
  CHECK(*http::find_header(h, "anthropic-version") == "2023-06-01");
  CHECK(http::find_header(h, "x-api-key") == nullptr);

  ep.api_key = "sk-test";
  ep.extra_headers = fields({{"anthropic-version", "2023-01-01"}, {"x-title", "cocoonbox"}});
  h = request_headers(ep, openai, true);
  CHECK(*http::find_header(h, "authorization") == "Bearer sk-test");
  CHECK(http::find_header(h, "x-api-key") == nullptr);
  h = request_headers(ep, anthropic, true);
  CHECK(*http::find_header(h, "x-api-key") == "sk-test");
  CHECK(http::find_header(h, "authorization") == nullptr);
  CHECK(*http::find_header(h, "anthropic-version") == "2023-01-01");  // the caller's wins
  CHECK(*http::find_header(h, "x-title") == "cocoonbox");
}

TEST_CASE("retry_after: seconds, milliseconds, and what is not honoured", "[model][unit]") {
  CHECK(retry_after(fields({{"retry-after", "2"}})) == 2000ms);
  CHECK(retry_after(fields({{"retry-after", "0.5"}})) == 500ms);
  CHECK(retry_after(fields({{"retry-after-ms", "150"}, {"retry-after", "9"}})) == 150ms);
  CHECK(retry_after(fields({{"retry-after", "Wed, 21 Oct 2015 07:28:00 GMT"}})) == std::nullopt);
  CHECK(retry_after(fields({{"retry-after", "-1"}})) == std::nullopt);
  CHECK(retry_after({}) == std::nullopt);
  CHECK(retryable_http_status(429));
  CHECK(retryable_http_status(503));
  CHECK(retryable_http_status(529));
  CHECK_FALSE(retryable_http_status(400));
  CHECK_FALSE(retryable_http_status(401));
  CHECK_FALSE(retryable_http_status(403));
}

}  // namespace
}  // namespace cb::model
