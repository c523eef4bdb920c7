// Free TCP ports on the loopback interface, for tests and benchmarks that start servers (gossipd
// processes, transports) on ports they must choose before the servers bind them.
#pragma once

namespace gossip {

// Whether 127.0.0.1:port can be bound right now (the probe socket is closed again).
bool loopback_port_free(int port);

// The first port p >= `from` (wrapping below 60000 back to 20000) such that p .. p+n-1 are all
// free on the loopback interface; 0 if no such run was found in 200 tries. Another process may
// still take one before the caller binds it: callers retry on "address in use".
int free_loopback_ports(int n, int from);

}  // namespace gossip
