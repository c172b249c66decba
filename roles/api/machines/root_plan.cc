// plan_box_root(): the box's / as a list of mount steps (README.md §Layout).
//
// The box sees the host's / read-only, plus writable mounts at paths the host may not have
// (/workspace, /home/user, /var/lib/cocoonbox-agent). A read-only tree cannot grow a mount
// point, so the root is a small tmpfs: each directory on the way to a special path is a real
// directory there, and every other host entry at that level is bound into it one by one.
// Everything else of the host comes in with whole-subtree binds.

#include "roles/api/machines/local.h"
#include "roles/api/machines/local_internal.h"

#include <fmt/format.h>

#include <map>
#include <sys/stat.h>
#include <system_error>

namespace cb::api::machines::internal {
namespace {

namespace fs = std::filesystem;

struct Node {
  enum class Kind {
    kHostDir,   // a directory of the host, expanded entry by entry
    kEmptyDir,  // a directory that shows only its explicit children
    kMount,     // a fresh or writable mount
  };
  Kind kind = Kind::kHostDir;
  MountOpKind mount = MountOpKind::kTmpfs;
  std::string source;
  std::string data;
  uint32_t mode = 0755;
  std::map<std::string, Node> children;  // ordered: the plan is deterministic
};

std::vector<std::string> components(const fs::path& in_box) {
  std::vector<std::string> out;
  for (const auto& part : in_box.relative_path()) {
    if (!part.empty() && part != ".") out.push_back(part.string());
  }
  return out;
}

void add_mount(Node& root, const fs::path& in_box, MountOpKind kind, std::string source,
               std::string data = {}) {
  Node* node = &root;
  for (const auto& part : components(in_box)) node = &node->children[part];
  node->kind = Node::Kind::kMount;
  node->mount = kind;
  node->source = std::move(source);
  node->data = std::move(data);
}

// Marks |in_box| as an empty directory unless something above it already hides the host.
void add_hidden(Node& root, const fs::path& in_box) {
  auto parts = components(in_box);
  if (parts.empty()) return;  // never hide "/"
  Node* node = &root;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (node->kind != Node::Kind::kHostDir) return;
    node = &node->children[parts[i]];
  }
  if (node->kind == Node::Kind::kHostDir) node->kind = Node::Kind::kEmptyDir;
}

class Planner {
 public:
  Planner(const RootLayout& layout) : layout_(layout) {}

  std::vector<MountOp> run(const Node& root) {
    structure(root, "/", /*parent_is_mount=*/false);
    ops_.push_back(MountOp{MountOpKind::kReadOnlyTree, {}, layout_.new_root.string(), {}});
    mounts(root, "/", /*parent_is_mount=*/false);
    return std::move(ops_);
  }

 private:
  std::string target(const fs::path& in_box) const {
    return (layout_.new_root / in_box.relative_path()).lexically_normal().string();
  }
  fs::path host(const fs::path& in_box) const {
    return (layout_.host_root / in_box.relative_path()).lexically_normal();
  }

  void mkdir(const fs::path& in_box, uint32_t mode) {
    if (in_box == "/") return;  // new_root itself exists
    ops_.push_back(MountOp{MountOpKind::kMkdir, {}, target(in_box), {}, mode});
  }

  // Phase 1: directories, symlinks and read-only binds of the host.
  void structure(const Node& node, const fs::path& in_box, bool parent_is_mount) {
    if (node.kind == Node::Kind::kMount) {
      // A mount point in the tmpfs root; inside a fresh mount it is made in phase 2.
      if (!parent_is_mount) mkdir(in_box, 0755);
      return;
    }
    std::error_code ec;
    auto st = fs::status(host(in_box), ec);
    uint32_t mode = !ec && fs::is_directory(st) ? static_cast<uint32_t>(st.permissions()) : 0755;
    mkdir(in_box, mode);
    if (node.kind == Node::Kind::kHostDir) expand(node, in_box);
    for (const auto& [name, child] : node.children) structure(child, in_box / name, false);
  }

  // Every host entry of |in_box| that the node does not replace.
  void expand(const Node& node, const fs::path& in_box) {
    std::error_code ec;
    std::map<std::string, fs::directory_entry> entries;
    for (fs::directory_iterator it(host(in_box), ec), end; !ec && it != end; it.increment(ec)) {
      entries.emplace(it->path().filename().string(), *it);
    }
    for (const auto& [name, entry] : entries) {
      if (node.children.count(name) != 0) continue;
      fs::path child = in_box / name;
      std::error_code type_ec;
      auto link_status = entry.symlink_status(type_ec);
      if (type_ec) continue;
      if (fs::is_symlink(link_status)) {
        auto link = fs::read_symlink(entry.path(), type_ec);
        if (type_ec) continue;
        ops_.push_back(MountOp{MountOpKind::kSymlink, link.string(), target(child), {}});
      } else if (fs::is_directory(link_status)) {
        mkdir(child, static_cast<uint32_t>(link_status.permissions()));
        ops_.push_back(MountOp{MountOpKind::kBindHost,
                               entry.path().string(),
                               target(child),
                               {},
                               0,
                               /*optional=*/true});
      } else {
        ops_.push_back(MountOp{MountOpKind::kTouch, {}, target(child), {}, 0644});
        ops_.push_back(MountOp{MountOpKind::kBindHost,
                               entry.path().string(),
                               target(child),
                               {},
                               0,
                               /*optional=*/true});
      }
    }
  }

  // Phase 3 (after kReadOnlyTree): the writable and fresh mounts, parents before children.
  void mounts(const Node& node, const fs::path& in_box, bool parent_is_mount) {
    bool is_mount = node.kind == Node::Kind::kMount;
    if (is_mount) {
      if (parent_is_mount) mkdir(in_box, 0755);
      ops_.push_back(MountOp{node.mount, node.source, target(in_box), node.data});
    }
    for (const auto& [name, child] : node.children) mounts(child, in_box / name, is_mount);
  }

  const RootLayout& layout_;
  std::vector<MountOp> ops_;
};

}  // namespace

Result<std::vector<MountOp>> plan_box_root(const RootLayout& layout) {
  if (!layout.host_root.is_absolute() || !layout.new_root.is_absolute() ||
      !layout.box_dir.is_absolute()) {
    return invalid_argument("plan_box_root: paths must be absolute");
  }
  Node root;
  add_mount(root, "/proc", MountOpKind::kProc, {});
  add_mount(root, "/dev", MountOpKind::kBindWritable, (layout.host_root / "dev").string());
  add_mount(root, "/dev/shm", MountOpKind::kTmpfs, {}, "mode=1777");
  add_mount(root, "/tmp", MountOpKind::kTmpfs, {}, "mode=1777");
  add_mount(root, "/run", MountOpKind::kTmpfs, {}, "mode=0755");
  // /home shows only the box's user, never the host's homes.
  add_hidden(root, "/home");
  for (const auto& p : kBoxPaths) {
    add_mount(root, fs::path(p.in_box), MountOpKind::kBindWritable,
              (layout.box_dir / p.box_dir).string());
  }
  for (const auto& h : layout.hidden) {
    if (!h.is_absolute()) {
      return invalid_argument(fmt::format("plan_box_root: hidden path {} is relative", h.string()));
    }
    add_hidden(root, h.lexically_normal());
  }
  return Planner(layout).run(root);
}

}  // namespace cb::api::machines::internal
