// libFuzzer target for the manifest decoder (src/state/manifest.h): the api decodes the
// manifest a box's agent streams back before it commits it, so these bytes come from a box.
//
// Beyond "no crash, no sanitizer report" it checks what the contract promises:
// - decode_manifest_object() fails only with kDataLoss;
// - what it accepts is valid (validate_manifest) and re-encodes to bytes that decode to the
//   same object: a whole manifest or a delta (§25.8);
// - a delta applied to a fixed base either fails with kDataLoss or gives a valid manifest,
//   and diffing the base against that result and applying it again gives the same result.
//
// Build and run: scripts/fuzz manifest_fuzz 60

#include "state/manifest.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

using cb::Code;
namespace st = cb::state;

void require(bool condition) {
  if (!condition) std::abort();
}

st::Entry entry(std::string path, st::EntryKind kind) {
  st::Entry e;
  e.path = std::move(path);
  e.kind = kind;
  e.mode = kind == st::EntryKind::kDir ? 0755 : 0644;
  if (kind == st::EntryKind::kSymlink) e.target = "t";
  return e;
}

const st::Manifest& base() {
  static const st::Manifest m = [] {
    st::Manifest b;
    b.entries = {
        entry("home/user", st::EntryKind::kDir), entry("home/user/a", st::EntryKind::kFile),
        entry("home/user/d", st::EntryKind::kDir), entry("home/user/d/l", st::EntryKind::kSymlink),
        entry("workspace", st::EntryKind::kDir)};
    return b;
  }();
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto object = st::decode_manifest_object(bytes);
  if (!object.ok()) {
    require(object.status().code() == Code::kDataLoss);
    return 0;
  }
  if (!object->delta.has_value()) {
    require(st::validate_manifest(object->whole).ok());
    auto again = st::decode_manifest_object(st::encode_manifest(object->whole));
    require(again.ok() && !again->delta.has_value() && again->whole == object->whole);
    return 0;
  }
  const st::ManifestDelta& delta = *object->delta;
  require(st::validate_manifest(delta.changes).ok());
  auto again = st::decode_manifest_object(st::encode_manifest_delta(delta));
  require(again.ok() && again->delta.has_value() && *again->delta == delta);
  require(st::decode_manifest(bytes).status().code() == Code::kFailedPrecondition);

  auto applied = st::apply_delta(base(), delta);
  if (!applied.ok()) {
    require(applied.status().code() == Code::kDataLoss);
    return 0;
  }
  require(st::validate_manifest(*applied).ok());
  auto round = st::apply_delta(base(), st::diff_manifests(base(), delta.base, *applied));
  require(round.ok() && *round == *applied);
  return 0;
}
