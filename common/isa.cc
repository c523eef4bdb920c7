#include "common/isa.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "common/enum_names.h"

namespace gossip {
namespace {

constexpr EnumName<Isa> kIsaNames[] = {
    {Isa::kAvx512, "avx512"}, {Isa::kAvx2, "avx2"}, {Isa::kPortable, "portable"}};

// -1: not chosen yet.
std::atomic<int> g_active{-1};

std::string supported_list() {
  std::string s;
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kPortable}) {
    if (!isa_supported(isa)) continue;
    if (!s.empty()) s += ", ";
    s += isa_name(isa);
  }
  return s;
}

}  // namespace

std::string_view isa_name(Isa isa) { return enum_name(kIsaNames, isa); }

Result<Isa> parse_isa(std::string_view name) {
  for (const EnumName<Isa>& n : kIsaNames) {
    if (name == n.name) return n.value;
  }
  std::string m = "unknown CPU path '";
  m.append(name);
  m += "' (expected " + enum_choices(kIsaNames) + ")";
  return invalid_argument(m);
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::kPortable:
      return true;
#if defined(__x86_64__)
    // __builtin_cpu_supports also checks that the OS saves the YMM/ZMM state (XGETBV).
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
             __builtin_cpu_supports("fma");
#else
    case Isa::kAvx2:
    case Isa::kAvx512:
      return false;
#endif
  }
  return false;
}

Isa detected_isa() {
  if (isa_supported(Isa::kAvx512)) return Isa::kAvx512;
  if (isa_supported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kPortable;
}

Result<Isa> isa_from_env(const char* value) {
  if (value == nullptr || *value == '\0') return detected_isa();
  Result<Isa> isa = parse_isa(value);
  std::string m = "GOSSIP_CPU=";
  m += value;
  if (!isa.is_ok()) return invalid_argument(m + ": " + isa.status().message());
  if (!isa_supported(*isa)) {
    m += ": this CPU cannot run that path (it supports ";
    m += supported_list();
    m += ")";
    return invalid_argument(m);
  }
  return *isa;
}

Status init_isa() {
  Result<Isa> isa = isa_from_env(std::getenv("GOSSIP_CPU"));
  if (!isa.is_ok()) return isa.status();
  int expected = -1;
  g_active.compare_exchange_strong(expected, static_cast<int>(*isa));
  return Status::ok();
}

Isa active_isa() {
  const int v = g_active.load(std::memory_order_relaxed);
  if (v >= 0) return static_cast<Isa>(v);
  const Status s = init_isa();
  if (!s.is_ok()) {
    std::fprintf(stderr, "fatal: %s\n", s.message().c_str());
    std::exit(2);
  }
  return static_cast<Isa>(g_active.load());
}

Status set_active_isa(Isa isa) {
  if (!isa_supported(isa)) {
    std::string m = "CPU path ";
    m += isa_name(isa);
    m += " is not supported here (this CPU supports ";
    m += supported_list();
    m += ")";
    return invalid_argument(m);
  }
  g_active.store(static_cast<int>(isa));
  return Status::ok();
}

std::string isa_description() {
  const Isa active = active_isa();
  const Isa best = detected_isa();
  const char* env = std::getenv("GOSSIP_CPU");
  std::string s = "cpu kernels: ";
  s += isa_name(active);
  if (env != nullptr && *env != '\0') {
    s += " (GOSSIP_CPU; this CPU has ";
    s += isa_name(best);
    s += ")";
  } else if (active != best) {
    s += " (set by the program; this CPU has ";
    s += isa_name(best);
    s += ")";
  } else {
    s += " (detected)";
  }
  return s;
}

}  // namespace gossip
