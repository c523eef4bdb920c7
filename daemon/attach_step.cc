// AttachStep (see attach_step.h).
#include "daemon/attach_step.h"

#include <cmath>
#include <utility>

#include "common/divergence.h"

namespace gossip::daemon {

AttachStep::AttachStep(std::unique_ptr<attach::AttachServer> server,
                       std::chrono::milliseconds post_timeout)
    : server_(std::move(server)), post_timeout_(post_timeout) {}

Status AttachStep::start(std::uint64_t iteration, std::span<const float> x) {
  if (Status s = server_->welcome(iteration, x); !s.is_ok()) {
    return unavailable("attached trainer: " + s.message());
  }
  return Status::ok();
}

Status AttachStep::send_pending_mixed() {
  if (!mixed_pending_) return Status::ok();
  const std::uint64_t t = *mixed_pending_;
  mixed_pending_.reset();
  if (Status s = server_->reply_mixed(t); !s.is_ok()) {
    return unavailable("attached trainer: " + s.message());
  }
  return Status::ok();
}

Status AttachStep::begin(std::uint64_t iteration, ParameterBuffers& buffers) {
  GOSSIP_RETURN_IF_ERROR(send_pending_mixed());
  Result<std::span<float>> x =
      server_->wait_post(iteration, std::chrono::steady_clock::now() + post_timeout_);
  if (!x.is_ok()) return unavailable("attached trainer: " + x.status().message());
  if (!all_finite(*x)) {
    server_->fail("the parameters posted for iteration " + std::to_string(iteration) +
                  " contain NaN or Inf");
    return diverged(static_cast<std::int64_t>(iteration),
                    "the attached trainer posted parameters that contain NaN or Inf");
  }
  if (buffers.can_share()) {
    buffers.share(server_->parameters(), server_->update(), server_->with_update());
    buffers.use_shared_x();
  } else {
    buffers.set_x(*x);
  }
  return Status::ok();
}

Status AttachStep::before_mix(std::uint64_t iteration, ParameterBuffers& buffers) {
  if (!server_->with_update()) return Status::ok();
  Result<float> gamma =
      server_->wait_update(iteration, std::chrono::steady_clock::now() + post_timeout_);
  if (!gamma.is_ok()) return unavailable("attached trainer: " + gamma.status().message());
  if (!std::isfinite(*gamma)) {
    server_->fail("the step size of UPDATE(" + std::to_string(iteration) + ") is not finite");
    return diverged(static_cast<std::int64_t>(iteration),
                    "the attached trainer sent a step size of " + std::to_string(*gamma));
  }
  gamma_ = *gamma;
  buffers.set_update(server_->update());  // nothing to copy when the buffers share it
  return Status::ok();
}

Status AttachStep::end(std::uint64_t iteration, ParameterBuffers& buffers) {
  buffers.x_to_host(server_->parameters());  // nothing to copy when x_{t+1} is there already
  mixed_pending_ = iteration;
  return Status::ok();
}

void AttachStep::finish(const std::string& why) {
  if (why.empty()) {
    (void)send_pending_mixed();  // the last iteration's result; the trainer may have left
    (void)server_->close();      // BYE
  } else {
    server_->fail(why);
  }
}

}  // namespace gossip::daemon
