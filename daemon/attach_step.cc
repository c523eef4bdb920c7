// AttachStep (see attach_step.h).
#include "daemon/attach_step.h"

#include <utility>

#include "common/divergence.h"

namespace gossip::daemon {

AttachStep::AttachStep(std::unique_ptr<AttachServer> server, std::chrono::milliseconds post_timeout)
    : server_(std::move(server)), post_timeout_(post_timeout) {}

Status AttachStep::start(std::uint64_t iteration, std::span<const float> x) {
  if (Status s = server_->welcome(iteration, x); !s.is_ok()) {
    return unavailable("attached trainer: " + s.message());
  }
  return Status::ok();
}

Status AttachStep::begin(std::uint64_t iteration, ParameterBuffers& buffers) {
  Result<std::span<float>> x =
      server_->wait_post(iteration, std::chrono::steady_clock::now() + post_timeout_);
  if (!x.is_ok()) return unavailable("attached trainer: " + x.status().message());
  if (!all_finite(*x)) {
    server_->fail("the parameters posted for iteration " + std::to_string(iteration) +
                  " contain NaN or Inf");
    return diverged(static_cast<std::int64_t>(iteration),
                    "the attached trainer posted parameters that contain NaN or Inf");
  }
  buffers.set_x(*x);
  return Status::ok();
}

Status AttachStep::end(std::uint64_t iteration, ParameterBuffers& buffers) {
  buffers.x_to_host(server_->parameters());
  if (Status s = server_->reply_mixed(iteration); !s.is_ok()) {
    return unavailable("attached trainer: " + s.message());
  }
  return Status::ok();
}

void AttachStep::finish(const std::string& why) {
  if (why.empty()) {
    (void)server_->close();  // BYE; the trainer may have left already
  } else {
    server_->fail(why);
  }
}

}  // namespace gossip::daemon
