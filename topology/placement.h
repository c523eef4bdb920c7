// Placement: where the nodes of a topology live — node addresses, host lists and hostfiles.
//
// A generated topology places its nodes either all on one host (node i on port base_port + i) or
// on a host list: node k runs on slot k, the first entry's slots taking nodes 0..slots-1, the
// next entry's the following ones, and so on (slots left over stay unused); each entry's nodes
// listen on ports base_port, base_port + 1, ... of its host. The same rule serves topology files
// (`host { name slots base_port }` entries), `gossip-topo generate --hosts/--hostfile` and the
// daemons, which pick their nodes out of the resulting addresses.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gossip::topology {

struct NodeAddress {
  std::string host;
  int port = 0;
  std::string to_string() const;  // "host:port" ("[::1]:7000" for IPv6 hosts)
};
// "host:port" or "[v6]:port"; InvalidArgument when the port is missing or outside 1..65535.
Result<NodeAddress> parse_address(std::string_view text);

// One entry of a host list.
struct HostSlots {
  std::string host;   // a host name, IPv4 address or IPv6 address (no brackets, no port)
  int slots = 1;      // nodes on this entry, >= 1
  int base_port = 0;  // this entry's first port; 0: the placement's base_port
};

struct Placement {
  std::string host = "127.0.0.1";  // every node's host when `hosts` is empty
  int base_port = 0;               // 0: no addresses (analysis and simulation)
  std::vector<HostSlots> hosts;    // empty: every node on `host`
};

// InvalidArgument unless `host` is a host name (labels of 1 to 63 letters, digits, '-', '_'
// separated by '.', no '-' at either end of a label, one trailing '.' allowed, the last label not
// all digits), an IPv4 address (a.b.c.d as inet_pton reads it: "999.1.1.1" and "1.2.3" are
// refused) or an IPv6 address (brackets and ports are not part of a host).
Status check_host_name(std::string_view host);

// The form two spellings of one host share, for finding a host listed twice: IPv6 addresses in
// inet_ntop's canonical form, names in lower case without a trailing '.'.
std::string host_key(std::string_view host);

// The addresses of nodes 0..n-1 under `placement` (empty when base_port is 0 and there is no host
// list). InvalidArgument, naming the counts, entries and ports, when: the slots are fewer than
// n; an entry has slots < 1 or a bad host name; a port runs past 65535; two nodes would share a
// host:port (the same host listed twice on the same ports, however spelt: host_key); base_port is
// 0 with a host list.
// `bad_entry`, when given, receives the index of the host entry at fault (-1: none in particular)
// so that a file can point at its line.
Result<std::vector<NodeAddress>> place_nodes(int n, const Placement& placement,
                                             int* bad_entry = nullptr);

// "host" or "host:slots" ("[v6]" or "[v6]:slots" for IPv6): one entry of `--hosts`.
Result<HostSlots> parse_host_entry(std::string_view text);
// A comma-separated list of parse_host_entry() entries: the value of `--hosts h1:4,h2:4`.
Result<std::vector<HostSlots>> parse_host_list(std::string_view text);
// A hostfile: one entry per line, "host [slots=N] [base_port=P]" (the MPI hostfile form), '#'
// starts a comment, blank lines are skipped. Errors name filename:line:column. A file without
// entries gives an empty list: the caller says what that means for it (gossip-topo refuses it).
Result<std::vector<HostSlots>> parse_hostfile(std::string_view text, const std::string& filename);

}  // namespace gossip::topology
