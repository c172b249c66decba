#pragma once
// Looking up a local user account, for running a process as that user (proc/spawn.h).
//
// The files are read directly rather than through getpwnam(3)/NSS: the product is one static
// binary, and glibc's NSS would need to dlopen the host's libnss_*.so at run time, which a
// static binary cannot rely on inside arbitrary guest images.
//
// Thread-safety: every function may be called from any thread. They read files, so they
// block briefly; /etc/passwd and /etc/group are small local files.

#include "base/result.h"

#include <filesystem>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace cb::proc {

struct User {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;  // primary group
  std::string home;
  std::string shell;
  // Supplementary groups as initgroups(3) would set them: the primary group first, then every
  // group in the group file that lists |name| as a member.
  std::vector<gid_t> groups;
};

// Looks up |name| in /etc/passwd and /etc/group.
// Errors: kNotFound if there is no such user; kInternal if /etc/passwd cannot be read.
Result<User> lookup_user(std::string_view name);

// The first account in /etc/passwd with |uid|, with its groups as lookup_user() gives them.
// Errors: kNotFound if no entry has |uid|; kInternal if /etc/passwd cannot be read.
Result<User> lookup_uid(uid_t uid);

// As lookup_user(), reading |passwd| and |group| instead. A missing |group| file gives a user
// with only the primary group.
Result<User> lookup_user_in(std::string_view name, const std::filesystem::path& passwd,
                            const std::filesystem::path& group);

// As lookup_uid(), reading |passwd| and |group| instead.
Result<User> lookup_uid_in(uid_t uid, const std::filesystem::path& passwd,
                           const std::filesystem::path& group);

}  // namespace cb::proc
