#include "mcp/jsonrpc.h"

#include "mcp/protocol.h"

#include <catch2/catch.hpp>

#include <string>

namespace cb::mcp {
namespace {

Message one(std::string_view text) {
  Payload p = parse_payload(text);
  REQUIRE_FALSE(p.batch);
  REQUIRE(p.messages.size() == 1);
  return p.messages[0];
}

TEST_CASE("parse_payload: requests, notifications and responses are told apart", "[mcp][unit]") {
  Message req = one(R"({"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"cursor":"x"}})");
  CHECK(req.kind == MessageKind::kRequest);
  CHECK(req.id == 7);
  CHECK(req.method == "tools/list");
  CHECK(req.params == Json{{"cursor", "x"}});

  Message str_id = one(R"({"jsonrpc":"2.0","id":"abc","method":"ping"})");
  CHECK(str_id.kind == MessageKind::kRequest);
  CHECK(str_id.id == "abc");
  CHECK(str_id.params.is_null());

  Message note = one(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
  CHECK(note.kind == MessageKind::kNotification);
  CHECK(note.id.is_null());

  Message resp = one(R"({"jsonrpc":"2.0","id":1,"result":{"a":1}})");
  CHECK(resp.kind == MessageKind::kResponse);
  CHECK(resp.result == Json{{"a", 1}});

  Message err =
      one(R"({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x","data":[1]}})");
  CHECK(err.kind == MessageKind::kErrorResponse);
  CHECK(err.id.is_null());
  CHECK(err.error.code == kParseError);
  CHECK(err.error.message == "x");
  CHECK(err.error.data == Json::array({1}));
}

TEST_CASE("parse_payload: bad input becomes an invalid message with the right error code",
          "[mcp][unit]") {
  SECTION("not JSON is a parse error with id null") {
    for (std::string_view text : {"", "{", "nope", R"({"jsonrpc":"2.0",})", "\xff\xfe"}) {
      INFO(text);
      Message m = one(text);
      CHECK(m.kind == MessageKind::kInvalid);
      CHECK(m.error.code == kParseError);
      CHECK(m.id.is_null());
    }
  }
  SECTION("valid JSON that is not a message is an invalid request, keeping a readable id") {
    struct Case {
      const char* text;
      Json id;
    };
    const Case cases[] = {
        {R"(42)", nullptr},
        {R"("str")", nullptr},
        {R"({"id":1,"method":"ping"})", 1},                           // no jsonrpc
        {R"({"jsonrpc":"1.0","id":2,"method":"ping"})", 2},           // wrong version
        {R"({"jsonrpc":"2.0","id":3,"method":5})", 3},                // method not a string
        {R"({"jsonrpc":"2.0","id":4,"method":"x","params":3})", 4},   // params scalar
        {R"({"jsonrpc":"2.0","id":null,"method":"ping"})", nullptr},  // null id on a request
        {R"({"jsonrpc":"2.0","id":1.5,"method":"ping"})", nullptr},   // fractional id
        {R"({"jsonrpc":"2.0","id":{},"method":"ping"})", nullptr},
        {R"({"jsonrpc":"2.0","id":5})", 5},                        // nothing
        {R"({"jsonrpc":"2.0","id":6,"result":1,"error":{}})", 6},  // both
        {R"({"jsonrpc":"2.0","result":1})", nullptr},              // response without id
        {R"({"jsonrpc":"2.0","id":7,"error":{"code":"x","message":"m"}})", 7},
        {R"({"jsonrpc":"2.0","id":8,"error":{"code":1}})", 8},
        {R"({"jsonrpc":"2.0","id":9,"error":"boom"})", 9},
    };
    for (const Case& c : cases) {
      INFO(c.text);
      Message m = one(c.text);
      CHECK(m.kind == MessageKind::kInvalid);
      CHECK(m.error.code == kInvalidRequest);
      CHECK(m.id == c.id);
    }
  }
  SECTION("nesting beyond the limit is refused before parsing") {
    ParseLimits limits;
    limits.max_depth = 8;
    std::string deep = std::string(9, '[') + std::string(9, ']');
    Payload p = parse_payload(deep, limits);
    REQUIRE(p.messages.size() == 1);
    CHECK(p.messages[0].error.code == kParseError);
    // Brackets inside strings do not count.
    std::string in_string = R"({"jsonrpc":"2.0","method":"x","params":{"s":"[[[[[[[[[[[[\"[["}})";
    CHECK(parse_payload(in_string, limits).messages[0].kind == MessageKind::kNotification);
  }
  SECTION("a payload over the size limit is refused") {
    ParseLimits limits;
    limits.max_bytes = 10;
    Payload p = parse_payload(R"({"jsonrpc":"2.0","method":"x"})", limits);
    CHECK(p.messages[0].error.code == kInvalidRequest);
  }
}

TEST_CASE("parse_payload: batches parse element by element", "[mcp][unit]") {
  Payload p = parse_payload(
      R"([{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"n"},7])");
  CHECK(p.batch);
  REQUIRE(p.messages.size() == 3);
  CHECK(p.messages[0].kind == MessageKind::kRequest);
  CHECK(p.messages[1].kind == MessageKind::kNotification);
  CHECK(p.messages[2].kind == MessageKind::kInvalid);

  Payload empty = parse_payload("[]");
  CHECK_FALSE(empty.batch);
  REQUIRE(empty.messages.size() == 1);
  CHECK(empty.messages[0].error.code == kInvalidRequest);

  ParseLimits limits;
  limits.max_batch = 2;
  Payload big = parse_payload(R"([{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","method":"b"},)"
                              R"({"jsonrpc":"2.0","method":"c"}])",
                              limits);
  CHECK_FALSE(big.batch);
  CHECK(big.messages[0].error.code == kInvalidRequest);
}

TEST_CASE("serialize: messages round-trip and never contain a raw newline", "[mcp][unit]") {
  const Message messages[] = {
      Message::request(1, "tools/call", Json{{"name", "x"}, {"arguments", {{"t", "a\nb"}}}}),
      Message::request("id-1", "ping"),
      Message::notification("notifications/progress", Json{{"progress", 0.5}}),
      Message::response(2, Json{{"content", Json::array()}}),
      Message::error_response(nullptr, rpc_error(kParseError, "bad\njson", Json{{"at", 3}})),
  };
  for (const Message& m : messages) {
    std::string line = serialize(m);
    INFO(line);
    CHECK(line.find('\n') == std::string::npos);
    Message back = one(line);
    CHECK(back.kind == m.kind);
    CHECK(back.id == m.id);
    CHECK(back.method == m.method);
    CHECK(back.params == m.params);
    CHECK(back.result == m.result);
    CHECK(back.error == m.error);
  }
  // Invalid UTF-8 is replaced instead of throwing.
  std::string bad = serialize(Message::notification("x", Json{{"s", std::string("\xff")}}));
  CHECK(bad.find("\xef\xbf\xbd") != std::string::npos);
  CHECK(serialize_batch({Message::response(1, Json::object()), Message::response(2, 3)}) ==
        R"([{"id":1,"jsonrpc":"2.0","result":{}},{"id":2,"jsonrpc":"2.0","result":3}])");
  // An invalid message serializes as the error response owed for it.
  Json owed = to_json(one("{"));
  CHECK(owed["error"]["code"] == kParseError);
  CHECK(owed["id"].is_null());
}

TEST_CASE("id_key: string and integer ids with the same digits differ", "[mcp][unit]") {
  CHECK(id_key(1) != id_key("1"));
  CHECK(id_key(1) == id_key(Json::parse("1")));
}

TEST_CASE("rpc errors and Status map both ways", "[mcp][unit]") {
  CHECK(rpc_error_from_status(invalid_argument("x")).code == kInvalidParams);
  CHECK(rpc_error_from_status(not_found("x")).code == kMethodNotFound);
  CHECK(rpc_error_from_status(unavailable("x")).code == kInternalError);
  CHECK(rpc_error_from_status(unavailable("why")).message == "why");
  CHECK(status_from_rpc_error(rpc_error(kInvalidParams, "m")).code() == Code::kInvalidArgument);
  CHECK(status_from_rpc_error(rpc_error(kMethodNotFound, "m")).code() == Code::kUnimplemented);
  CHECK(status_from_rpc_error(rpc_error(-1, "m")).code() == Code::kInternal);
}

TEST_CASE("protocol: version negotiation echoes a supported version, else the newest",
          "[mcp][unit]") {
  CHECK(negotiate_protocol_version("2025-11-25") == "2025-11-25");
  CHECK(negotiate_protocol_version("2025-06-18") == "2025-06-18");
  CHECK(negotiate_protocol_version("2025-03-26") == "2025-03-26");
  CHECK(negotiate_protocol_version("2024-11-05") == "2025-11-25");
  CHECK(negotiate_protocol_version("") == "2025-11-25");
  CHECK(protocol_allows_batches("2025-03-26"));
  CHECK_FALSE(protocol_allows_batches("2025-06-18"));
  CHECK_FALSE(protocol_allows_batches("2025-11-25"));
}

TEST_CASE("protocol: tools and results keep unknown fields and mirror structured output",
          "[mcp][unit]") {
  Json wire = {{"name", "t"},
               {"description", "d"},
               {"inputSchema", {{"type", "object"}}},
               {"annotations", {{"readOnlyHint", true}}},
               {"icons", Json::array({{{"src", "x"}}})}};
  auto tool = Tool::from_json(wire);
  REQUIRE(tool.ok());
  CHECK(tool->name == "t");
  CHECK(tool->annotations == Json{{"readOnlyHint", true}});
  CHECK(tool->to_json() == wire);
  CHECK_FALSE(Tool::from_json(Json{{"name", ""}, {"inputSchema", Json::object()}}).ok());
  CHECK_FALSE(Tool::from_json(Json{{"name", "x"}}).ok());

  ToolResult structured = ToolResult::structured_result(Json{{"a", 1}});
  Json j = structured.to_json();
  CHECK(j["structuredContent"] == Json{{"a", 1}});
  REQUIRE(j["content"].size() == 1);
  CHECK(j["content"][0] == text_content(R"({"a":1})"));
  CHECK_FALSE(j.contains("isError"));

  Json err = ToolResult::error("boom").to_json();
  CHECK(err["isError"] == true);
  CHECK(err["content"][0]["text"] == "boom");

  Json image = image_content(std::string("\x89PNG", 4), "image/png");
  CHECK(image == Json{{"type", "image"}, {"data", "iVBORw=="}, {"mimeType", "image/png"}});

  auto back = ToolResult::from_json(Json{
      {"content", Json::array({text_content("x")})}, {"isError", true}, {"_meta", {{"k", 1}}}});
  REQUIRE(back.ok());
  CHECK(back->is_error);
  CHECK(back->to_json()["_meta"] == Json{{"k", 1}});
  CHECK_FALSE(ToolResult::from_json(Json{{"content", 1}}).ok());
}

}  // namespace
}  // namespace cb::mcp
