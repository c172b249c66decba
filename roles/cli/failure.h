#pragma once
// The CLI commands' exit codes (README.md) and the error a command ends with.
// Internal to roles/cli.

#include <string>

namespace cb::cli {

constexpr int kOk = 0;
constexpr int kError = 1;  // the command failed
constexpr int kUsage = 2;  // the command line was wrong (a bad flag, value or name)

// An error for the user: the message and the exit code it maps to.
struct Failure {
  std::string message;
  int code = kError;
};

}  // namespace cb::cli
