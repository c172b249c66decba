#include "roles/agent/version.h"

#ifndef CB_AGENT_VERSION
#error "CB_AGENT_VERSION must be defined by roles/agent/CMakeLists.txt"
#endif

namespace cb::agent {

std::string_view agent_version() { return CB_AGENT_VERSION; }

}  // namespace cb::agent
