// Files DistComm writes where a setting points (DISTCOMM_DUMP_DIR, DISTCOMM_TIMELINE,
// DISTCOMM_AUTOTUNE_FILE), often in a folder others may write too (/tmp): never through a link
// someone planted there, never into a file of a predictable name made beforehand.
#pragma once

#include <string>

namespace distcomm {

// Writes `bytes` to `path` atomically: a temporary file of its own beside it (made with O_EXCL
// under a random name, so never a file or link someone planted), then renamed over `path`
// (which replaces a link there, never follows it). Returns "" when written, else why not (the
// step and the system's reason); the temporary file is gone either way.
std::string write_file_atomically(const std::string& path, const std::string& bytes);

// Opens `path` for writing, made (0644 before the umask) or emptied, as a file descriptor;
// refuses a symbolic link there (O_NOFOLLOW). -1 with errno set when it cannot; errno ELOOP for
// a link.
int open_for_writing(const std::string& path) noexcept;

}  // namespace distcomm
