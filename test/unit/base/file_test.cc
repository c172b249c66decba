#include "base/file.h"

#include "support/temp_dir.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace cb {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

size_t entries(const fs::path& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

TEST_CASE("write_file_atomic: new, replaced, mode, parents, symlinks", "[base][unit]") {
  test::TempDir t;
  const fs::path f = t.path() / "a.txt";
  const mode_t mask = ::umask(022);
  REQUIRE(write_file_atomic(f, "one").ok());
  CHECK(slurp(f) == "one");
  CHECK(mode_of(f) == 0644);
  ::chmod(f.c_str(), 0600);
  REQUIRE(write_file_atomic(f, "two").ok());
  CHECK(slurp(f) == "two");
  CHECK(mode_of(f) == 0600);  // an existing file keeps its mode
  AtomicWriteOptions forced;
  forced.mode = 0640;
  REQUIRE(write_file_atomic(f, "three", forced).ok());
  CHECK(mode_of(f) == 0640);
  CHECK(entries(t.path()) == 1);  // no temporary file left behind

  Status st = write_file_atomic(t.path() / "x/y/z", "deep");
  CHECK(st.code() == Code::kFailedPrecondition);
  CHECK(st.message().find("x/y") != std::string::npos);
  AtomicWriteOptions parents;
  parents.create_parents = true;
  REQUIRE(write_file_atomic(t.path() / "x/y/z", "deep", parents).ok());
  CHECK(slurp(t.path() / "x/y/z") == "deep");

  fs::create_symlink("a.txt", t.path() / "link");
  REQUIRE(write_file_atomic(t.path() / "link", "through").ok());
  CHECK(fs::is_symlink(t.path() / "link"));
  CHECK(slurp(f) == "through");
  AtomicWriteOptions replace_link;
  replace_link.follow_symlink = false;
  REQUIRE(write_file_atomic(t.path() / "link", "own", replace_link).ok());
  CHECK_FALSE(fs::is_symlink(t.path() / "link"));
  CHECK(slurp(f) == "through");

  st = write_file_atomic(t.path() / "x", "dir");
  CHECK(st.code() == Code::kFailedPrecondition);
  CHECK(st.message() == (t.path() / "x").string() + " is a directory");
  ::umask(mask);
}

}  // namespace
}  // namespace cb
