// POSIX implementation of Env. Errors carry the path and strerror so a user can act on them
// ("writing ckpt/node3.ckpt.tmp: No space left on device").
#include "common/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/file_type.h"

namespace gossip {
namespace {

Status errno_status(const std::string& what, const std::string& path, int err) {
  std::string m = what + " " + path + ": " + std::strerror(err);
  if (err == ENOENT) return not_found(std::move(m));
  if (err == EACCES || err == EPERM) return permission_denied(std::move(m));
  return io_error(std::move(m));
}

// OK when nothing stands at `path` or a regular file does; FailedPrecondition otherwise (checked
// with lstat, so a symbolic link is refused rather than replaced).
Status check_replaceable(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::ok();
    return errno_status("stat of", path, errno);
  }
  if (S_ISREG(st.st_mode)) return Status::ok();
  return failed_precondition(path + " exists and is " + file_type_name(st.st_mode) +
                             ", not a regular file; refusing to replace it");
}

// Closes a descriptor on scope exit.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Result<std::string> Env::read_file(const std::string& path, std::uint64_t max_bytes) {
  const bool stdin_path = path == "-";
  const std::string name = stdin_path ? std::string("standard input") : path;
  int fd = stdin_path ? STDIN_FILENO : ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return errno_status("opening", path, errno);
  FdCloser closer{stdin_path ? -1 : fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno_status("stat of", name, errno);
  if (S_ISDIR(st.st_mode))
    return invalid_argument("expected a file but " + path + " is a directory");
  if (!stdin_path && !S_ISREG(st.st_mode)) {
    return invalid_argument("expected a regular file but " + path + " is " +
                            file_type_name(st.st_mode) +
                            " (give a regular file, or '-' for standard input)");
  }
  if (!stdin_path) {
    // O_NONBLOCK only served the open (a FIFO would have blocked it); reads of a regular file
    // do not care, but clear it anyway.
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  }
  const auto too_big = [&](std::uint64_t at_least) {
    return out_of_range(name + " is larger than the limit of " + std::to_string(max_bytes) +
                        " bytes (at least " + std::to_string(at_least) + " bytes)");
  };
  if (S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    return too_big(static_cast<std::uint64_t>(st.st_size));
  }
  std::string data;
  if (S_ISREG(st.st_mode) && st.st_size > 0) data.reserve(static_cast<std::size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("reading", name, errno);
    }
    if (n == 0) break;
    if (data.size() + static_cast<std::uint64_t>(n) > max_bytes) {
      return too_big(data.size() + static_cast<std::uint64_t>(n));
    }
    data.append(buf, static_cast<std::size_t>(n));
  }
  return data;
}

Result<std::string> Env::read_file_head(const std::string& path, std::size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return errno_status("opening", path, errno);
  FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno_status("stat of", path, errno);
  if (!S_ISREG(st.st_mode)) {
    return invalid_argument("expected a regular file but " + path + " is " +
                            file_type_name(st.st_mode));
  }
  std::string data(max_bytes, '\0');
  std::size_t got = 0;
  while (got < max_bytes) {
    ssize_t n = ::read(fd, data.data() + got, max_bytes - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("reading", path, errno);
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  data.resize(got);
  return data;
}

Status Env::write_file_atomic(const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp";
  if (Status s = check_replaceable(path); !s.is_ok()) return s;
  if (Status s = check_replaceable(tmp); !s.is_ok()) return s;
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return errno_status("creating", tmp, errno);
  {
    FdCloser closer{fd};
    const char* p = data.data();
    std::size_t left = data.size();
    while (left > 0) {
      ssize_t n = ::write(fd, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        ::unlink(tmp.c_str());
        return errno_status("writing", tmp, err);
      }
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0) {
      int err = errno;
      ::unlink(tmp.c_str());
      return errno_status("fsync of", tmp, err);
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return errno_status("renaming " + tmp + " to", path, err);
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty())
    dir.assign(1, '.');  // not = ".": GCC 12 warns -Wrestrict there (a false positive)
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return errno_status("opening directory", dir, errno);
  FdCloser dcloser{dfd};
  if (::fsync(dfd) != 0) return errno_status("fsync of directory", dir, errno);
  return Status::ok();
}

bool Env::file_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

Status Env::remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0) return errno_status("removing", path, errno);
  return Status::ok();
}

Status Env::rename_file(const std::string& from, const std::string& to) {
  if (file_exists(to)) return failed_precondition(to + " exists; not replacing it with " + from);
  if (::rename(from.c_str(), to.c_str()) != 0)
    return errno_status("renaming " + from + " to", to, errno);
  return Status::ok();
}

Status Env::create_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return io_error("creating directory " + path + ": " + ec.message());
  return Status::ok();
}

Result<std::vector<std::string>> Env::list_dir(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return errno_status("listing", path, errno);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

Env& Env::system() {
  static Env env;
  return env;
}

}  // namespace gossip
