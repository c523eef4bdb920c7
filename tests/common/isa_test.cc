// common/isa.h: naming and parsing the instruction-set levels, GOSSIP_CPU's checks against this
// CPU, and forcing a level in process.
#include "common/isa.h"

#include <doctest/doctest.h>

namespace gossip {
namespace {

TEST_CASE("isa: every level's name parses back to it, and other spellings are refused") {
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
    Result<Isa> back = parse_isa(isa_name(isa));
    REQUIRE(back.is_ok());
    CHECK(*back == isa);
  }
  for (const char* bad : {"", "AVX2", "avx", "sse4", "avx512 ", "native"}) {
    CAPTURE(bad);
    Result<Isa> r = parse_isa(bad);
    REQUIRE(!r.is_ok());
    CHECK(r.status().message().find("expected avx512, avx2 or portable") != std::string::npos);
  }
}

TEST_CASE("isa: the detected level is supported, portable always, and the levels nest") {
  CHECK(isa_supported(Isa::kPortable));
  CHECK(isa_supported(detected_isa()));
  if (isa_supported(Isa::kAvx512)) CHECK(isa_supported(Isa::kAvx2));
#if !defined(__x86_64__)
  CHECK(detected_isa() == Isa::kPortable);
  CHECK(!isa_supported(Isa::kAvx2));
#endif
}

TEST_CASE("isa: an unset GOSSIP_CPU gives the detected level, and a bad one names itself") {
  CHECK(*isa_from_env(nullptr) == detected_isa());
  CHECK(*isa_from_env("") == detected_isa());
  CHECK(*isa_from_env("portable") == Isa::kPortable);
  Result<Isa> bad = isa_from_env("avx1024");
  REQUIRE(!bad.is_ok());
  CHECK(bad.status().message().find("GOSSIP_CPU=avx1024") != std::string::npos);
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    Result<Isa> r = isa_from_env(std::string(isa_name(isa)).c_str());
    if (isa_supported(isa)) {
      CHECK(*r == isa);
    } else {
      REQUIRE(!r.is_ok());
      CHECK(r.status().message().find("this CPU cannot run that path") != std::string::npos);
    }
  }
}

TEST_CASE("isa: set_active_isa forces a supported level and refuses one the CPU lacks") {
  const Isa saved = active_isa();
  REQUIRE(set_active_isa(Isa::kPortable).is_ok());
  CHECK(active_isa() == Isa::kPortable);
  CHECK(isa_description().find("cpu kernels: portable") == 0);
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    CHECK(set_active_isa(isa).is_ok() == isa_supported(isa));
  }
  REQUIRE(set_active_isa(saved).is_ok());
  CHECK(active_isa() == saved);
}

}  // namespace
}  // namespace gossip
