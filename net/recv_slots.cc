// Where arriving Params go (Transport::Impl's receive side, see net/transport_impl.h): into the
// receive the caller posted for that iteration, into the peer's one-iteration-ahead staging buffer
// (copied into the receive once it is posted), discarded when stale (below the peer's floor), or
// nowhere yet: a peer further ahead is paused (TCP back-pressure) until the receiver catches up.
// Chunks must arrive in order; anything else is a bad frame.
#include <sys/mman.h>

#include <algorithm>

#include "common/check.h"
#include "net/session.h"
#include "net/transport_impl.h"

namespace gossip::net {

// Memory for one iteration ahead of a neighbour (`floats` floats), mapped in at once and in
// transparent huge pages where the kernel offers them: touched page by page as chunks land, a
// 100 MB staging buffer took ~25 600 page faults of ~14 us each on the benchmark VM, spread over
// the first iterations' receives (docs/net.md, "TLS records straight to the stream, staging memory
// in huge pages"); with 2 MiB pages, populated here, it takes a few ms, once. Both advices are
// hints: a kernel without them faults pages in lazily.
std::unique_ptr<float[], FreeDeleter> staging_buffer(std::size_t floats) {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t bytes = (floats * sizeof(float) + kHuge - 1) / kHuge * kHuge;
  auto* p = static_cast<float*>(std::aligned_alloc(kHuge, std::max(bytes, kHuge)));
  GOSSIP_CHECK(p != nullptr) << "cannot allocate " << bytes << " bytes of staging memory";
#ifdef MADV_HUGEPAGE
  ::madvise(p, bytes, MADV_HUGEPAGE);
#endif
#ifdef MADV_POPULATE_WRITE
  ::madvise(p, bytes, MADV_POPULATE_WRITE);
#endif
  return std::unique_ptr<float[], FreeDeleter>(p);
}

void Transport::Impl::fail_peer(Peer& p, const Status& s, bool keep_complete_staging) {
  auto recvs = std::move(p.recvs);
  p.recvs.clear();
  for (auto& [iteration, slot] : recvs) {
    slot->resolved = true;
    slot->ex->resolve(true, p.addr.node_id, s);
    p.floor = std::max(p.floor, iteration + 1);
  }
  const bool keep = keep_complete_staging && p.staging && p.staging->complete() &&
                    !p.staging->reading && p.staging->iteration >= p.floor;
  if (!keep) p.staging.reset();
}

void Transport::Impl::post_recv(const std::shared_ptr<RecvSlot>& slot) {
  Peer& p = peers_.at(slot->peer);
  if (slot->iteration < p.floor) {
    slot->resolved = true;
    slot->ex->resolve(
        true, slot->peer,
        failed_precondition("receive from " + node_name(slot->peer) + " posted for iteration " +
                            std::to_string(slot->iteration) + ", which is already finished"));
    return;
  }
  GOSSIP_CHECK(p.recvs.count(slot->iteration) == 0)
      << "two receives from node " << slot->peer << " for iteration " << slot->iteration;
  p.recvs[slot->iteration] = slot;
  if (p.staging && p.staging->iteration == slot->iteration && !p.staging->reading) {
    drain_staging(p, slot);
  }
  resume_reader(p);
}

void Transport::Impl::drain_staging(Peer& p, std::shared_ptr<RecvSlot> slot) {
  std::shared_ptr<RecvSlot> st = std::move(p.staging);
  p.staging.reset();
  for (const auto& [off, cnt] : st->chunks) {
    std::copy_n(st->buffer.data() + off, cnt, slot->buffer.data() + off);
    slot->ex->add_event({p.addr.node_id, slot->iteration, off, cnt});
  }
  slot->chunk_count = st->chunk_count;
  slot->next_chunk = st->next_chunk;
  slot->next_offset = st->next_offset;
  if (slot->complete()) complete_recv(p, slot);
}

// Slots are taken by value: callers may pass a reference to the map entry that erase() destroys.
void Transport::Impl::complete_recv(Peer& p, std::shared_ptr<RecvSlot> slot) {
  slot->resolved = true;
  p.recvs.erase(slot->iteration);
  slot->ex->resolve(true, p.addr.node_id, Status::ok());
  advance_floor(p, slot->iteration + 1);
}

void Transport::Impl::fail_recv(Peer& p, std::shared_ptr<RecvSlot> slot, const Status& s) {
  slot->resolved = true;
  p.recvs.erase(slot->iteration);
  slot->ex->resolve(true, p.addr.node_id, s);
  advance_floor(p, slot->iteration + 1);
}

void Transport::Impl::advance_floor(Peer& p, std::uint64_t floor) {
  p.floor = std::max(p.floor, floor);
  if (p.staging && p.staging->iteration < p.floor && !p.staging->reading) p.staging.reset();
  resume_reader(p);
}

void Transport::Impl::resume_reader(Peer& p) {
  if (p.session && p.session->paused()) {
    // Resume from a fresh handler: we may be inside the session's own call stack.
    asio::post(io_, [s = p.session] { s->resume(); });
  }
}

Transport::Impl::Target Transport::Impl::classify(Peer& p, const pb::Params& params) {
  const std::uint64_t it = params.iteration();
  if (it < p.floor) return {Target::kDiscard, nullptr, {}};
  std::shared_ptr<RecvSlot> slot;
  if (auto r = p.recvs.find(it); r != p.recvs.end()) {
    slot = r->second;
    if (p.staging && p.staging->iteration == it && !p.staging->reading) drain_staging(p, slot);
    if (slot->resolved) return {Target::kDiscard, nullptr, {}};
  } else if (p.staging && p.staging->iteration == it) {
    slot = p.staging;
  } else if (!p.staging && it <= p.floor + 1) {
    // One iteration ahead: buffer it (allocation bounded by the agreed model size).
    slot = std::make_shared<RecvSlot>();
    slot->peer = p.addr.node_id;
    slot->iteration = it;
    if (!p.staging_memory) p.staging_memory = staging_buffer(opts_.self.param_count);
    slot->buffer = {p.staging_memory.get(), opts_.self.param_count};
    p.staging = slot;
  } else {
    return {Target::kPause, nullptr, {}};
  }
  if (slot->complete() || params.chunk_index() != slot->next_chunk ||
      params.byte_offset() != slot->next_offset ||
      (slot->next_chunk > 0 && params.chunk_count() != slot->chunk_count)) {
    return {Target::kBad, nullptr,
            corruption("out-of-order Params for iteration " + std::to_string(it) + ": chunk " +
                       std::to_string(params.chunk_index()) + "/" +
                       std::to_string(params.chunk_count()) + " at byte " +
                       std::to_string(params.byte_offset()) + ", expected chunk " +
                       std::to_string(slot->next_chunk) + " at byte " +
                       std::to_string(slot->next_offset))};
  }
  slot->chunk_count = params.chunk_count();
  return {Target::kInto, slot, {}};
}

void Transport::Impl::chunk_received(Peer& p, const std::shared_ptr<RecvSlot>& slot,
                                     const pb::Params& params, std::uint64_t len) {
  count_payload(p.addr.node_id, false, len);
  slot->next_chunk++;
  slot->next_offset += len;
  const std::size_t off = params.byte_offset() / sizeof(float);
  const std::size_t cnt = len / sizeof(float);
  if (!slot->ex) {                  // staging
    if (p.staging != slot) return;  // dropped meanwhile
    slot->chunks.emplace_back(off, cnt);
    if (slot->iteration < p.floor) {
      p.staging.reset();
    } else if (auto r = p.recvs.find(slot->iteration); r != p.recvs.end()) {
      drain_staging(p, r->second);
    }
    return;
  }
  slot->ex->add_event({p.addr.node_id, slot->iteration, off, cnt});
  if (slot->complete()) complete_recv(p, slot);
}

}  // namespace gossip::net
