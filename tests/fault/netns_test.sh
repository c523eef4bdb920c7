#!/usr/bin/env bash
# Proves scripts/netns.sh (integration; exit 77 = skipped where namespaces cannot be made):
#   three hosts come up and reach each other over the bridge (UDP datagrams, TCP via iperf3);
#   `rate 8mbit` caps TCP throughput near 8 Mbit/s (and the link is much faster without it);
#   `delay 5` makes the TCP round trip between two hosts 10-12 ms (5 ms on each one's egress; it
#   is under 2 ms without), loses no datagram and keeps a tbf-shaped flow at its rate; `delay off`
#   restores the direct path, and `down` stops the delay line;
#   `loss 30` at a host drops about 30 % of the datagrams arriving there (binomial bounds),
#   `loss 0` drops none;
#   `cut 0 1` drops everything between hosts 0 and 1 in both directions while host 2 still
#   reaches both; `heal` restores the link; `up` is repeatable and `down` removes everything and
#   is idempotent.
# Datagrams are counted by a small Python receiver in the target namespace, so loss is measured
# one way, at the host where the rule sits.
set -euo pipefail

netns=${1:?usage: netns_test.sh path/to/netns.sh}
export GOSSIP_NETNS_PREFIX="gft$$"
scratch=$(mktemp -d /tmp/gossip-netns-test-XXXXXX)
cleanup() {
  "$netns" down >/dev/null 2>&1 || true
  rm -rf "$scratch"
}
trap cleanup EXIT

"$netns" check || exit $?   # 77: skipped, with the reason on stderr
fail() { echo "FAIL: $*" >&2; exit 1; }

"$netns" up 3
"$netns" up 3   # again: replaces the old set instead of failing
[[ $(ip netns list | grep -c "^$GOSSIP_NETNS_PREFIX-") == 4 ]] || fail "expected hub + 3 hosts"
a1=$("$netns" addr 1)
a2=$("$netns" addr 2)

# udp_delivered FROM TO COUNT: datagrams of COUNT sent from host FROM that host TO received.
# (Runs in a $(...) subshell: $BASHPID names its port and files, so no two calls share them.)
udp_delivered() {
  local from=$1 to=$2 count=$3
  local port=$((20000 + BASHPID % 40000))
  local ready="$scratch/ready.$port" result="$scratch/result.$port" sent="$scratch/sent.$port"
  "$netns" exec "$to" /usr/bin/python3 - "$port" "$ready" "$result" "$sent" <<'PY' &
import os, socket, sys, time
port, ready, result, sent = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
s.bind(("0.0.0.0", port))
s.settimeout(0.05)
open(ready, "w").close()
seen, last, done_at, start = set(), time.monotonic(), None, time.monotonic()
# Count until the sender is done and the link has been quiet for 0.3 s (30 s at most).
while time.monotonic() - start < 30:
    try:
        data, _ = s.recvfrom(64)
        seen.add(data)
        last = time.monotonic()
    except socket.timeout:
        pass
    if done_at is None and os.path.exists(sent):
        done_at = time.monotonic()
    if done_at is not None and time.monotonic() - max(last, done_at) > 0.3:
        break
open(result, "w").write(str(len(seen)))
PY
  local receiver=$!
  for _ in $(seq 100); do [[ -e $ready ]] && break; sleep 0.05; done
  [[ -e $ready ]] || fail "UDP receiver in host $to did not start"
  "$netns" exec "$from" /usr/bin/python3 - "$("$netns" addr "$to")" "$port" "$count" <<'PY'
import socket, sys, time
addr, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for k in range(count):
    s.sendto(b"%08d" % k, (addr, port))
    if k % 50 == 49:
        time.sleep(0.005)    # stay well below any queue limit: only the rule may drop
PY
  touch "$sent"
  wait "$receiver"
  cat "$result"
}

# Reachability.
n=$(udp_delivered 0 1 200)
((n == 200)) || fail "host 0 -> 1 delivered $n of 200 datagrams without any fault"

# Rate limit: TCP throughput with and without tbf on host 0's egress (iperf3 server in host 1).
# Every iperf3 runs under `timeout`: a one-shot server whose client never got through would
# otherwise wait forever (CI once hung here for its whole 240 s on a loaded machine). A server
# that is not reached within ~5 s is replaced, three times at most.
iperf_mbps() {
  local out="" server
  for _ in 1 2 3; do
    timeout 30 "$netns" exec 1 iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
    server=$!
    for _ in $(seq 50); do
      # Success needs a result too: iperf3 can exit 0 with only an "error" object in its JSON.
      out=$(timeout 15 "$netns" exec 0 iperf3 -c "$a1" -p 5201 -t 1 -J 2>/dev/null) &&
        grep -q '"sum_received"' <<<"$out" && break
      out=""
      sleep 0.1
    done
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    [[ -n $out ]] && break
  done
  [[ -n $out ]] || fail "iperf3 from host 0 to host 1 did not complete (3 servers, 50 tries each)"
  /usr/bin/python3 -c 'import json,sys; print(int(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e6))' <<<"$out"
}
free=$(iperf_mbps)
"$netns" rate 8mbit 0
capped=$(iperf_mbps)
echo "TCP host 0 -> 1: ${free} Mbit/s free, ${capped} Mbit/s with rate 8mbit" >&2
((capped >= 2 && capped <= 10)) || fail "rate 8mbit gave $capped Mbit/s"
((free >= 3 * capped)) || fail "without tbf only $free Mbit/s (with: $capped)"
"$netns" rate off 0

# tcp_rtt_ms FROM TO: the median round trip of 200 1-byte TCP ping-pongs, in 1/100 ms.
tcp_rtt_ms() {
  /usr/bin/python3 -c "print('%.0f' % ($("$netns" rtt "$1" "$2" 200) * 1e5))"
}
rtt=$(tcp_rtt_ms 0 1)   # in 1/100 ms
"$netns" delay 5
rtt5=$(tcp_rtt_ms 0 1)
printf 'TCP round trip host 0 <-> 1: %d.%02d ms, %d.%02d ms with delay 5\n' $((rtt / 100)) $((rtt % 100)) \
  $((rtt5 / 100)) $((rtt5 % 100)) >&2
((rtt < 200)) || fail "round trip without delay: $rtt hundredths of a ms"
((rtt5 >= 1000 && rtt5 <= 1200)) || fail "delay 5 gave a round trip of $rtt5 hundredths of a ms"
n=$(udp_delivered 0 2 500)
((n == 500)) || fail "delay 5 lost datagrams: $n of 500"
"$netns" rate 8mbit 0
delayed=$(iperf_mbps)
echo "TCP host 0 -> 1 with rate 8mbit and delay 5: ${delayed} Mbit/s" >&2
((delayed >= 6 && delayed <= 10)) || fail "rate 8mbit + delay 5 gave $delayed Mbit/s"
"$netns" rate off 0
"$netns" delay off
rtt=$(tcp_rtt_ms 0 1)
((rtt < 200)) || fail "delay off left a round trip of $rtt hundredths of a ms"
"$netns" delay 5   # left running: down must stop it

# Loss: 30 % at host 1's ingress. 2000 datagrams: sd of the count ~20, bounds ~ +-7 sd.
"$netns" loss 30 1
n=$(udp_delivered 0 1 2000)
echo "loss 30: $n of 2000 delivered" >&2
((n >= 1260 && n <= 1540)) || fail "loss 30% delivered $n of 2000"
"$netns" loss 0 1
n=$(udp_delivered 0 1 500)
((n == 500)) || fail "loss 0 still dropped: $n of 500"

# Cut and heal: both directions between 0 and 1; host 2 unaffected.
"$netns" cut 0 1
"$netns" cut 0 1   # idempotent
n=$(udp_delivered 0 1 100)
((n == 0)) || fail "cut 0 1: host 1 still received $n datagrams from 0"
n=$(udp_delivered 1 0 100)
((n == 0)) || fail "cut 0 1: host 0 still received $n datagrams from 1"
n=$(udp_delivered 0 2 100)
((n == 100)) || fail "cut 0 1 also hit 0 -> 2 ($n of 100)"
"$netns" heal 0 1
n=$(udp_delivered 0 1 100)
((n == 100)) || fail "heal 0 1: $n of 100"

# A partition of groups, healed all at once.
"$netns" cut 0 1,2
n=$(udp_delivered 2 0 100)
((n == 0)) || fail "cut 0 1,2: host 0 received $n from host 2"
"$netns" heal
n=$(udp_delivered 2 0 100)
((n == 100)) || fail "heal: $n of 100"

# Teardown.
delay_pid=$(cat "/run/gossip-netns-$GOSSIP_NETNS_PREFIX-delay.pid")
"$netns" down
! kill -0 "$delay_pid" 2>/dev/null || fail "down left the delay line (pid $delay_pid) running"
[[ -z $(ip netns list | grep "^$GOSSIP_NETNS_PREFIX-" || true) ]] || fail "down left namespaces behind"
"$netns" down || fail "a second down failed"
echo "netns harness: all checks passed" >&2
