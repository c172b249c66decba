// The S3 backend's parts that need no S3 server: the XML parsers, option and URL checks,
// presigned URL shape, and the retry and error policy against a local HTTP server that
// answers with scripted failures. The backend against a real S3 server (radosgw) is
// test/state/s3_radosgw_test.cc.

#include "base/base64.h"
#include "crypto/hash.h"
#include "http/server.h"
#include "net/asio.h"
#include "state/fs_store.h"
#include "state/s3_store.h"
#include "state/s3_xml.h"
#include "state/store_url.h"
#include "support/temp_dir.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cb::state {
namespace {

using namespace std::chrono_literals;

TEST_CASE("s3xml: parses a ListObjectsV2 result with entities, namespaces and comments",
          "[state][s3][unit]") {
  const std::string xml =
      "\xEF\xBB\xBF<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<!-- a comment -->\n"
      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<Name>b</Name><Prefix>p/</Prefix><KeyCount>3</KeyCount><MaxKeys>3</MaxKeys>"
      "<IsTruncated>true</IsTruncated>"
      "<Contents><Key>p/a&amp;b</Key><LastModified>2026-11-30T00:00:00.000Z</LastModified>"
      "<ETag>&quot;9a0364b9e99bb480dd25e1f0284c8555&quot;</ETag><Size>12</Size>"
      "<StorageClass>STANDARD</StorageClass></Contents>"
      "<Contents><Key><![CDATA[p/<c>]]></Key><Size>0</Size></Contents>"
      "<Contents><s3:Key xmlns:s3='x'>p/&#x41;&#66;</s3:Key><Size> 18446744073709551615 </Size>"
      "<Owner/></Contents>"
      "<NextContinuationToken>tok</NextContinuationToken>"
      "</ListBucketResult>\n";
  auto r = s3xml::parse_list_result(xml);
  REQUIRE(r.ok());
  CHECK(r->truncated);
  REQUIRE(r->objects.size() == 3);
  CHECK(r->objects[0] == ObjectInfo{"p/a&b", 12});
  CHECK(r->objects[1] == ObjectInfo{"p/<c>", 0});
  CHECK(r->objects[2] == ObjectInfo{"p/AB", UINT64_MAX});

  auto empty = s3xml::parse_list_result(
      "<ListBucketResult><IsTruncated>false</IsTruncated><KeyCount>0</KeyCount>"
      "</ListBucketResult>");
  REQUIRE(empty.ok());
  CHECK(!empty->truncated);
  CHECK(empty->objects.empty());
}

TEST_CASE("s3xml: refuses malformed and hostile documents", "[state][s3][unit]") {
  const char* bad[] = {
      "",
      "   ",
      "<ListBucketResult>",
      "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResul>",
      "<ListBucketResult></ListBucketResult>",  // no IsTruncated
      "<ListBucketResult><IsTruncated>maybe</IsTruncated></ListBucketResult>",
      "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Size>1</Size></Contents>"
      "</ListBucketResult>",
      "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>k</Key></Contents>"
      "</ListBucketResult>",
      "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>k</Key>"
      "<Size>18446744073709551616</Size></Contents></ListBucketResult>",
      "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>k</Key>"
      "<Size>-1</Size></Contents></ListBucketResult>",
      "<!DOCTYPE x [<!ENTITY a \"b\">]><ListBucketResult><IsTruncated>&a;</IsTruncated>"
      "</ListBucketResult>",
      "<ListBucketResult><IsTruncated>false&bogus;</IsTruncated></ListBucketResult>",
      "<ListBucketResult><IsTruncated>&#0;</IsTruncated></ListBucketResult>",
      "<ListBucketResult><IsTruncated>&#xD800;</IsTruncated></ListBucketResult>",
      "<ListBucketResult><IsTruncated>&#x110000;</IsTruncated></ListBucketResult>",
      "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult><Second/>",
      "text<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>",
      "<ListBucketResult a=b><IsTruncated>false</IsTruncated></ListBucketResult>",
      "<ListBucketResult a=\"<\"><IsTruncated>false</IsTruncated></ListBucketResult>",
      "<Error><Code>x</Code></Error>",
      "<ListBucketResult><IsTruncated>false</IsTruncated><!-- open",
      "<ListBucketResult><![CDATA[ open </ListBucketResult>",
  };
  for (const char* xml : bad) {
    INFO(xml);
    CHECK(s3xml::parse_list_result(xml).status().code() == Code::kInvalidArgument);
  }
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "<a>";
  CHECK(s3xml::parse_document(deep).status().code() == Code::kInvalidArgument);
  std::string ok_depth;
  for (size_t i = 0; i < s3xml::kMaxXmlDepth; ++i) ok_depth += "<a>";
  for (size_t i = 0; i < s3xml::kMaxXmlDepth; ++i) ok_depth += "</a>";
  CHECK(s3xml::parse_document(ok_depth).ok());
}

TEST_CASE("s3xml: error documents, delete results and the delete request", "[state][s3][unit]") {
  auto e = s3xml::parse_error(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SignatureDoesNotMatch</Code>"
      "<Message></Message><RequestId>tx1</RequestId><HostId>h</HostId></Error>");
  REQUIRE(e.ok());
  CHECK(e->code == "SignatureDoesNotMatch");
  CHECK(e->message.empty());
  CHECK(s3xml::parse_error("<ListBucketResult/>").status().code() == Code::kInvalidArgument);

  auto d = s3xml::parse_delete_result(
      "<DeleteResult><Deleted><Key>a</Key></Deleted><Error><Key>b&amp;c</Key>"
      "<Code>AccessDenied</Code><Message>no</Message></Error></DeleteResult>");
  REQUIRE(d.ok());
  REQUIRE(d->size() == 1);
  CHECK((*d)[0].key == "b&c");
  CHECK((*d)[0].code == "AccessDenied");
  CHECK((*d)[0].message == "no");
  auto quiet = s3xml::parse_delete_result("<DeleteResult/>");
  REQUIRE(quiet.ok());
  CHECK(quiet->empty());

  std::vector<std::string> keys = {"a/b", "x<&>'\"y"};
  std::string body = s3xml::delete_request_body(keys);
  CHECK(body ==
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Delete><Quiet>true</Quiet>"
        "<Object><Key>a/b</Key></Object>"
        "<Object><Key>x&lt;&amp;&gt;&apos;&quot;y</Key></Object></Delete>");
  // What we write, we read back the same.
  auto parsed = s3xml::parse_document(body);
  REQUIRE(parsed.ok());
  REQUIRE(parsed->children.size() == 3);
  CHECK(parsed->children[2].child("Key")->text == keys[1]);
}

S3Store::Options options_for(uint16_t port) {
  S3Store::Options o;
  o.endpoint = "http://127.0.0.1:" + std::to_string(port);
  o.bucket = "bucket";
  o.prefix = "pre/fix";
  o.access_key_id = "AKIDEXAMPLE";
  o.secret_access_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
  o.backoff_base = 1ms;
  o.request_timeout = 10s;
  return o;
}

TEST_CASE("S3Store: open checks its options", "[state][s3][unit]") {
  CHECK(S3Store::open(options_for(9000)).ok());
  auto with = [](auto change) {
    S3Store::Options o = options_for(9000);
    change(o);
    return S3Store::open(std::move(o)).status().code();
  };
  CHECK(with([](auto& o) { o.endpoint = "ftp://x"; }) == Code::kInvalidArgument);
  CHECK(with([](auto& o) { o.endpoint = "http://"; }) == Code::kInvalidArgument);
  CHECK(with([](auto& o) { o.endpoint = "http://h:99999"; }) == Code::kInvalidArgument);
  CHECK(with([](auto& o) { o.endpoint = "http://h/path"; }) == Code::kInvalidArgument);
  CHECK(with([](auto& o) { o.endpoint = "http://u@h"; }) == Code::kInvalidArgument);
  CHECK(with([](auto& o) { o.endpoint = "http://[::1]:9000/"; }) == Code::kOk);
  CHECK(with([](auto& o) { o.endpoint = "https://s3.example.com"; }) == Code::kOk);
  CHECK(with([](auto& o) { o.bucket = "Upper"; }) == Code::kInvalidArgument);
  CHECK(with([](auto& o) { o.bucket = "ab"; }) == Code::kInvalidArgument);
  CHECK(with([](auto& o) { o.prefix = "a//b"; }) == Code::kInvalidArgument);
  CHECK(with([](auto& o) { o.secret_access_key = ""; }) == Code::kInvalidArgument);
  CHECK(with([](auto& o) { o.access_key_id = ""; }) == Code::kInvalidArgument);
  CHECK(with([](auto& o) { o.max_attempts = 0; }) == Code::kInvalidArgument);
}

TEST_CASE("S3Store: presigned URLs are path-style, scoped and never carry the secret",
          "[state][s3][unit]") {
  auto store = std::move(S3Store::open(options_for(9000))).value();
  const auto at = std::chrono::system_clock::time_point(std::chrono::seconds(1'764'489'600));
  auto get = store->presign_get("u/chunks/ab/abcd", 600s, at);
  REQUIRE(get.ok());
  CHECK(get->starts_with("http://127.0.0.1:9000/bucket/pre/fix/u/chunks/ab/abcd?"));
  CHECK(get->find("X-Amz-Algorithm=AWS4-HMAC-SHA256") != std::string::npos);
  CHECK(get->find("X-Amz-Credential=AKIDEXAMPLE%2F20251130%2Fus-east-1%2Fs3%2Faws4_request") !=
        std::string::npos);
  CHECK(get->find("X-Amz-Date=20251130T080000Z") != std::string::npos);
  CHECK(get->find("X-Amz-Expires=600") != std::string::npos);
  CHECK(get->find("X-Amz-SignedHeaders=host") != std::string::npos);
  CHECK(get->find("X-Amz-Signature=") != std::string::npos);
  CHECK(get->find("wJalr") == std::string::npos);
  auto put = store->presign_put("u/chunks/ab/abcd", 600s, at);
  REQUIRE(put.ok());
  CHECK(*put != *get);  // the method is signed
  CHECK(store->presign_get("../x", 600s, at).status().code() == Code::kInvalidArgument);
  CHECK(store->presign_get("u/k", 0s, at).status().code() == Code::kInvalidArgument);
  CHECK(store->presign_get("u/k", std::chrono::seconds(8 * 24 * 3600), at).status().code() ==
        Code::kInvalidArgument);
}

TEST_CASE("open_store_url: file and s3 URLs, and what it refuses", "[state][s3][unit]") {
  test::TempDir dir;
  auto fs = open_store_url("file://" + (dir.path() / "store").string());
  REQUIRE(fs.ok());
  REQUIRE((*fs)->put("a/b", "x").ok());
  CHECK(std::filesystem::exists(dir.path() / "store/a/b"));

  {
    std::ofstream secret(dir.path() / "secret");
    secret << "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY\n";
  }
  const std::string s3 =
      "s3://bucket/pre/fix?endpoint=http%3A%2F%2F127.0.0.1%3A9000"
      "&region=eu-west-1&access_key=AKIDEXAMPLE&secret_file=" +
      (dir.path() / "secret").string();
  auto store = open_store_url(s3);
  REQUIRE(store.ok());
  auto* s3store = dynamic_cast<S3Store*>(store->get());
  REQUIRE(s3store != nullptr);
  CHECK(s3store->describe() == "s3://bucket/pre/fix at http://127.0.0.1:9000");
  auto url = s3store->presign_get("k", 60s);
  REQUIRE(url.ok());
  CHECK(url->find("%2Feu-west-1%2F") != std::string::npos);

  for (const std::string& bad :
       {std::string("ftp://x"), std::string("file://relative"), std::string("file:///a?b"),
        std::string("s3://bucket?endpoint=http://h&access_key=a"),  // no secret_file
        std::string("s3://bucket?endpoint=http://h&access_key=a&secret=s"),
        std::string("s3://bucket?endpoint=http://h&access_key=a&secret_file=/x&bogus=1"),
        std::string("s3://bucket?endpoint=http://h&endpoint=http://g&access_key=a"),
        std::string("s3://bucket?endpoint=%zz")}) {
    INFO(bad);
    CHECK(open_store_url(bad).status().code() == Code::kInvalidArgument);
  }
  CHECK(open_store_url("s3://bucket?endpoint=http://h&access_key=a&secret_file=" +
                       (dir.path() / "none").string())
            .status()
            .code() == Code::kNotFound);
}

// A local HTTP server that answers each request with the next scripted response (status and
// body; status 0 drops the connection without answering) and records the requests.
class ScriptedServer {
 public:
  struct Reply {
    int status;
    std::string body;
  };
  struct Seen {
    std::string method;
    std::string target;
    http::Headers headers;
    std::string body;
  };

  explicit ScriptedServer(std::vector<Reply> script) : script_(std::move(script)) {
    router_.set_fallback([this](http::ServerRequest& req) { return serve(req); });
    server_ = std::make_unique<http::Server>(io_.get_executor(), router_, http::ServerOptions());
    REQUIRE(server_->listen_tcp("127.0.0.1", 0).ok());
    server_->start();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~ScriptedServer() {
    std::promise<void> done;
    asio::co_spawn(io_, stop(), [&done](std::exception_ptr) { done.set_value(); });
    done.get_future().wait();
    io_.stop();
    thread_.join();
  }

  uint16_t port() const { return server_->port(); }
  std::vector<Seen> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  asio::awaitable<void> stop() { co_await server_->shutdown(net::after(2s)); }

  asio::awaitable<void> serve(http::ServerRequest& req) {
    Seen s;
    s.method = req.head().method;
    s.target = req.head().path;
    s.headers = req.head().headers;
    while (true) {
      auto piece = co_await req.read();
      if (!piece.ok() || piece->empty()) break;
      s.body += *piece;
    }
    size_t n;
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen_.push_back(std::move(s));
      n = seen_.size() - 1;
    }
    const Reply& reply = script_[std::min(n, script_.size() - 1)];
    if (reply.status == 0) {
      req.reset();
      co_return;
    }
    std::string type = "application/xml";
    (void)co_await http::respond(req, reply.status, type, reply.body);
  }

  std::vector<Reply> script_;
  asio::io_context io_;
  http::Router router_;
  std::unique_ptr<http::Server> server_;
  std::thread thread_;
  std::mutex mu_;
  std::vector<Seen> seen_;  // guarded by mu_
};

std::string error_xml(const std::string& code) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>" + code +
         "</Code><Message>scripted " + code + "</Message></Error>";
}

TEST_CASE("S3Store: 5xx, 429, SlowDown and dropped connections are retried", "[state][s3][unit]") {
  ScriptedServer server({{503, error_xml("SlowDown")},
                         {500, error_xml("InternalError")},
                         {0, ""},
                         {429, ""},
                         {200, "the object"}});
  S3Store::Options o = options_for(server.port());
  o.max_attempts = 5;
  auto store = std::move(S3Store::open(std::move(o))).value();
  auto got = store->get("u/k");
  INFO(got.status().to_string());
  REQUIRE(got.ok());
  CHECK(*got == "the object");
  auto seen = server.seen();
  REQUIRE(seen.size() == 5);
  for (const auto& s : seen) {
    CHECK(s.method == "GET");
    CHECK(s.target == "/bucket/pre/fix/u/k");
  }
  // Each attempt is signed anew.
  const std::string* auth = http::find_header(seen[0].headers, "authorization");
  REQUIRE(auth != nullptr);
  CHECK(auth->starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"));
  CHECK(auth->find("SignedHeaders=host;x-amz-content-sha256;x-amz-date") != std::string::npos);
}

TEST_CASE("S3Store: gives up after max_attempts with kUnavailable naming S3's code",
          "[state][s3][unit]") {
  ScriptedServer server({{503, error_xml("SlowDown")}});
  S3Store::Options o = options_for(server.port());
  o.max_attempts = 3;
  auto store = std::move(S3Store::open(std::move(o))).value();
  Status put = store->put("u/k", "data");
  CHECK(put.code() == Code::kUnavailable);
  CHECK(put.message().find("s3 PUT pre/fix/u/k: 503 SlowDown: scripted SlowDown") !=
        std::string::npos);
  CHECK(server.seen().size() == 3);
}

TEST_CASE("S3Store: 4xx are not retried and map to clear errors", "[state][s3][unit]") {
  struct Case {
    int status;
    std::string code;
    Code want;
  };
  for (const Case& c : {Case{403, "SignatureDoesNotMatch", Code::kPermissionDenied},
                        Case{403, "InvalidAccessKeyId", Code::kPermissionDenied},
                        Case{403, "RequestTimeTooSkewed", Code::kPermissionDenied},
                        Case{404, "NoSuchKey", Code::kNotFound},
                        Case{404, "NoSuchBucket", Code::kFailedPrecondition},
                        Case{400, "EntityTooLarge", Code::kResourceExhausted},
                        Case{400, "InvalidRequest", Code::kInternal}}) {
    INFO(c.code);
    ScriptedServer server({{c.status, error_xml(c.code)}, {200, "never"}});
    auto store = std::move(S3Store::open(options_for(server.port()))).value();
    auto got = store->get("u/k");
    CHECK(got.status().code() == c.want);
    CHECK(got.status().message().find(std::to_string(c.status) + " " + c.code) !=
          std::string::npos);
    CHECK(server.seen().size() == 1);
  }
}

TEST_CASE("S3Store: requests carry what S3 checks", "[state][s3][unit]") {
  const std::string list_xml =
      "<ListBucketResult><IsTruncated>true</IsTruncated>"
      "<Contents><Key>pre/fix/u/a</Key><Size>3</Size></Contents>"
      "<Contents><Key>pre/fix/u/b</Key><Size>4</Size></Contents></ListBucketResult>";
  ScriptedServer server({{200, ""}, {200, list_xml}, {200, "<DeleteResult/>"}});
  auto store = std::move(S3Store::open(options_for(server.port()))).value();
  REQUIRE(store->put("u/a", "abc").ok());
  auto page = store->list("u/", "u/0", 2);
  REQUIRE(page.ok());
  CHECK(page->truncated);
  CHECK(page->objects == std::vector<ObjectInfo>{{"u/a", 3}, {"u/b", 4}});
  std::vector<std::string> keys = {"u/a", "u/b"};
  REQUIRE(store->delete_batch(keys).ok());

  auto seen = server.seen();
  REQUIRE(seen.size() == 3);
  CHECK(seen[0].method == "PUT");
  CHECK(seen[0].target == "/bucket/pre/fix/u/a");
  CHECK(seen[0].body == "abc");
  CHECK(*http::find_header(seen[0].headers, "x-amz-content-sha256") ==
        crypto::hex_encode(crypto::sha256("abc")));
  CHECK(*http::find_header(seen[0].headers, "host") ==
        "127.0.0.1:" + std::to_string(server.port()));

  CHECK(seen[1].method == "GET");
  CHECK(seen[1].target ==
        "/bucket?list-type=2&max-keys=2&prefix=pre%2Ffix%2Fu%2F&start-after=pre%2Ffix%2Fu%2F0");

  CHECK(seen[2].method == "POST");
  CHECK(seen[2].target == "/bucket?delete=");
  CHECK(seen[2].body ==
        s3xml::delete_request_body(std::vector<std::string>{"pre/fix/u/a", "pre/fix/u/b"}));
  const std::string* md5 = http::find_header(seen[2].headers, "content-md5");
  REQUIRE(md5 != nullptr);
  CHECK(base64_decode(*md5)->size() == 16);
}

TEST_CASE("S3Store: a list answer outside the prefix is an error, not data", "[state][s3][unit]") {
  ScriptedServer server({{200,
                          "<ListBucketResult><IsTruncated>false</IsTruncated>"
                          "<Contents><Key>elsewhere/u/a</Key><Size>3</Size></Contents>"
                          "</ListBucketResult>"}});
  auto store = std::move(S3Store::open(options_for(server.port()))).value();
  CHECK(store->list("u/", "").status().code() == Code::kInternal);
}

TEST_CASE("S3Store: no server at the endpoint is kUnavailable after the attempts",
          "[state][s3][unit]") {
  uint16_t port;
  {
    // A port that was free a moment ago; nothing listens there now.
    asio::io_context io;
    asio::ip::tcp::acceptor a(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    port = a.local_endpoint().port();
  }
  S3Store::Options o = options_for(port);
  o.max_attempts = 2;
  auto store = std::move(S3Store::open(std::move(o))).value();
  auto got = store->stat("u/k");
  CHECK(got.status().code() == Code::kUnavailable);
  CHECK(got.status().message().starts_with("s3 HEAD pre/fix/u/k"));
}

}  // namespace
}  // namespace cb::state
