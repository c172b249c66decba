#pragma once
// Failpoints: named places in the code where a test can make a process stop, to check what
// a crash at exactly that moment leaves behind (an api killed in the middle of an operation).
//
//   COCOONBOX_FAILPOINTS="boxes.ensure.started=pause,boxes.hibernate.frozen=pause"
//
// The variable is read once, at the first query. A name not listed is off. Production code
// asks failpoint_action("name") at the point and acts on the answer itself (the api pauses the
// operation that reached it; nothing else is defined yet). Names are documented where used.

#include <string>
#include <string_view>

namespace cb {

// The action configured for |name| ("" when the failpoint is off).
std::string failpoint_action(std::string_view name);

// Parses a COCOONBOX_FAILPOINTS value and returns the action for |name| ("" when absent).
// Entries are `name=action` separated by commas; whitespace around them is ignored.
std::string parse_failpoint(std::string_view spec, std::string_view name);

}  // namespace cb
