#include "roles/api/machines/machines.h"

#include <fmt/format.h>

namespace cb::api::machines {

std::string_view to_string(MachineState state) {
  switch (state) {
    case MachineState::kAbsent:
      return "absent";
    case MachineState::kRunning:
      return "running";
    case MachineState::kFrozen:
      return "frozen";
    case MachineState::kExited:
      return "exited";
  }
  return "unknown";
}

Status validate_box_id(std::string_view box_id) {
  // 63: the longest DNS label (RFC 1035 §2.3.4) and within HOST_NAME_MAX (64).
  if (box_id.empty() || box_id.size() > 63) {
    return invalid_argument(fmt::format("box id \"{}\" must be 1 to 63 characters", box_id));
  }
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(box_id[0])) {
    return invalid_argument(
        fmt::format("box id \"{}\" must start with a lowercase letter or digit", box_id));
  }
  for (char c : box_id) {
    if (!alnum(c) && c != '-' && c != '_') {
      return invalid_argument(
          fmt::format("box id \"{}\" may hold only [a-z0-9_-]", box_id.substr(0, 63)));
    }
  }
  return ok_status();
}

}  // namespace cb::api::machines
