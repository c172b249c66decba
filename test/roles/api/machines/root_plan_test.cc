#include "roles/api/machines/local_internal.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdlib.h>
#include <string>
#include <vector>

namespace cb::api::machines::internal {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "cb-plan-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data()) != nullptr ? pattern : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Index of the first op of |kind| at |target|, or -1.
int find_op(const std::vector<MountOp>& ops, MountOpKind kind, const fs::path& target) {
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == kind && ops[i].target == target.string()) return static_cast<int>(i);
  }
  return -1;
}

bool targets(const std::vector<MountOp>& ops, const fs::path& target) {
  return std::any_of(ops.begin(), ops.end(),
                     [&](const MountOp& op) { return op.target == target.string(); });
}

TEST_CASE("plan_box_root: the host is bound read-only around writable box paths",
          "[api][machines][unit]") {
  TempDir dir;
  REQUIRE(!dir.path().empty());
  fs::path host = dir.path() / "host";
  for (const char* d : {"etc", "usr/bin", "var/lib/dpkg", "var/log", "home/alice", "proc", "tmp",
                        "srv/data/boxes/b1"}) {
    fs::create_directories(host / d);
  }
  std::ofstream(host / "vmlinuz") << "kernel";
  fs::create_symlink("usr/bin", host / "bin");

  RootLayout layout;
  layout.host_root = host;
  layout.new_root = dir.path() / "root";
  layout.box_dir = dir.path() / "box";
  layout.hidden = {"/srv/data", "/tmp/hidden-under-a-fresh-mount", "/"};
  auto planned = plan_box_root(layout);
  REQUIRE(planned.ok());
  const auto& ops = *planned;
  const fs::path& t = layout.new_root;

  int ro = find_op(ops, MountOpKind::kReadOnlyTree, t);
  REQUIRE(ro >= 0);

  SECTION("host entries are bound, symlinks and files recreated, all before kReadOnlyTree") {
    int etc = find_op(ops, MountOpKind::kBindHost, t / "etc");
    REQUIRE(etc >= 0);
    CHECK(ops[etc].source == (host / "etc").string());
    CHECK(ops[etc].optional);
    CHECK(etc < ro);
    int bin = find_op(ops, MountOpKind::kSymlink, t / "bin");
    REQUIRE(bin >= 0);
    CHECK(ops[bin].source == "usr/bin");
    CHECK(find_op(ops, MountOpKind::kTouch, t / "vmlinuz") >= 0);
    CHECK(find_op(ops, MountOpKind::kBindHost, t / "vmlinuz") >= 0);
    for (const auto& op : ops) {
      if (op.kind == MountOpKind::kBindHost) CHECK(find_op(ops, op.kind, op.target) < ro);
    }
  }

  SECTION("directories on the way to a box path are expanded entry by entry") {
    CHECK(find_op(ops, MountOpKind::kMkdir, t / "var") >= 0);
    CHECK(find_op(ops, MountOpKind::kBindHost, t / "var") < 0);
    CHECK(find_op(ops, MountOpKind::kBindHost, t / "var/log") >= 0);
    CHECK(find_op(ops, MountOpKind::kBindHost, t / "var/lib/dpkg") >= 0);
    int agent = find_op(ops, MountOpKind::kBindWritable, t / "var/lib/cocoonbox-agent");
    REQUIRE(agent > ro);
    CHECK(ops[agent].source == (layout.box_dir / "agent").string());
    CHECK(find_op(ops, MountOpKind::kMkdir, t / "var/lib/cocoonbox-agent") < ro);
  }

  SECTION("writable mounts come after kReadOnlyTree, parents before children") {
    int dev = find_op(ops, MountOpKind::kBindWritable, t / "dev");
    int shm = find_op(ops, MountOpKind::kTmpfs, t / "dev/shm");
    int run = find_op(ops, MountOpKind::kTmpfs, t / "run");
    int run_dir = find_op(ops, MountOpKind::kMkdir, t / "run/cocoonbox");
    int run_bind = find_op(ops, MountOpKind::kBindWritable, t / "run/cocoonbox");
    int proc = find_op(ops, MountOpKind::kProc, t / "proc");
    int tmp = find_op(ops, MountOpKind::kTmpfs, t / "tmp");
    int ws = find_op(ops, MountOpKind::kBindWritable, t / "workspace");
    for (int i : {dev, shm, run, run_dir, run_bind, proc, tmp, ws}) CHECK(i > ro);
    CHECK(dev < shm);
    CHECK(run < run_dir);
    CHECK(run_dir < run_bind);
    CHECK(ops[run_bind].source == (layout.box_dir / "run").string());
    CHECK(ops[ws].source == (layout.box_dir / "workspace").string());
    // The host's /proc and /tmp are never bound.
    CHECK(find_op(ops, MountOpKind::kBindHost, t / "proc") < 0);
    CHECK(find_op(ops, MountOpKind::kBindHost, t / "tmp") < 0);
  }

  SECTION("/home shows only the box's user, and hidden paths are empty") {
    CHECK(find_op(ops, MountOpKind::kMkdir, t / "home") >= 0);
    CHECK(!targets(ops, t / "home/alice"));
    CHECK(find_op(ops, MountOpKind::kBindWritable, t / "home/user") > ro);
    CHECK(find_op(ops, MountOpKind::kMkdir, t / "srv/data") >= 0);
    CHECK(!targets(ops, t / "srv/data/boxes"));
    CHECK(!targets(ops, t / "tmp/hidden-under-a-fresh-mount"));
  }
}

TEST_CASE("plan_box_root: relative paths are refused", "[api][machines][unit]") {
  RootLayout layout;
  layout.new_root = "root";
  layout.box_dir = "/box";
  auto planned = plan_box_root(layout);
  REQUIRE(!planned.ok());
  CHECK(planned.status().code() == Code::kInvalidArgument);
}

}  // namespace
}  // namespace cb::api::machines::internal
