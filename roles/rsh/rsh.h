#pragma once
// `cocoonbox rsh`: run a command in one's box with its stdin, stdout and stderr, through the
// api's edge and the agent's Session.Exec (seed §13.7). It is also git's and rsync's remote
// shell (args.h has the command line). Exit status: the remote command's (128+N when a signal
// N ended it), 255 for rsh's own failures, as ssh does.

#include <span>

namespace cb::rsh {

// args[0] is "rsh". Returns the exit status.
int run(std::span<char* const> args);

}  // namespace cb::rsh
