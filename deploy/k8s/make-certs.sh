#!/usr/bin/env bash
# make-certs.sh: the keys with which the silos prove who they are to each
# other and to etcd, for the base's Secrets.
#
#   deploy/k8s/make-certs.sh [-n NAMESPACE] [-d DAYS] [-o DIR]
#
# writes to DIR (by default base/tls beside this script, where the base's
# secretGenerator reads them):
#
#   peer-ca.crt, peer.crt, peer.key
#       mutual TLS between silos (--peer-tls-*): one certificate all the
#       silos share, naming silo-peers (their --peer-tls-name), signed by a
#       CA of its own; Secret silo-peer-tls
#   gossip.key
#       the gossip key (--gossip-key-file): 32 random bytes, base64;
#       Secret silo-gossip
#   etcd-ca.crt, etcd-server.crt, etcd-server.key
#       etcd's certificate, for its clients and its peers, naming its
#       members etcd-N.etcd (and their names in NAMESPACE, default
#       agentsilo); Secret etcd-tls
#   etcd-client.crt, etcd-client.key
#       the silos' client certificate for etcd (--etcd-cert); Secret
#       silo-etcd-client, with etcd-ca.crt to check etcd's (--etcd-ca)
#
# The CAs' keys stay in DIR/ca (never in a Secret). Run again, it keeps the
# CAs and the gossip key and issues new certificates, valid DAYS (default
# 365): the rotation of an expiring certificate. `kubectl apply -k` then
# updates the Secrets in place; the silos read their peer certificate and
# the gossip key again when the files change (the kubelet updates mounted
# Secrets within a minute or two), and etcd its own at its next
# connections; the etcd client certificate is read at start, so roll the
# silos for it (`kubectl rollout restart statefulset/silo`). To rotate the
# gossip key, see README "Security". Needs openssl.
set -euo pipefail
export LC_ALL=C

usage() {
  echo "usage: $0 [-n NAMESPACE] [-d DAYS] [-o DIR]" >&2
  exit 2
}

dir="$(dirname "$0")/base/tls"
ns=agentsilo
days=365
while getopts n:d:o:h opt; do
  case $opt in
    n) ns=$OPTARG ;;
    d) days=$OPTARG ;;
    o) dir=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || usage
[[ $ns =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || { echo "$0: namespace \"$ns\" is not a DNS label" >&2; exit 2; }
[[ $days =~ ^[1-9][0-9]*$ ]] || { echo "$0: days \"$days\" is not a positive number" >&2; exit 2; }
command -v openssl >/dev/null || { echo "$0: needs openssl" >&2; exit 1; }

umask 077
mkdir -p "$dir/ca"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ca NAME SUBJECT: a CA key and certificate in DIR/ca, made once and kept.
ca() {
  local name=$1 subject=$2
  if [ ! -s "$dir/ca/$name.key" ] || [ ! -s "$dir/$name.crt" ]; then
    openssl ecparam -name prime256v1 -genkey -noout -out "$dir/ca/$name.key" 2>/dev/null
    openssl req -new -x509 -sha256 -key "$dir/ca/$name.key" -subj "$subject" -days 3650 \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -out "$dir/$name.crt"
  fi
}

# issue CA OUT CN SANS USAGE: a key and a certificate signed by CA, written
# whole and then renamed into place (a silo never reads half a file).
issue() {
  local ca=$1 out=$2 cn=$3 sans=$4 usage=$5
  openssl ecparam -name prime256v1 -genkey -noout -out "$work/$out.key" 2>/dev/null
  openssl req -new -sha256 -key "$work/$out.key" -subj "/CN=$cn" -out "$work/$out.csr"
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [ -z "$sans" ] || echo "subjectAltName=$sans"
  } >"$work/$out.ext"
  openssl x509 -req -sha256 -in "$work/$out.csr" -CA "$dir/$ca.crt" -CAkey "$dir/ca/$ca.key" \
    -CAcreateserial -CAserial "$dir/ca/$ca.srl" -days "$days" -extfile "$work/$out.ext" \
    -out "$work/$out.crt" 2>/dev/null
  mv "$work/$out.key" "$dir/$out.key"
  mv "$work/$out.crt" "$dir/$out.crt"
}

ca peer-ca "/CN=agentsilo peer CA"
ca etcd-ca "/CN=agentsilo etcd CA"

# Every silo presents this one certificate, as both server and client.
issue peer-ca peer silo-peers "DNS:silo-peers,DNS:silo-peers.$ns.svc,DNS:silo-peers.$ns.svc.cluster.local" "serverAuth,clientAuth"

# etcd's members, by the names the silos and the members use.
sans="DNS:etcd,DNS:*.etcd,DNS:*.etcd.$ns.svc,DNS:*.etcd.$ns.svc.cluster.local,DNS:localhost,IP:127.0.0.1"
issue etcd-ca etcd-server etcd "$sans" "serverAuth,clientAuth"
issue etcd-ca etcd-client agentsilo-silo "" "clientAuth"

if [ ! -s "$dir/gossip.key" ]; then
  openssl rand -base64 32 >"$work/gossip.key"
  mv "$work/gossip.key" "$dir/gossip.key"
fi

echo "$0: wrote the silos' and etcd's certificates (valid $days days, namespace $ns) and the gossip key to $dir; the CAs' keys are in $dir/ca" >&2
