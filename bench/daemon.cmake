# bench/daemon_bench: per-iteration time split (compute, exchange, waiting) of 8 gossipd processes
# on loopback for 1M- and 25M-parameter models, with overlap on and off. Runs build/daemon/gossipd.
#   build/bench/daemon_bench [--nodes 8] [--iterations 8] [--sizes 1M,25M] [--tls]
add_executable(daemon_bench ${CMAKE_CURRENT_LIST_DIR}/daemon_bench.cc)
target_link_libraries(daemon_bench PRIVATE gossip_daemon_core gossip_test_support CLI11::CLI11)
target_compile_definitions(daemon_bench PRIVATE GOSSIPD_PATH="$<TARGET_FILE:gossipd>")
add_dependencies(daemon_bench gossipd)
