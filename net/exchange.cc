// The per-iteration exchange (Transport::Impl's send side and the caller's Exchange handle): the
// sends of x_t in chunks to each out-neighbour and the posted receives, resolved into one
// ExchangeState that the caller waits on; what misses the deadline is abandoned (a link that was
// mid-chunk is reset, so that no syscall touches the caller's buffers afterwards).
#include <algorithm>

#include "common/check.h"
#include "net/checksum.h"
#include "net/frame.h"
#include "net/session.h"
#include "net/transport_impl.h"

namespace gossip::net {

bool Transport::Impl::checksums_needed(std::span<const int> to) const {
  if (!ssl_) return true;
  for (int peer : to) {
    auto h = hellos_.find(peer);
    if (h == hellos_.end() || !h->second.payload_crc_optional()) return true;
  }
  return false;
}

std::uint32_t Transport::Impl::chunk_count(std::uint64_t num_bytes) const {
  return static_cast<std::uint32_t>((num_bytes + opts_.chunk_bytes - 1) / opts_.chunk_bytes);
}

Transport::Impl::Frame Transport::Impl::make_frame(std::uint64_t iteration,
                                                   std::span<const float> data, std::uint32_t index,
                                                   bool checksum) const {
  const std::uint64_t total = data.size_bytes();
  const std::uint64_t chunk = opts_.chunk_bytes;
  const std::uint64_t off = index * chunk;
  const std::uint64_t len = std::min(chunk, total - off);
  const auto* base = reinterpret_cast<const std::uint8_t*>(data.data());
  pb::Params params;
  params.set_sender(static_cast<std::uint32_t>(opts_.self.node_id));
  params.set_iteration(iteration);
  params.set_chunk_index(index);
  params.set_chunk_count(chunk_count(total));
  params.set_byte_offset(off);
  if (checksum) {
    params.set_crc32c(crc32c(base + off, len));
  } else {
    params.set_crc32c_omitted(true);
  }
  return {std::make_shared<const std::string>(encode_frame(FrameType::kParams, params, len)),
          asio::const_buffer(base + off, len)};
}

void Transport::Impl::post_frame(const std::shared_ptr<SendOp>& op, const Frame& frame) {
  if (op->resolved) return;  // abandoned or failed already
  Peer& p = peers_.at(op->peer);
  OutFrame f{frame.first, frame.second, op};
  if (p.session) {
    p.session->enqueue(std::move(f));
  } else {
    p.waiting.push_back(std::move(f));
  }
}

void Transport::Impl::abandon(const std::shared_ptr<ExchangeState>& state) {
  // Runs on the io thread; finds this exchange's unresolved operations through the peers.
  for (auto& [id, p] : peers_) {
    std::vector<std::shared_ptr<RecvSlot>> slots;
    for (auto& [iteration, slot] : p.recvs) {
      if (slot->ex == state && !slot->resolved) slots.push_back(slot);
    }
    bool reset = false;
    for (auto& slot : slots) {
      reset = reset || slot->reading;
      fail_recv(p, slot,
                deadline_exceeded("no complete iteration-" + std::to_string(slot->iteration) +
                                  " buffer from " + node_name(id) + " before the deadline (" +
                                  std::to_string(slot->next_chunk) + "/" +
                                  std::to_string(slot->chunk_count) + " chunks arrived)"));
    }
    std::vector<std::shared_ptr<SendOp>> ops;
    for (auto& f : p.waiting) {
      if (f.op && f.op->ex == state && std::find(ops.begin(), ops.end(), f.op) == ops.end()) {
        ops.push_back(f.op);
      }
    }
    std::erase_if(p.waiting, [&](const OutFrame& f) { return f.op && f.op->ex == state; });
    for (auto& op : ops) {
      op->finish(deadline_exceeded(node_name(id) + " was not connected before the deadline"));
    }
    if (p.session) {
      for (auto& op : p.session->ops_of(state)) {
        reset = p.session->purge(op) || reset;
        op->finish(deadline_exceeded(node_name(id) + " did not take the whole buffer before "
                                                     "the deadline"));
      }
    }
    if (reset && p.session) {
      p.session->close(deadline_exceeded("deadline passed mid-chunk; link reset"));
    }
  }
}

void Transport::Impl::track_exchange(const std::shared_ptr<ExchangeState>& state) {
  if (live_exchanges_.size() >= prune_at_) {
    std::erase_if(live_exchanges_, [](const auto& w) { return w.expired(); });
    // Doubling keeps the pruning amortised O(1) per exchange.
    prune_at_ = std::max(kMinPrune, 2 * live_exchanges_.size());
  }
  live_exchanges_.push_back(state);
  std::lock_guard l(mu_);
  stats_.exchanges_tracked = live_exchanges_.size();
}

std::shared_ptr<Exchange> Transport::Impl::exchange(std::uint64_t iteration,
                                                    std::span<const float> data,
                                                    std::span<const int> to,
                                                    std::span<const RecvSpec> recvs) {
  auto state = std::make_shared<ExchangeState>();
  state->transport = weak_from_this();
  state->iteration = iteration;
  state->unresolved_sends = static_cast<int>(to.size());
  state->unresolved_recvs = static_cast<int>(recvs.size());
  // Nothing to send or receive (a node alone, or every neighbour dropped): nothing for the io
  // thread to do, and nothing to release at shutdown. Posting it anyway would let a caller that
  // runs faster than the io thread pile exchanges up in its queue (no wait() holds it back).
  if (to.empty() && recvs.empty()) return std::make_shared<Exchange>(state);
  if (!to.empty()) GOSSIP_CHECK_EQ(data.size(), opts_.self.param_count);
  std::vector<std::shared_ptr<SendOp>> ops;
  for (int peer : to) {
    GOSSIP_CHECK(peers_.count(peer)) << "send to " << peer << ", which is not a neighbour";
    auto op = std::make_shared<SendOp>();
    op->peer = peer;
    op->iteration = iteration;
    op->ex = state;
    ops.push_back(std::move(op));
  }
  std::vector<std::shared_ptr<RecvSlot>> slots;
  for (const RecvSpec& r : recvs) {
    GOSSIP_CHECK(peers_.count(r.peer)) << "receive from " << r.peer << ", not a neighbour";
    GOSSIP_CHECK_EQ(r.buffer.size(), opts_.self.param_count);
    auto slot = std::make_shared<RecvSlot>();
    slot->peer = r.peer;
    slot->iteration = iteration;
    slot->buffer = r.buffer;
    slot->ex = state;
    slots.push_back(std::move(slot));
  }
  // Checksums are computed here, on the caller's thread, once for all destinations, and each
  // chunk is handed to the io thread as soon as its checksum is known, so that sending starts
  // while later chunks are still being checksummed. On TLS links to peers that accept it, there
  // is no checksum (AES-GCM authenticates every byte): see checksums_needed().
  const std::uint32_t num_chunks = to.empty() ? 0 : chunk_count(data.size_bytes());
  {
    std::lock_guard l(mu_);
    if (!shut_down_) {
      asio::post(io_, [this, state, ops, slots = std::move(slots), num_chunks] {
        if (stopping_) {
          for (auto& op : ops) op->finish(unavailable("transport shut down"));
          for (auto& s : slots) state->resolve(true, s->peer, unavailable("transport shut down"));
          return;
        }
        track_exchange(state);
        for (auto& op : ops) op->chunks_left = num_chunks;
        for (auto& s : slots) post_recv(s);
      });
      const bool checksum = checksums_needed(to);
      for (std::uint32_t c = 0; c < num_chunks; ++c) {
        auto frame = make_frame(iteration, data, c, checksum);
        asio::post(io_, [this, ops, frame = std::move(frame)] {
          if (stopping_) return;
          for (auto& op : ops) post_frame(op, frame);
        });
      }
      return std::make_shared<Exchange>(state);
    }
  }
  for (auto& op : ops) op->finish(unavailable("transport shut down"));
  for (auto& s : slots) state->resolve(true, s->peer, unavailable("transport shut down"));
  return std::make_shared<Exchange>(state);
}

void Transport::Impl::send(int peer, std::uint64_t iteration, std::span<const float> data,
                           std::function<void(Status)> done) {
  GOSSIP_CHECK(peers_.count(peer)) << "send to " << peer << ", which is not a neighbour";
  GOSSIP_CHECK_EQ(data.size(), opts_.self.param_count);
  auto op = std::make_shared<SendOp>();
  op->peer = peer;
  op->iteration = iteration;
  op->done = std::move(done);
  const std::uint32_t num_chunks = chunk_count(data.size_bytes());
  std::lock_guard l(mu_);
  if (shut_down_) {
    op->finish(unavailable("transport shut down"));
    return;
  }
  asio::post(io_, [this, op, num_chunks] {
    if (stopping_) {
      op->finish(unavailable("transport shut down"));
      return;
    }
    op->chunks_left = num_chunks;
  });
  const bool checksum = checksums_needed(std::span<const int>(&peer, 1));
  for (std::uint32_t c = 0; c < num_chunks; ++c) {
    asio::post(io_, [this, op, frame = make_frame(iteration, data, c, checksum)] {
      if (!stopping_) post_frame(op, frame);
    });
  }
}

void Transport::Impl::post_abandon(std::shared_ptr<ExchangeState> state) {
  std::lock_guard l(mu_);
  if (shut_down_) return;  // shutdown resolves everything
  asio::post(io_, [this, state] { abandon(state); });
}

Exchange::~Exchange() {
  if (state_) wait(SteadyClock::now());
}

std::optional<ChunkEvent> Exchange::next_chunk(Deadline deadline) {
  std::unique_lock l(state_->mu);
  state_->cv.wait_until(l, deadline,
                        [&] { return !state_->events.empty() || state_->unresolved_recvs == 0; });
  if (state_->events.empty()) return std::nullopt;
  ChunkEvent e = state_->events.front();
  state_->events.pop_front();
  return e;
}

ExchangeResult Exchange::wait(Deadline deadline) {
  std::unique_lock l(state_->mu);
  auto all_resolved = [&] {
    return state_->unresolved_recvs == 0 && state_->unresolved_sends == 0;
  };
  state_->cv.wait_until(l, deadline, all_resolved);
  if (!all_resolved() && !state_->abandon_posted) {
    state_->abandon_posted = true;
    if (auto t = state_->transport.lock()) {
      l.unlock();
      t->post_abandon(state_);
      l.lock();
    }
  }
  state_->cv.wait(l, [&] { return all_resolved() && state_->io_busy == 0; });
  return {state_->failures};
}

bool Exchange::sends_done() const {
  std::lock_guard l(state_->mu);
  return state_->unresolved_sends == 0;
}

bool Exchange::resolved() const {
  std::lock_guard l(state_->mu);
  return state_->unresolved_sends == 0 && state_->unresolved_recvs == 0;
}

std::uint64_t Exchange::iteration() const { return state_->iteration; }

}  // namespace gossip::net
