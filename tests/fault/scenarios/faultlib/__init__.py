"""The fault-scenario driver's modules (fault_scenarios.py is the entry point; docs/fault.md).

  common     exit codes, the cluster's shape, Failed / Skipped, log
  workload   the 2 x 4 torus topology file, free ports, the Fashion-MNIST subset, training configs
  metrics    a node incarnation's metrics file, read as it is written
  cluster    Cluster: the gossipd processes (and fault proxies) of one run, kills and restarts
  checks     the checks of a finished run: exits, W(t), figures, accuracy against the undisturbed run
  scenarios  the loopback scenarios: undisturbed, failstop, kill1/kill2, gossip, rejoin
  netns      the network-namespace harness and its scenarios: netns-delay-loss, netns-partition
  join       netns-join: 9 namespaces, a standby node joins mid-run and another node leaves
  selftest   the W(t) checker on synthetic logs
"""
