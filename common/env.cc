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

namespace gossip {
namespace {

Status errno_status(const std::string& what, const std::string& path, int err) {
  std::string m = what + " " + path + ": " + std::strerror(err);
  if (err == ENOENT) return not_found(std::move(m));
  if (err == EACCES || err == EPERM) return permission_denied(std::move(m));
  return io_error(std::move(m));
}

// Closes a descriptor on scope exit.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Result<std::string> Env::read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("opening", path, errno);
  FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno_status("stat of", path, errno);
  if (S_ISDIR(st.st_mode)) return invalid_argument("expected a file but " + path + " is a directory");
  std::string data;
  if (st.st_size > 0) data.reserve(static_cast<std::size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("reading", path, errno);
    }
    if (n == 0) break;
    data.append(buf, static_cast<std::size_t>(n));
  }
  return data;
}

Status Env::write_file_atomic(const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
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
  if (dir.empty()) dir = ".";
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
