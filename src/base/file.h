#pragma once
// Whole-file writes that readers never see half done.

#include "base/status.h"

#include <filesystem>
#include <optional>
#include <string_view>
#include <sys/types.h>

namespace cb {

struct AtomicWriteOptions {
  // The file's permission bits. Default: an existing file keeps its own; a new one gets 0644
  // less the umask.
  std::optional<mode_t> mode;
  // Create missing parent directories (with the umask's default mode).
  bool create_parents = false;
  // When |path| is a symlink, rewrite the file it points to and keep the link. Otherwise the
  // link itself is replaced by the new file.
  bool follow_symlink = true;
};

// Writes |data| to |path| through a temporary file in the same directory: write, fchmod,
// fsync, rename over |path|, fsync of the directory. A reader sees the old file or the whole
// new one. On failure the temporary file is removed and |path| is untouched.
// Errors: kFailedPrecondition naming the path and the system's reason ("Permission denied").
Status write_file_atomic(std::filesystem::path path, std::string_view data,
                         const AtomicWriteOptions& options = {});

}  // namespace cb
