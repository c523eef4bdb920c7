// DirectoryLock (contract in dir_lock.h). flock rather than fcntl byte-range locks: an fcntl lock
// belongs to the process and is dropped when ANY descriptor of the file is closed in it (a
// library reading LOCK would release it by accident), while a flock belongs to the open file
// description this class owns.
#include "daemon/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <utility>

#include "daemon/outputs.h"

namespace gossip::daemon {
namespace {

// The locks this process holds, by the LOCK file's device and inode.
std::mutex g_mutex;
std::map<std::pair<dev_t, ino_t>, std::weak_ptr<DirectoryLock>>& registry() {
  static auto* locks = new std::map<std::pair<dev_t, ino_t>, std::weak_ptr<DirectoryLock>>();
  return *locks;
}

Status errno_status(const std::string& what, int err) {
  std::string m = what + ": " + std::strerror(err);
  if (err == EACCES || err == EPERM || err == EROFS) return permission_denied(std::move(m));
  if (err == ENOENT || err == ENOTDIR) return not_found(std::move(m));
  return io_error(std::move(m));
}

std::string now_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "(unknown host)";
  return name;
}

// The first line of the LOCK file (at most 512 bytes), or a note that it is empty.
std::string read_holder(int fd) {
  char buf[512];
  const ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  std::string line = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  line = line.substr(0, line.find('\n'));
  return line.empty() ? "the holder has not written its name yet" : line;
}

}  // namespace

Result<std::shared_ptr<DirectoryLock>> DirectoryLock::claim(const std::string& dir,
                                                            std::string_view holder) {
  GOSSIP_RETURN_IF_ERROR(create_output_dir(dir));
  const std::string path = dir + "/" + kLockFileName;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return errno_status("creating the lock file " + path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    return S_ISREG(st.st_mode) ? errno_status("stat of " + path, err)
                               : failed_precondition(path + " is not a regular file");
  }
  std::lock_guard<std::mutex> guard(g_mutex);
  const std::pair<dev_t, ino_t> key{st.st_dev, st.st_ino};
  if (auto it = registry().find(key); it != registry().end()) {
    // A child forked from the holder inherits this table but not the hold: only the process that
    // took the lock shares it.
    if (std::shared_ptr<DirectoryLock> held = it->second.lock(); held && held->pid_ == ::getpid()) {
      ::close(fd);  // this process holds it already: share that lock
      return held;
    }
  }
  // A relative directory is named with its absolute path too: two jobs started from one working
  // directory with the same relative checkpoint.dir meet here.
  std::string absolute = dir;
  if (char cwd[4096]; !dir.empty() && dir[0] != '/' && ::getcwd(cwd, sizeof cwd) != nullptr) {
    absolute = std::string(cwd) + "/" + dir;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string line = read_holder(fd);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return failed_precondition(dir + (absolute != dir ? " (" + absolute + ")" : "") +
                                 " is in use by another process (" + line + ")");
    }
    return errno_status("locking " + path, err);
  }
  std::shared_ptr<DirectoryLock> lock(new DirectoryLock(fd, absolute,
                                                        "pid " + std::to_string(::getpid()) +
                                                            " on host " + host_name() + " since " +
                                                            now_utc() + ": "));
  lock->write_line(holder);
  registry()[key] = lock;
  return lock;
}

DirectoryLock::DirectoryLock(int fd, std::string dir, std::string prefix)
    : fd_(fd), pid_(::getpid()), dir_(std::move(dir)), prefix_(std::move(prefix)) {}

DirectoryLock::~DirectoryLock() {
  {
    std::lock_guard<std::mutex> guard(g_mutex);
    struct stat st {};
    if (::fstat(fd_, &st) == 0) {
      auto it = registry().find({st.st_dev, st.st_ino});
      if (it != registry().end() && it->second.expired()) registry().erase(it);
    }
  }
  if (pid_ == ::getpid()) (void)::ftruncate(fd_, 0);  // not from a forked child's copy
  ::close(fd_);  // releases the flock (a forked child's close leaves the parent's hold)
}

void DirectoryLock::write_line(std::string_view holder) {
  holder_ = std::string(holder);
  const std::string line = prefix_ + holder_ + "\n";
  // Best effort: the line only informs a refused run; the lock is the flock.
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, line.data(), line.size(), 0);
}

void DirectoryLock::set_holder(std::string_view holder) {
  std::lock_guard<std::mutex> guard(g_mutex);
  write_line(holder);
}

std::string DirectoryLock::holder_line() const {
  std::lock_guard<std::mutex> guard(g_mutex);
  return prefix_ + holder_;
}

}  // namespace gossip::daemon
