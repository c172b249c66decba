#include "client/config.h"
#include "client/endpoint.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>

namespace cb::client {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/cb-client-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path path;
};

int mode_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return static_cast<int>(st.st_mode & 0777);
}

TEST_CASE("endpoint: https anywhere, http only to loopback, normalized", "[client][unit]") {
  auto e = parse_endpoint("https://box.example.com");
  REQUIRE(e.ok());
  CHECK(e->tls);
  CHECK(e->port == 443);
  CHECK(e->url == "https://box.example.com:443");
  e = parse_endpoint("http://127.0.0.1:7443/");
  REQUIRE(e.ok());
  CHECK_FALSE(e->tls);
  CHECK(e->url == "http://127.0.0.1:7443");
  e = parse_endpoint("http://[::1]:80");
  REQUIRE(e.ok());
  CHECK(e->host == "::1");
  CHECK(e->url == "http://[::1]:80");
  CHECK(parse_endpoint("http://localhost:1").ok());

  for (const char* bad : {"http://10.0.0.1:7443", "http://box.example.com:80", "ftp://x:1",
                          "127.0.0.1:7443", "https://", "https://h:0", "https://h:70000",
                          "https://h:12x", "https://h/path", "https://u@h", "http://127.0.0.1"}) {
    INFO(bad);
    auto r = parse_endpoint(bad);
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message().find("endpoint") != std::string_view::npos);
  }
  CHECK(is_loopback_host("127.1.2.3"));
  CHECK_FALSE(is_loopback_host("128.0.0.1"));
}

TEST_CASE("config: saved 0600 in a 0700 dir, read back; missing is not logged in",
          "[client][unit]") {
  TempDir t;
  fs::path dir = t.path / "cocoonbox";
  auto none = load_config(dir);
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_value());
  ClientConfig c;
  c.endpoint = "https://box.example.com:443";
  REQUIRE(save_config(dir, c).ok());
  CHECK(mode_of(dir) == 0700);
  CHECK(mode_of(dir / "cli.json") == 0600);
  auto back = load_config(dir);
  REQUIRE(back.ok());
  REQUIRE(back->has_value());
  CHECK((*back)->endpoint == c.endpoint);
  CHECK((*back)->credential_helper.empty());

  std::ofstream(dir / "cli.json") << "{not json";
  auto bad = load_config(dir);
  CHECK(bad.status().code() == Code::kDataLoss);
  CHECK(bad.status().message().find("cli.json") != std::string_view::npos);
}

TEST_CASE("config: config_dir follows XDG_CONFIG_HOME, else HOME", "[client][unit]") {
  const char* old_xdg = std::getenv("XDG_CONFIG_HOME");
  std::string saved = old_xdg ? old_xdg : "";
  const char* old_home = std::getenv("HOME");
  std::string saved_home = old_home ? old_home : "";
  ::setenv("XDG_CONFIG_HOME", "/x/cfg", 1);
  CHECK(*config_dir() == fs::path("/x/cfg/cocoonbox"));
  ::setenv("XDG_CONFIG_HOME", "relative", 1);  // not absolute: ignored, as the spec says
  ::setenv("HOME", "/home/u", 1);
  CHECK(*config_dir() == fs::path("/home/u/.config/cocoonbox"));
  if (old_home) ::setenv("HOME", saved_home.c_str(), 1);
  if (old_xdg) {
    ::setenv("XDG_CONFIG_HOME", saved.c_str(), 1);
  } else {
    ::unsetenv("XDG_CONFIG_HOME");
  }
}

}  // namespace
}  // namespace cb::client
