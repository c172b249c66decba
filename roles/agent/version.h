#pragma once
// The agent's version as Hello reports it: the project version (CMake PROJECT_VERSION), passed
// to this library alone as the CB_AGENT_VERSION compile definition.

#include <string_view>

namespace cb::agent {

std::string_view agent_version();

}  // namespace cb::agent
