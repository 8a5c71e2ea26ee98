#!/usr/bin/env bash
# Makes the TLS files of a cram cluster with OpenSSL, in DIR (default deploy/tls):
#   ca.pem, ca.key              the cluster's certificate authority (keep ca.key offline)
#   coordinator.pem, .key       the coordinator's certificate, signed by the CA, for the
#                               names in $CRAM_TLS_NAMES (default: coordinator,
#                               cram-coordinator, localhost, 127.0.0.1)
# An existing CA is reused, so running it again renews the coordinator's certificate only
# (rotation: docs/cluster.md#tls). The files are made readable by the containers' user.
set -euo pipefail
dir="${1:-$(dirname "$0")/tls}"
names="${CRAM_TLS_NAMES:-coordinator,cram-coordinator,localhost,127.0.0.1}"
days="${CRAM_TLS_DAYS:-365}"
mkdir -p "$dir"
cd "$dir"
if [ ! -f ca.pem ] || [ ! -f ca.key ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
        -keyout ca.key -out ca.pem -subj "/CN=cram cluster CA" 2>/dev/null
fi
san=""
IFS=, read -ra list <<<"$names"
for n in "${list[@]}"; do
    if [[ "$n" =~ ^[0-9.]+$ ]]; then san+="IP:$n,"; else san+="DNS:$n,"; fi
done
printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' \
    "${san%,}" > coordinator.ext
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout coordinator.key \
    -out coordinator.csr -subj "/CN=${list[0]}" 2>/dev/null
openssl x509 -req -in coordinator.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days "$days" \
    -extfile coordinator.ext -out coordinator.pem 2>/dev/null
rm -f coordinator.csr coordinator.ext
# The containers run as uid 65532: the files they read must be readable by it.
chmod 644 ca.pem coordinator.pem coordinator.key
chmod 600 ca.key
echo "TLS files in $(pwd): ca.pem, coordinator.pem, coordinator.key (names: $names)"
