// How much memory this process may use, and a check to run before a large allocation, so that a
// size that cannot fit is a clear error ("the model needs 80 GB, this machine has 16 GB") instead
// of std::bad_alloc or the kernel's OOM killer.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace gossip {

// The smaller of the machine's physical memory and the cgroup (v2 memory.max, or v1
// memory.limit_in_bytes) limit of this process; 0 when neither can be read.
std::uint64_t usable_memory_bytes();

// "1.5 GiB", "12 MiB", "800 B".
std::string format_bytes(std::uint64_t bytes);

// OK when `bytes` fits under `cap_bytes` (0: no cap of its own) and under usable_memory_bytes()
// (when known). Otherwise OutOfRange naming `what`, the bytes it needs and the limit it broke.
Status check_memory(std::uint64_t bytes, std::uint64_t cap_bytes, const std::string& what);

}  // namespace gossip
