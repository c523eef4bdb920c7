#!/usr/bin/env bash
# Creates a cluster CA and one certificate per node for gossip-sgd's TLS links (docs/net.md,
# "Certificates"), with the openssl CLI.
#
#   scripts/gen-certs.sh OUT_DIR NUM_NODES JOB_ID [FIRST_ID]
#
# Writes OUT_DIR/ca.pem (the cluster CA certificate; ca.key is its key, keep it offline) and, for
# every id in FIRST_ID .. FIRST_ID+NUM_NODES-1, node-<id>.pem / node-<id>.key with subject
# "/O=gossip-sgd/OU=<JOB_ID>/CN=node-<id>" and a SAN URI gossip://<JOB_ID>/node/<id>. Keys are
# EC P-256, created with mode 0600 (gossip_net refuses keys readable by group or others).
# Reuses an existing CA in OUT_DIR, so more nodes can be added later.
set -euo pipefail

if (($# < 3)); then
  echo "usage: $0 OUT_DIR NUM_NODES JOB_ID [FIRST_ID]" >&2
  exit 2
fi
out=$1
n=$2
job=$3
first=${4:-0}
days=${GOSSIP_CERT_DAYS:-825}
[[ $n =~ ^[0-9]+$ && $first =~ ^[0-9]+$ ]] || { echo "NUM_NODES and FIRST_ID must be integers" >&2; exit 2; }
[[ $job =~ ^[A-Za-z0-9._-]{1,64}$ ]] || { echo "JOB_ID must be 1-64 of [A-Za-z0-9._-]" >&2; exit 2; }

umask 077
mkdir -p "$out"
if [[ ! -f $out/ca.pem ]]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$out/ca.key" -out "$out/ca.pem" -days "$days" \
    -subj "/O=gossip-sgd/OU=$job/CN=gossip-sgd cluster CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

ext=$(mktemp)
trap 'rm -f "$ext"' EXIT
for ((i = first; i < first + n; i++)); do
  name="node-$i"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$out/$name.key" -out "$out/$name.csr" \
    -subj "/O=gossip-sgd/OU=$job/CN=$name" 2>/dev/null
  cat >"$ext" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=URI:gossip://$job/node/$i
EXT
  openssl x509 -req -in "$out/$name.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" \
    -CAcreateserial -out "$out/$name.pem" -days "$days" -extfile "$ext" 2>/dev/null
  rm -f "$out/$name.csr"
  chmod 600 "$out/$name.key"
  chmod 644 "$out/$name.pem"
done
chmod 644 "$out/ca.pem"
echo "gen-certs: CA and $n node certificates (job $job) in $out" >&2
