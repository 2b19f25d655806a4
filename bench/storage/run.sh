#!/usr/bin/env bash
# GET throughput of gantry-storage against nginx serving the same files from the same directory,
# for a 4 KiB and a 64 MiB tarball, with wrk on loopback. Both run without authentication, both
# as local processes on loopback ports. Prints requests/s, MB/s, the ratios to nginx and the
# storage server's peak RSS.
#
#   bash bench/storage/run.sh            # defaults below
#   DURATION=5s ROUNDS=1 bash bench/storage/run.sh
#
# Every load run is bounded by DURATION; the best of ROUNDS runs counts for each server and size.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

DURATION="${DURATION:-10s}"
WARMUP="${WARMUP:-2s}"
ROUNDS="${ROUNDS:-2}"
SMALL_CONNECTIONS="${SMALL_CONNECTIONS:-64}"
LARGE_CONNECTIONS="${LARGE_CONNECTIONS:-8}"
THREADS="${THREADS:-1}"
# nginx's sendfile (on in Debian's default configuration); "off" makes it copy through
# userspace buffers like gantry-storage does, which is faster on loopback for large files.
NGINX_SENDFILE="${NGINX_SENDFILE:-on}"

need=()
command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]] || need+=(nginx)
command -v wrk >/dev/null || need+=(wrk)
command -v curl >/dev/null || need+=(curl)
if ((${#need[@]})); then
  echo "==> apt-get install ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
NGINX="$(command -v nginx || echo /usr/sbin/nginx)"

echo "==> cargo build --release -p gantry-storage"
cargo build --release -p gantry-storage --quiet
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
BIN="$target_dir/release/gantry-storage"

work="$(mktemp -d /tmp/gantry-storage-bench.XXXXXX)"
# nginx workers may run as another user: let them read the files.
chmod 755 "$work"
storage_pid=""
nginx_pid=""
cleanup() {
  [[ -n "$storage_pid" ]] && kill "$storage_pid" 2>/dev/null && wait "$storage_pid" 2>/dev/null
  [[ -n "$nginx_pid" ]] && kill "$nginx_pid" 2>/dev/null && wait "$nginx_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

root="$work/root"
mkdir -p "$root/bench"
make_tarball() { # size -> prints the digest
  local tmp="$work/tmp.$1"
  head -c "$1" /dev/urandom >"$tmp"
  local digest
  digest="$(sha256sum "$tmp" | cut -d' ' -f1)"
  mv "$tmp" "$root/bench/$digest.tar.gz"
  echo "$digest"
}
SMALL_SIZE=4096
LARGE_SIZE=$((64 * 1024 * 1024))
small_digest="$(make_tarball $SMALL_SIZE)"
large_digest="$(make_tarball $LARGE_SIZE)"
chmod -R a+rX "$root"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

deadline_wait() { # description, command...
  local what="$1"; shift
  for _ in $(seq 1 300); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "timed out waiting for $what" >&2
  return 1
}

echo "==> starting gantry-storage"
"$BIN" --root "$root" --listen 127.0.0.1:0 --insecure-no-auth 2>"$work/storage.log" &
storage_pid=$!
deadline_wait "the storage server's address" grep -q "listening on" "$work/storage.log"
storage_addr="$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$work/storage.log" | head -1)"
deadline_wait "the storage server to be ready" curl -fsS "http://$storage_addr/readyz"

echo "==> starting nginx"
nginx_port="$(free_port)"
mkdir -p "$work/nginx"
user_line=""
[[ "$(id -u)" == 0 ]] && user_line="user root;"
cat >"$work/nginx/nginx.conf" <<EOF
daemon off;
master_process on;
$user_line
worker_processes auto;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile $NGINX_SENDFILE;
  output_buffers 2 256k;
  tcp_nopush on;
  tcp_nodelay on;
  keepalive_requests 1000000;
  default_type application/gzip;
  client_body_temp_path $work/nginx/body;
  proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fastcgi;
  uwsgi_temp_path $work/nginx/uwsgi;
  scgi_temp_path $work/nginx/scgi;
  server {
    listen 127.0.0.1:$nginx_port;
    location /bundles/ { alias $root/; }
  }
}
EOF
"$NGINX" -p "$work/nginx" -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
nginx_pid=$!
nginx_addr="127.0.0.1:$nginx_port"
deadline_wait "nginx" curl -fsS -o /dev/null "http://$nginx_addr/bundles/bench/$small_digest.tar.gz"

# Both must serve the same bytes before their speed means anything.
for addr in "$storage_addr" "$nginx_addr"; do
  for digest in "$small_digest" "$large_digest"; do
    got="$(curl -fsS "http://$addr/bundles/bench/$digest.tar.gz" | sha256sum | cut -d' ' -f1)"
    if [[ "$got" != "$digest" ]]; then
      echo "http://$addr/bundles/bench/$digest.tar.gz served content with sha256 $got" >&2
      exit 1
    fi
  done
done

run_wrk() { # addr digest connections -> prints requests/s
  local url="http://$1/bundles/bench/$2.tar.gz" out
  out="$(wrk -t"$THREADS" -c"$3" -d"$DURATION" --timeout 30s "$url")"
  if grep -q "Non-2xx" <<<"$out"; then
    echo "non-2xx answers from $url:" >&2
    echo "$out" >&2
    exit 1
  fi
  awk '/^Requests\/sec:/ {print $2}' <<<"$out"
}

best() { # current candidate -> max
  awk -v a="$1" -v b="$2" 'BEGIN { print (a > b ? a : b) }'
}

declare -A rps
for size in small large; do
  if [[ $size == small ]]; then digest=$small_digest; conns=$SMALL_CONNECTIONS; else digest=$large_digest; conns=$LARGE_CONNECTIONS; fi
  for server in gantry nginx; do
    addr=$storage_addr
    [[ $server == nginx ]] && addr=$nginx_addr
    wrk -t"$THREADS" -c"$conns" -d"$WARMUP" "http://$addr/bundles/bench/$digest.tar.gz" >/dev/null
    rps[$server-$size]=0
  done
  for round in $(seq 1 "$ROUNDS"); do
    for server in gantry nginx; do
      addr=$storage_addr
      [[ $server == nginx ]] && addr=$nginx_addr
      r="$(run_wrk "$addr" "$digest" "$conns")"
      echo "    $size ($conns connections) round $round: $server $r requests/s"
      rps[$server-$size]="$(best "${rps[$server-$size]}" "$r")"
    done
  done
done

peak_rss_kib="$(awk '/^VmHWM:/ {print $2}' "/proc/$storage_pid/status")"

echo
echo "nginx: sendfile $NGINX_SENDFILE, worker_processes auto; wrk: $THREADS thread(s), $DURATION per run, best of $ROUNDS"
printf "%-22s %14s %12s %14s %12s %8s\n" "tarball" "gantry req/s" "gantry MB/s" "nginx req/s" "nginx MB/s" "ratio"
status=0
for size in small large; do
  if [[ $size == small ]]; then bytes=$SMALL_SIZE; label="4 KiB"; else bytes=$LARGE_SIZE; label="64 MiB"; fi
  g=${rps[gantry-$size]}
  n=${rps[nginx-$size]}
  line="$(awk -v g="$g" -v n="$n" -v b="$bytes" -v l="$label" 'BEGIN {
    printf "%-22s %14.1f %12.1f %14.1f %12.1f %7.2fx", l, g, g*b/1e6, n, n*b/1e6, (n > 0 ? g/n : 0)
  }')"
  ratio="$(awk -v g="$g" -v n="$n" 'BEGIN { print (n > 0 && g/n >= 0.9) ? "ok" : "below" }')"
  [[ $ratio == ok ]] || status=1
  echo "$line  (target >= 0.90x: $ratio)"
done
rss_mib="$(awk -v k="$peak_rss_kib" 'BEGIN { printf "%.1f", k/1024 }')"
rss_ok="$(awk -v k="$peak_rss_kib" 'BEGIN { print (k < 32*1024) ? "ok" : "above" }')"
[[ $rss_ok == ok ]] || status=1
echo "gantry-storage peak RSS (VmHWM): $rss_mib MiB  (target < 32 MiB: $rss_ok)"
exit $status
