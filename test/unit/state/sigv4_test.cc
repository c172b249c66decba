#include "state/sigv4.h"

#include "crypto/hash.h"

#include <catch2/catch.hpp>

#include <string>

namespace cb::state::sigv4 {
namespace {

// The signature at the end of an Authorization header value.
std::string signature_of(const std::string& authorization) {
  size_t at = authorization.rfind("Signature=");
  return at == std::string::npos ? "" : authorization.substr(at + 10);
}

// AWS's general SigV4 examples: the signing-key walkthrough, IAM ListUsers and the
// aws-sig-v4-test-suite ("get-vanilla", "get-vanilla-query-order-key-case").
const Credentials kSuiteCredentials{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};

// The S3 API reference examples ("Examples of Signature Calculations": GET Object, PUT Object,
// GET Bucket Lifecycle, Get Bucket (List Objects), and the presigned URL example).
const Credentials kS3Credentials{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                                 ""};
const Signing kS3Signing{"us-east-1", "s3", "20130524T000000Z"};

TEST_CASE("sigv4: the signing key of the documented walkthrough", "[state][unit]") {
  Signing s{"us-east-1", "iam", "20150830T123600Z"};
  CHECK(crypto::hex_encode(signing_key(kSuiteCredentials.secret_access_key, s)) ==
        "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9");
}

TEST_CASE("sigv4: IAM ListUsers example (canonical request, string to sign, signature)",
          "[state][unit]") {
  Request r;
  r.method = "GET";
  r.path = "/";
  r.query = {{"Action", "ListUsers"}, {"Version", "2010-05-08"}};
  r.headers = {{"Host", "iam.amazonaws.com"},
               {"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"}};
  Signing s{"us-east-1", "iam", "20150830T123600Z"};
  auto auth = sign(r, kSuiteCredentials, s);
  REQUIRE(auth.ok());
  auto canonical = canonical_request(r);
  REQUIRE(canonical.ok());
  CHECK(*canonical ==
        "GET\n/\nAction=ListUsers&Version=2010-05-08\n"
        "content-type:application/x-www-form-urlencoded; charset=utf-8\n"
        "host:iam.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
        "content-type;host;x-amz-date\n"
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(string_to_sign(s, *canonical) ==
        "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/iam/aws4_request\n"
        "f536975d06c0309214f805bb90ccff089219ecd68b2577efef23edd43b7e1a59");
  CHECK(signature_of(*auth) == "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7");
}

TEST_CASE("sigv4: test suite get-vanilla and get-vanilla-query-order-key-case", "[state][unit]") {
  Signing s{"us-east-1", "service", "20150830T123600Z"};
  Request r;
  r.method = "GET";
  r.path = "/";
  r.headers = {{"Host", "example.amazonaws.com"}};
  auto auth = sign(r, kSuiteCredentials, s);
  REQUIRE(auth.ok());
  CHECK(*auth ==
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
        "SignedHeaders=host;x-amz-date, "
        "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");

  Request q;
  q.method = "GET";
  q.path = "/";
  q.query = {{"Param2", "value2"}, {"Param1", "value1"}};
  q.headers = {{"Host", "example.amazonaws.com"}};
  auto query_auth = sign(q, kSuiteCredentials, s);
  REQUIRE(query_auth.ok());
  CHECK(signature_of(*query_auth) ==
        "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
}

TEST_CASE("sigv4: S3 GET Object with a Range header", "[state][unit]") {
  Request r;
  r.method = "GET";
  r.path = "/test.txt";
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"}, {"Range", "bytes=0-9"}};
  auto auth = sign(r, kS3Credentials, kS3Signing);
  REQUIRE(auth.ok());
  CHECK(*auth ==
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  // sign() added the headers the request must carry.
  CHECK(r.headers.size() == 4);
}

TEST_CASE("sigv4: S3 PUT Object with a body and a '$' in the key", "[state][unit]") {
  Request r;
  r.method = "PUT";
  r.path = "/test$file.text";
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
               {"x-amz-storage-class", "REDUCED_REDUNDANCY"}};
  r.payload_sha256 = crypto::hex_encode(crypto::sha256("Welcome to Amazon S3."));
  CHECK(r.payload_sha256 == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  auto auth = sign(r, kS3Credentials, kS3Signing);
  REQUIRE(auth.ok());
  CHECK(auth->find("SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class") !=
        std::string::npos);
  CHECK(signature_of(*auth) == "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
  CHECK(canonical_request(r)->rfind("PUT\n/test%24file.text\n\n", 0) == 0);
}

TEST_CASE("sigv4: S3 GET Bucket Lifecycle and List Objects (query strings)", "[state][unit]") {
  Request lifecycle;
  lifecycle.method = "GET";
  lifecycle.path = "/";
  lifecycle.query = {{"lifecycle", ""}};
  lifecycle.headers = {{"Host", "examplebucket.s3.amazonaws.com"}};
  auto auth = sign(lifecycle, kS3Credentials, kS3Signing);
  REQUIRE(auth.ok());
  CHECK(signature_of(*auth) == "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");

  Request list;
  list.method = "GET";
  list.path = "/";
  list.query = {{"prefix", "J"}, {"max-keys", "2"}};
  list.headers = {{"Host", "examplebucket.s3.amazonaws.com"}};
  auto list_auth = sign(list, kS3Credentials, kS3Signing);
  REQUIRE(list_auth.ok());
  CHECK(signature_of(*list_auth) ==
        "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST_CASE("sigv4: the S3 presigned URL example", "[state][unit]") {
  Request r;
  r.method = "GET";
  r.path = "/test.txt";
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"}};
  auto url = presign(r, "https", kS3Credentials, kS3Signing, 86400);
  REQUIRE(url.ok());
  CHECK(*url ==
        "https://examplebucket.s3.amazonaws.com/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
        "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
        "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");
}

TEST_CASE("sigv4: a presigned URL binds method, key, expiry and session token", "[state][unit]") {
  Request r;
  r.method = "PUT";
  r.path = "/bucket/u1/chunks/ab/abcdef";
  r.headers = {{"host", "127.0.0.1:7480"}};
  auto base = presign(r, "http", kS3Credentials, kS3Signing, 600);
  REQUIRE(base.ok());
  CHECK(base->rfind("http://127.0.0.1:7480/bucket/u1/chunks/ab/abcdef?", 0) == 0);
  Request get = r;
  get.method = "GET";
  CHECK(*presign(get, "http", kS3Credentials, kS3Signing, 600) != *base);
  CHECK(*presign(r, "http", kS3Credentials, kS3Signing, 601) != *base);
  Credentials temporary = kS3Credentials;
  temporary.session_token = "tok/en+=";
  auto with_token = presign(r, "http", temporary, kS3Signing, 600);
  REQUIRE(with_token.ok());
  CHECK(with_token->find("X-Amz-Security-Token=tok%2Fen%2B%3D") != std::string::npos);
  CHECK(presign(r, "http", kS3Credentials, kS3Signing, 0).status().code() ==
        Code::kInvalidArgument);
  CHECK(presign(r, "http", kS3Credentials, kS3Signing, kMaxPresignSeconds + 1).status().code() ==
        Code::kInvalidArgument);
}

TEST_CASE("sigv4: encoding, dates and bad input", "[state][unit]") {
  CHECK(uri_encode("a b/c~d%\xc3\xa9", false) == "a%20b/c~d%25%C3%A9");
  CHECK(uri_encode("a/b+c=d&e", true) == "a%2Fb%2Bc%3Dd%26e");
  CHECK(uri_encode("A-z_0.9~", true) == "A-z_0.9~");
  CHECK(amz_date(std::chrono::system_clock::time_point(std::chrono::seconds(1369353600))) ==
        "20130524T000000Z");
  Request r;
  r.method = "GET";
  r.path = "no-slash";
  r.headers = {{"Host", "h"}};
  CHECK(sign(r, kS3Credentials, kS3Signing).status().code() == Code::kInvalidArgument);
  r.path = "/";
  r.headers = {{"Range", "bytes=0-1"}};
  CHECK(sign(r, kS3Credentials, kS3Signing).status().code() == Code::kInvalidArgument);
  r.headers = {{"Host", "h"}};
  Signing bad = kS3Signing;
  bad.amz_date = "2013-05-24";
  CHECK(sign(r, kS3Credentials, bad).status().code() == Code::kInvalidArgument);
  // Header values are trimmed and inner runs of spaces folded.
  Request spaced;
  spaced.method = "GET";
  spaced.path = "/";
  spaced.headers = {{"Host", "h"}, {"X-Custom", "  a   b  "}};
  CHECK(canonical_request(spaced)->find("\nx-custom:a b\n") != std::string::npos);
}

}  // namespace
}  // namespace cb::state::sigv4
