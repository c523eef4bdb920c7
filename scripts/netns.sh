#!/usr/bin/env bash
# Network namespace harness for multi-host fault tests (docs/fault.md). Builds N test hosts on
# one machine: namespaces <prefix>-n0 .. <prefix>-n(N-1), each with one veth "eth0" (address
# <subnet>.(i+1)/24) plugged into a bridge that lives in its own namespace <prefix>-hub, so the
# machine's own network is never touched and test traffic never leaves the namespaces. This kernel
# has no netem, so faults are made with:
#   tc tbf                     rate limits (egress of a node's eth0)
#   nftables numgen random     packet loss (ingress of a node's eth0)
#   nftables ip saddr drop     cuts between two nodes or two groups (a partition), dropped on
#                              ingress at both ends, so packets vanish as on a broken link
#   gossip-delayline           a fixed delay on every host's egress (tests/fault/tools/
#                              delay_line.cc): netem's `delay`, done by a process in the hub that
#                              forwards the frames between each host's veth and the bridge
# Jitter, pauses and blackholes of single connections come from the TCP proxy
# (tests/fault/tools/fault_proxy.cc).
#
#   scripts/netns.sh check              exit 0 when namespaces can be made here, else 77
#   scripts/netns.sh up N               (re)create N hosts (any old ones of the prefix go first)
#   scripts/netns.sh down               remove every namespace of the prefix (idempotent)
#   scripts/netns.sh addr I             print host I's address
#   scripts/netns.sh exec I CMD...      run CMD inside host I
#   scripts/netns.sh rate RATE|off [I...]   tbf on the hosts' egress (all hosts when none given);
#                                           RATE like 500kbit, 10mbit, 1gbit
#   scripts/netns.sh delay MS|off       add MS milliseconds (one way; a round trip gains 2 MS) to
#                                       every frame the hosts send, after their tbf
#   scripts/netns.sh loss PCT [I...]    drop PCT % (0..100, two decimals) of packets arriving at
#                                       the hosts; 0 removes the rule
#   scripts/netns.sh cut A B            cut every link between host groups A and B (comma lists:
#                                       "cut 0,1,2,3 4,5,6,7" partitions 8 hosts in two)
#   scripts/netns.sh heal [A B]         undo cuts between A and B, or every cut
#   scripts/netns.sh rtt I J [COUNT]    median round trip, in seconds, of COUNT (default 400) 1-byte
#                                       TCP ping-pongs from host I to host J, after 50 unmeasured
#   scripts/netns.sh status             namespaces, qdiscs and fault rules
#
# Environment: GOSSIP_NETNS_PREFIX (default "gossip"; keep it short: names end up in interface
# names), GOSSIP_NETNS_SUBNET (first three octets, default 10.231.0 — a private range that only
# exists inside these namespaces). Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN); `check` and `up`
# exit 77 with a message where that is missing, so callers can report "skipped".
set -euo pipefail

prefix=${GOSSIP_NETNS_PREFIX:-gossip}
subnet=${GOSSIP_NETNS_SUBNET:-10.231.0}
hub="$prefix-hub"
delay_pidfile="/run/gossip-netns-$prefix-delay.pid"
delay_log="/run/gossip-netns-$prefix-delay.log"
table="gossip_fault"

die() { echo "netns.sh: $*" >&2; exit 1; }
skip() { echo "netns.sh: SKIP: $*" >&2; exit 77; }
usage() { sed -n '/^#   scripts/s/^#   //p' "$0" >&2; exit 2; }

[[ $prefix =~ ^[A-Za-z0-9_.-]{1,10}$ ]] || die "GOSSIP_NETNS_PREFIX must be 1-10 of [A-Za-z0-9_.-]"
[[ $subnet =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "GOSSIP_NETNS_SUBNET must look like 10.231.0"

node_ns() { echo "$prefix-n$1"; }
addr() { echo "$subnet.$(($1 + 1))"; }

# Namespaces of this prefix (hub and nodes), one per line.
our_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix//./\\.}-(hub|n[0-9]+)$" || true
}

num_nodes() { our_namespaces | grep -c -- "-n[0-9]*$" || true; }

# Checks a host index and that the harness is up.
need_node() {
  [[ $1 =~ ^[0-9]+$ ]] || die "host index must be a number, got '$1'"
  ip netns list | awk '{print $1}' | grep -qx -- "$(node_ns "$1")" ||
    die "no host $1 (run: $0 up N; hosts are 0..N-1)"
}

# The host indices named by "0,2,5", or all hosts when empty.
expand() {
  local list=$1
  if [[ -z $list ]]; then
    local n
    n=$(num_nodes)
    ((n > 0)) || die "no hosts (run: $0 up N)"
    seq 0 $((n - 1))
    return
  fi
  tr ',' '\n' <<<"$list"
}

check() {
  ((EUID == 0)) || skip "network namespaces need root (CAP_NET_ADMIN, CAP_SYS_ADMIN); running as uid $EUID"
  local tool
  for tool in ip tc nft; do
    command -v "$tool" >/dev/null || skip "'$tool' is not installed (scripts/setup.sh installs iproute2 and nftables)"
  done
  local probe="$prefix-probe$$"
  ip netns add "$probe" 2>/dev/null || skip "cannot create a network namespace here (ip netns add failed)"
  local ok=1
  ip -n "$probe" link add p0 type veth peer name p1 2>/dev/null || ok=0
  if ((ok)); then
    ip netns exec "$probe" nft add table inet probe 2>/dev/null || ok=0
  fi
  ip netns del "$probe" 2>/dev/null || true
  ((ok)) || skip "namespaces work but veth pairs or nftables do not (kernel modules missing?)"
}

down() {
  local ns
  delay_stop
  for ns in $(our_namespaces); do
    ip netns del "$ns" 2>/dev/null || true
  done
  # A deleted namespace can linger a moment while the kernel tears its devices down.
  for _ in $(seq 50); do
    [[ -z $(our_namespaces) ]] && return 0
    sleep 0.1
  done
  die "could not remove: $(our_namespaces | tr '\n' ' ')"
}

up() {
  local n=$1
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 200)) || die "up needs 1..200 hosts, got '$n'"
  check
  down
  trap 'echo "netns.sh: up failed; tearing down" >&2; down' ERR
  ip netns add "$hub"
  ip -n "$hub" link set lo up
  ip -n "$hub" link add br0 type bridge
  ip -n "$hub" link set br0 up
  local i ns
  for ((i = 0; i < n; i++)); do
    ns=$(node_ns "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$hub" link add "h$i" type veth peer name eth0 netns "$ns"
    ip -n "$hub" link set "h$i" master br0
    ip -n "$hub" link set "h$i" up
    ip -n "$ns" addr add "$(addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip netns exec "$ns" nft -f - <<NFT
table inet $table {
  chain cut { }
  chain loss { }
  chain input {
    type filter hook input priority 0; policy accept;
    iifname "eth0" jump cut
    iifname "eth0" jump loss
  }
}
NFT
  done
  trap - ERR
  echo "netns.sh: $n hosts up: $(node_ns 0) ($(addr 0)) .. $(node_ns $((n - 1))) ($(addr $((n - 1))))" >&2
}

# "10mbit" -> bits per second.
rate_bps() {
  local r=${1,,}
  [[ $r =~ ^([0-9]+)(bit|kbit|mbit|gbit)$ ]] || die "rate must look like 500kbit, 10mbit or 1gbit, got '$1'"
  local v=${BASH_REMATCH[1]}
  case ${BASH_REMATCH[2]} in
    bit) echo "$v" ;;
    kbit) echo $((v * 1000)) ;;
    mbit) echo $((v * 1000000)) ;;
    gbit) echo $((v * 1000000000)) ;;
  esac
}

rate() {
  local r=$1
  shift
  local hosts i
  hosts=$(expand "$(IFS=,; echo "$*")")
  for i in $hosts; do
    need_node "$i"
    if [[ $r == off ]]; then
      ip netns exec "$(node_ns "$i")" tc qdisc del dev eth0 root 2>/dev/null || true
      ip -n "$(node_ns "$i")" link set dev eth0 gso_max_size 65536
    else
      # A bucket of 1 ms of the rate (at least two full frames; GOSSIP_NETNS_BUCKET_US changes
      # the 1 ms): a host banks no more than that while idle, as on a real link, whose idle time
      # is lost. A bucket of 10 ms let a sender that paused a few ms between messages (an
      # allreduce step waiting out a delay) send the next one's first 10 ms at the veth's speed.
      # The host's GSO packets are kept within the bucket: tbf would otherwise cut each into
      # 1500-byte frames, and the bridge, the delay line and the receiver would then handle 40
      # times the packets, which costs the 2 cores enough to slow every node.
      local bps burst
      bps=$(rate_bps "$r")
      burst=$((bps / 8 * ${GOSSIP_NETNS_BUCKET_US:-1000} / 1000000))
      ((burst >= 3028)) || burst=3028
      ip -n "$(node_ns "$i")" link set dev eth0 gso_max_size $((burst < 65536 ? burst : 65536))
      ip netns exec "$(node_ns "$i")" tc qdisc replace dev eth0 root tbf rate "$r" burst "$burst" latency 200ms
    fi
  done
}

# Stops the delay line (if running) and plugs every host's veth back into the bridge.
delay_stop() {
  if [[ -f $delay_pidfile ]]; then
    local pid
    pid=$(cat "$delay_pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    rm -f "$delay_pidfile"
  fi
  ip netns list | awk '{print $1}' | grep -qx -- "$hub" || return 0
  local port i
  for port in $(ip -n "$hub" -o link show type veth | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^d[0-9]+$' || true); do
    i=${port#d}
    ip -n "$hub" link del "$port"
    ip -n "$hub" link set "h$i" master br0
  done
}

delay() {
  local ms=$1
  [[ $ms == off || $ms =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "delay needs milliseconds (like 5 or 0.5) or off, got '$ms'"
  local n i pairs=()
  n=$(num_nodes)
  ((n > 0)) || die "no hosts (run: $0 up N)"
  delay_stop
  [[ $ms != off ]] || return 0
  local bin=${GOSSIP_DELAYLINE:-$(cd "$(dirname "$0")/.." && pwd)/build/tests/fault/gossip-delayline}
  [[ -x $bin ]] || die "$bin not built (cmake --build build --target gossip-delayline; or set GOSSIP_DELAYLINE)"
  # Host i's veth h<i> leaves the bridge; a second pair d<i>/b<i> takes its place there, and the
  # delay line forwards between h<i> and d<i>.
  for ((i = 0; i < n; i++)); do
    ip -n "$hub" link set "h$i" nomaster
    ip -n "$hub" link add "d$i" type veth peer name "b$i"
    ip -n "$hub" link set "b$i" master br0
    ip -n "$hub" link set "b$i" up
    ip -n "$hub" link set "d$i" up
    pairs+=("h$i:d$i")
  done
  ip netns exec "$hub" "$bin" --delay-ms "$ms" "${pairs[@]}" </dev/null >"$delay_log" 2>&1 &
  echo $! >"$delay_pidfile"
  for _ in $(seq 50); do
    grep -q '^ready' "$delay_log" && return 0
    kill -0 "$(cat "$delay_pidfile")" 2>/dev/null || break
    sleep 0.1
  done
  cat "$delay_log" >&2
  delay_stop
  die "the delay line did not start (see above)"
}

loss() {
  local pct=$1
  shift
  [[ $pct =~ ^([0-9]{1,3})(\.([0-9]{1,2}))?$ ]] || die "loss needs a percentage 0..100 (two decimals at most), got '$pct'"
  local frac=${BASH_REMATCH[3]:-0}
  ((${#frac} == 1)) && frac="${frac}0"
  local basis=$((10#${BASH_REMATCH[1]} * 100 + 10#$frac))  # in 1/10000
  ((basis <= 10000)) || die "loss above 100%: '$pct'"
  local hosts i
  hosts=$(expand "$(IFS=,; echo "$*")")
  for i in $hosts; do
    need_node "$i"
    ip netns exec "$(node_ns "$i")" nft flush chain inet "$table" loss
    if ((basis > 0)); then
      ip netns exec "$(node_ns "$i")" nft add rule inet "$table" loss numgen random mod 10000 '<' "$basis" counter drop
    fi
  done
}

# At host $1, adds ($2 = add) or removes ($2 = del) "drop what comes from host F" for every host F
# in $3...: one `nft -a list` and one `nft -f` per host (adding a rule that is already there does
# nothing). cut_or_heal runs this for all hosts in parallel.
cut_rules() {
  local at=$1 action=$2
  shift 2
  local ns existing src handles h from script=""
  ns=$(node_ns "$at")
  existing=$(ip netns exec "$ns" nft -a list chain inet "$table" cut)
  for from in "$@"; do
    src=$(addr "$from")
    handles=$(awk -v s="$src" '$1 == "ip" && $2 == "saddr" && $3 == s {print $NF}' <<<"$existing")
    if [[ $action == add ]]; then
      [[ -n $handles ]] || script+="add rule inet $table cut ip saddr $src counter drop"$'\n'
    else
      for h in $handles; do script+="delete rule inet $table cut handle $h"$'\n'; done
    fi
  done
  [[ -z $script ]] || ip netns exec "$ns" nft -f - <<<"$script"
}

cut_or_heal() {
  local action=$1 a_list=$2 b_list=$3
  local as bs a b
  as=$(expand "$a_list" | sort -un)
  bs=$(expand "$b_list" | sort -un)
  local have
  have=$(ip netns list | awk '{print $1}')
  for a in $as $bs; do
    [[ $a =~ ^[0-9]+$ ]] || die "host index must be a number, got '$a'"
    grep -qx -- "$(node_ns "$a")" <<<"$have" || die "no host $a (run: $0 up N; hosts are 0..N-1)"
  done
  for a in $as; do
    for b in $bs; do
      [[ $a == "$b" ]] && die "cannot cut host $a from itself"
    done
  done
  # Every host at once, so the partition starts (and ends) at nearly the same moment everywhere.
  local pids=() pid failed=0
  # shellcheck disable=SC2086 # the lists are numbers, one per word
  for a in $as; do cut_rules "$a" "$action" $bs & pids+=($!); done
  # shellcheck disable=SC2086
  for b in $bs; do cut_rules "$b" "$action" $as & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  ((failed == 0)) || die "$action of the rules failed at some host (see above)"
}

heal() {
  local action=$1 a_list=$2 b_list=$3
  local a b
  for a in $(expand "$a_list"); do need_node "$a"; done
  for b in $(expand "$b_list"); do need_node "$b"; done
  for a in $(expand "$a_list"); do
    for b in $(expand "$b_list"); do
      [[ $a == "$b" ]] && die "cannot cut host $a from itself"
      cut_rule "$a" "$b" "$action"
      cut_rule "$b" "$a" "$action"
    done
  done
}

heal() {
  if (($# == 2)); then
    cut_or_heal del "$1" "$2"
  elif (($# == 0)); then
    local i pids=() pid failed=0
    for i in $(expand ""); do
      ip netns exec "$(node_ns "$i")" nft flush chain inet "$table" cut & pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
    ((failed == 0)) || die "heal failed at some host (see above)"
  else
    usage
  fi
}

rtt() {
  local from=$1 to=$2 count=${3:-400} port=$((20000 + $$ % 40000))
  need_node "$from"
  need_node "$to"
  [[ $count =~ ^[1-9][0-9]*$ ]] || die "rtt needs a count of ping-pongs, got '$count'"
  ip netns exec "$(node_ns "$to")" /usr/bin/python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(1); c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while (b := c.recv(1)): c.sendall(b)' "$port" &
  local server=$!
  ip netns exec "$(node_ns "$from")" /usr/bin/python3 -c '
import socket, statistics, sys, time
for _ in range(100):
    try:
        c = socket.create_connection((sys.argv[1], int(sys.argv[2]))); break
    except OSError:
        time.sleep(0.05)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtt = []
for _ in range(50 + int(sys.argv[3])):
    t = time.perf_counter(); c.sendall(b"x"); c.recv(1); rtt.append(time.perf_counter() - t)
print("%.7f" % statistics.median(rtt[50:]))' "$(addr "$to")" "$port" "$count"
  wait "$server" || true
}

status() {
  local n i
  n=$(num_nodes)
  echo "prefix $prefix, subnet $subnet.0/24, $n hosts"
  for ((i = 0; i < n; i++)); do
    echo "== host $i $(node_ns "$i") $(addr "$i")"
    ip netns exec "$(node_ns "$i")" tc qdisc show dev eth0 | sed 's/^/  /'
    ip -n "$hub" link show "d$i" >/dev/null 2>&1 && echo "  delay line: $(tr '\0' ' ' </proc/"$(cat "$delay_pidfile" 2>/dev/null || echo 0)"/cmdline 2>/dev/null || echo 'not running')"
    ip netns exec "$(node_ns "$i")" nft list table inet "$table" | grep -E 'drop' | sed 's/^ */  /' || true
  done
}

(($# >= 1)) || usage
cmd=$1
shift
case $cmd in
  check) (($# == 0)) || usage; check ;;
  up) (($# == 1)) || usage; up "$1" ;;
  down) (($# == 0)) || usage; down ;;
  addr) (($# == 1)) || usage; need_node "$1"; addr "$1" ;;
  exec) (($# >= 2)) || usage; need_node "$1"; ns=$(node_ns "$1"); shift; exec ip netns exec "$ns" "$@" ;;
  rate) (($# >= 1)) || usage; rate "$@" ;;
  loss) (($# >= 1)) || usage; loss "$@" ;;
  delay) (($# == 1)) || usage; delay "$1" ;;
  cut) (($# == 2)) || usage; cut_or_heal add "$1" "$2" ;;
  heal) heal "$@" ;;
  rtt) (($# == 2 || $# == 3)) || usage; rtt "$@" ;;
  status) (($# == 0)) || usage; status ;;
  *) usage ;;
esac
