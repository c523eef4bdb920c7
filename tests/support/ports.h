// Free TCP ports on the loopback interface, for tests and benchmarks that start servers (gossipd
// processes, transports) on ports they must choose before the servers bind them.
#pragma once

namespace gossip {

// Whether 127.0.0.1:port can be bound right now (the probe socket is closed again).
bool loopback_port_free(int port);

// A port p such that p .. p+n-1 are all free on the loopback interface, from [20000, 60000)
// without the kernel's ephemeral range (ip_local_port_range: any outgoing connection may take
// one of those); `from` spreads the starting point. 0 if no such run was found in 200 tries.
// Another process may still take one before the caller binds it: callers retry on "address in
// use" where they can.
int free_loopback_ports(int n, int from);

}  // namespace gossip
