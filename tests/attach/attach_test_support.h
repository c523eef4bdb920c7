// Shared by the attach tests (attach_test.cc, attach_client_test.cc): a socket directory and a
// listening AttachServer.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "attach/server.h"
#include "tests/support/files.h"

namespace gossip::attach {

// A fresh directory under /tmp (socket paths must stay under 108 bytes), removed at the end.
struct SocketDir : testing::TempDir {
  SocketDir() : TempDir("/tmp", "attach_test_") {}
  std::string socket() const { return path + "/gossipd.sock"; }
};

// An AttachServer listening on `path`; fails the test (with the reason) if it cannot listen.
inline std::unique_ptr<AttachServer> listen_or_fail(const std::string& path) {
  auto server = AttachServer::listen(path);
  REQUIRE_MESSAGE(server.is_ok(), server.status().to_string());
  return std::move(server).value();
}

// A doctest fixture: an AttachServer listening on a socket in a scratch directory.
struct Listening {
  SocketDir dir;
  std::unique_ptr<AttachServer> server = listen_or_fail(dir.socket());
};

}  // namespace gossip::attach
