// Placement: the host-list rule (node k on slot k, ports per entry), --hosts entries and
// hostfiles, and their errors.
#include "topology/placement.h"

#include <doctest/doctest.h>

namespace gossip::topology {
namespace {

void fails_with(const Status& s, const std::string& what) {
  REQUIRE_FALSE(s.is_ok());
  CHECK_MESSAGE(s.message().find(what) != std::string::npos, s.message());
}

TEST_CASE("place_nodes: node k on slot k, each entry's nodes on consecutive ports") {
  Placement p;
  p.base_port = 7000;
  p.hosts = {{.host = "a", .slots = 2, .base_port = 0},
             {.host = "fd00::2", .slots = 1, .base_port = 9000},
             {.host = "c", .slots = 3, .base_port = 0}};
  auto a = place_nodes(5, p);
  REQUIRE_MESSAGE(a.is_ok(), a.status().to_string());
  // Written out by hand from the rule: a gets nodes 0, 1; fd00::2 node 2 on its own port; c the
  // rest, one slot left over.
  const std::vector<std::string> want = {"a:7000", "a:7001", "[fd00::2]:9000", "c:7000", "c:7001"};
  REQUIRE(a->size() == want.size());
  for (std::size_t k = 0; k < want.size(); ++k) CHECK((*a)[k].to_string() == want[k]);

  // One host: node i on base_port + i; base_port 0: no addresses.
  Placement one{.host = "h", .base_port = 100, .hosts = {}};
  auto b = place_nodes(3, one);
  REQUIRE(b.is_ok());
  CHECK((*b)[2].to_string() == "h:102");
  one.base_port = 0;
  CHECK(place_nodes(3, one)->empty());
}

TEST_CASE("place_nodes errors name counts, entries and ports") {
  Placement p;
  p.base_port = 7000;
  p.hosts = {{.host = "a", .slots = 2, .base_port = 0}, {.host = "b", .slots = 1, .base_port = 0}};
  int bad = 7;
  fails_with(place_nodes(4, p, &bad).status(), "3 slots (2 hosts) for 4 nodes");
  CHECK(bad == -1);
  p.hosts.push_back({.host = "a", .slots = 1, .base_port = 0});  // a:7000 again
  fails_with(place_nodes(4, p, &bad).status(),
             "node 3 (host entry 3) and node 0 (host entry 1) would both listen on a:7000");
  CHECK(bad == 2);
  p.hosts[2].base_port = 7002;  // a listed twice is fine on other ports
  CHECK(place_nodes(4, p).is_ok());
  p.hosts[1].slots = 0;
  fails_with(place_nodes(4, p, &bad).status(), "host b: slots 0 (must be >= 1)");
  CHECK(bad == 1);
  p.hosts[1] = {.host = "b:4", .slots = 1, .base_port = 0};
  fails_with(place_nodes(4, p, &bad).status(), "':' belongs to IPv6 addresses only");
  CHECK(bad == 1);
  p.hosts[1] = {.host = "b", .slots = 1, .base_port = 65535};
  p.hosts[2].slots = 2;
  CHECK(place_nodes(5, p).is_ok());  // b:65535 is the last port
  p.hosts[1].slots = 2;
  fails_with(place_nodes(5, p, &bad).status(), "host b: base_port 65535 + 2 nodes runs past");
  CHECK(bad == 1);
  p.base_port = 0;
  fails_with(place_nodes(2, p).status(), "base_port 0 means no addresses");
}

TEST_CASE("--hosts entries: host[:slots], IPv6 in brackets") {
  auto l = parse_host_list("h1:4, 10.0.0.2 ,[fd00::1]:2,[::1]");
  REQUIRE_MESSAGE(l.is_ok(), l.status().to_string());
  REQUIRE(l->size() == 4);
  CHECK(((*l)[0].host == "h1" && (*l)[0].slots == 4));
  CHECK(((*l)[1].host == "10.0.0.2" && (*l)[1].slots == 1));
  CHECK(((*l)[2].host == "fd00::1" && (*l)[2].slots == 2));
  CHECK(((*l)[3].host == "::1" && (*l)[3].slots == 1));
  fails_with(parse_host_list("a,,b").status(), "empty host entry");
  fails_with(parse_host_list("a:0").status(), "slots '0' is not a whole number >= 1");
  fails_with(parse_host_list("a:-2").status(), "slots '-2'");
  fails_with(parse_host_list("a:x").status(), "slots 'x'");
  fails_with(parse_host_list("a:").status(), "no slot count");
  fails_with(parse_host_list("fd00::1:4").status(), "write IPv6 hosts in brackets");
  fails_with(parse_host_list("[fd00::1:4").status(), "unbalanced");
  fails_with(parse_host_list("[fd00::1]4").status(), "expected ':SLOTS'");
  fails_with(parse_host_list("a/b").status(), "'/' is not allowed");
}

TEST_CASE("hostfiles: 'host slots=N base_port=P', errors at file:line:column") {
  auto h = parse_hostfile(
      "# cluster\nn1 slots=4\n\n  n2   slots=2 base_port=8000  # fast\n[fd00::3]\n", "hosts");
  REQUIRE_MESSAGE(h.is_ok(), h.status().to_string());
  REQUIRE(h->size() == 3);
  CHECK(((*h)[0].host == "n1" && (*h)[0].slots == 4 && (*h)[0].base_port == 0));
  CHECK(((*h)[1].host == "n2" && (*h)[1].slots == 2 && (*h)[1].base_port == 8000));
  CHECK(((*h)[2].host == "fd00::3" && (*h)[2].slots == 1));
  fails_with(parse_hostfile("n1\nn2 slots=0\n", "hosts").status(), "hosts:2:4: slots '0'");
  fails_with(parse_hostfile("n1\n  n2 cpus=3\n", "hosts").status(),
             "hosts:2:6: 'cpus=3': expected slots=N or base_port=P");
  fails_with(parse_hostfile("n1 slots=1 slots=2\n", "hosts").status(),
             "hosts:1:12: slots given twice");
  fails_with(parse_hostfile("n1 base_port=70000\n", "hosts").status(),
             "hosts:1:4: base_port '70000'");
  fails_with(parse_hostfile("n1\n\tn2:4\n", "hosts").status(), "hosts:2:2: host 'n2:4'");
  // No entries: an empty list (gossip-topo refuses it, naming --hostfile).
  auto none = parse_hostfile("# nothing\n\n  \n", "hosts");
  REQUIRE(none.is_ok());
  CHECK(none->empty());
}

TEST_CASE("host names: labels, dotted numbers that are no IPv4 address, one host spelt two ways") {
  for (const char* ok : {"10.0.0.1", "255.255.255.255", "node-7", "node7.example.", "a_b.c",
                         "fd00::1", "1host.example", "x.y9"}) {
    CAPTURE(ok);
    CHECK(check_host_name(ok).is_ok());
  }
  fails_with(check_host_name("999.1.1.1"), "host '999.1.1.1' is not an IPv4 address");
  fails_with(check_host_name("1.2.3"), "is not an IPv4 address");  // inet_aton's 1.2.0.3
  fails_with(check_host_name("127.0.0.01"), "without leading zeros");
  fails_with(check_host_name("12"), "is not an IPv4 address");
  fails_with(check_host_name("a..b"), "empty label");
  fails_with(check_host_name(".a"), "empty label");
  fails_with(check_host_name("-a.b"), "label '-a' starts or ends with '-'");
  fails_with(check_host_name("a.b-"), "label 'b-' starts or ends with '-'");
  fails_with(check_host_name(std::string(64, 'x') + ".example"), "longer than 63 characters");
  CHECK(host_key("LocalHost.") == "localhost");
  CHECK(host_key("0:0::1") == "::1");
  CHECK(host_key("FD00:0::1") == "fd00::1");
  Placement p{.host = "", .base_port = 7000, .hosts = {{"Node-A", 1, 0}, {"node-a.", 1, 0}}};
  fails_with(place_nodes(2, p).status(),
             "would both listen on node-a.:7000 (the same as node-a:7000)");
  p.hosts = {{"::1", 1, 0}, {"0:0::1", 1, 0}};
  fails_with(place_nodes(2, p).status(), "(the same as [::1]:7000)");
  // Blanks around the ':' of an entry are layout.
  auto l = parse_host_list(" h1 : 4 ,h2");
  REQUIRE_MESSAGE(l.is_ok(), l.status().to_string());
  CHECK(((*l)[0].host == "h1" && (*l)[0].slots == 4));
  fails_with(parse_host_list("").status(), "empty host entry in '' (entry 1)");
  fails_with(parse_host_list("   ").status(), "empty host entry");
}

}  // namespace
}  // namespace gossip::topology
