#!/usr/bin/env bash
# GET throughput of gantry-storage against nginx serving the same files from the same directory,
# for a 4 KiB and a 64 MiB tarball, with wrk on loopback. Both run without authentication, both
# as local processes on loopback ports. Prints, for every round, requests/s, MB/s, CPU time per
# request, the ratio to nginx and the load average; then the worst round of each size and the
# storage server's peak RSS. Exits non-zero when a target is missed.
#
#   bash bench/storage/run.sh            # defaults below
#   DURATION=2s SLICES=4 ROUNDS=3 bash bench/storage/run.sh
#   STORAGE_BIN=/path/to/gantry-storage bash bench/storage/run.sh   # another build, not rebuilt
#
# Every load run is bounded by DURATION (in seconds, "1s"); each round runs each server SLICES
# times; the worst of ROUNDS ratios counts for each size.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

DURATION="${DURATION:-1s}"
SLICES="${SLICES:-12}"
WARMUP="${WARMUP:-2s}"
ROUNDS="${ROUNDS:-5}"
# Worst-round ratios to nginx that pass.
SMALL_TARGET="${SMALL_TARGET:-1.00}"
LARGE_TARGET="${LARGE_TARGET:-1.00}"
# The storage server's peak RSS that passes, in MiB.
RSS_TARGET_MIB="${RSS_TARGET_MIB:-32}"
SMALL_CONNECTIONS="${SMALL_CONNECTIONS:-64}"
LARGE_CONNECTIONS="${LARGE_CONNECTIONS:-8}"
# Two wrk threads: with one, wrk's single thread can be the limit on a 2-core machine (it needs
# about as much CPU per request as a server spreads over two), which pulls the ratio towards 1
# whatever the servers do; see docs/storage-server.md.
THREADS="${THREADS:-2}"
# nginx's sendfile (on in Debian's default configuration); "off" makes it copy through
# userspace buffers like gantry-storage does, which is faster on loopback for large files.
NGINX_SENDFILE="${NGINX_SENDFILE:-on}"
# nginx opens, stats and closes the file for every request unless open_file_cache keeps the
# descriptors (off by default, as in Debian's configuration); "on" keeps up to 1000.
NGINX_OPEN_FILE_CACHE="${NGINX_OPEN_FILE_CACHE:-off}"
open_file_cache_line="open_file_cache off;"
[[ $NGINX_OPEN_FILE_CACHE == on ]] && open_file_cache_line="open_file_cache max=1000 inactive=60s;"

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

if [[ -n "${STORAGE_BIN:-}" ]]; then
  BIN="$STORAGE_BIN"
else
  echo "==> cargo build --release -p gantry-storage"
  cargo build --release -p gantry-storage --quiet
  target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
  BIN="$target_dir/release/gantry-storage"
fi

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
  $open_file_cache_line
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

run_wrk() { # addr digest connections -> prints "requests/s wrk-cpu-seconds"
  local url="http://$1/bundles/bench/$2.tar.gz" cpu
  cpu="$( { TIMEFORMAT='%U %S'; time wrk -t"$THREADS" -c"$3" -d"$DURATION" --timeout 30s "$url" >"$work/wrk.out" 2>&1; } 2>&1 )"
  if grep -q "Non-2xx" "$work/wrk.out"; then
    echo "non-2xx answers from $url:" >&2
    cat "$work/wrk.out" >&2
    exit 1
  fi
  awk -v cpu="$cpu" '/^Requests\/sec:/ { split(cpu, c, " "); print $2, c[1] + c[2] }' "$work/wrk.out"
}

cpu_ticks() { # pid... -> user+system clock ticks of the processes and their threads
  local total=0 pid
  for pid in "$@"; do
    total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
  done
  echo "$total"
}
nginx_pids() { # the master and its workers
  echo "$nginx_pid" $(pgrep -P "$nginx_pid" || true)
}
ticks_per_s="$(getconf CLK_TCK)"
secs="${DURATION%s}"

# A round measures each server SLICES times for DURATION, alternating (A B B A A B ...), and its
# ratio is gantry/nginx over the round: the load of other work on a shared machine comes in
# bursts of a few seconds, and short alternating slices spread them over both servers. The
# worst round counts. Per request,
# the CPU time of each server (all its processes and threads) and of wrk are shown too: wrk is
# the limit when its time per request on its threads exceeds the server's on its own.
status=0
summary=()
for size in small large; do
  if [[ $size == small ]]; then
    digest=$small_digest; conns=$SMALL_CONNECTIONS; bytes=$SMALL_SIZE; label="4 KiB"; target=$SMALL_TARGET
  else
    digest=$large_digest; conns=$LARGE_CONNECTIONS; bytes=$LARGE_SIZE; label="64 MiB"; target=$LARGE_TARGET
  fi
  for addr in "$storage_addr" "$nginx_addr"; do
    wrk -t"$THREADS" -c"$conns" -d"$WARMUP" "http://$addr/bundles/bench/$digest.tar.gz" >/dev/null
  done
  echo "==> $label tarball, $conns connections, $ROUNDS rounds of $SLICES x $DURATION per server"
  printf "%-5s %12s %10s %12s %10s %7s %9s %9s %9s %9s  %s\n" "round" "gantry req/s" "MB/s" \
    "nginx req/s" "MB/s" "ratio" "gantry µs" "nginx µs" "wrk µs g" "wrk µs n" "load (1 5 15 min)"
  worst=""
  for round in $(seq 1 "$ROUNDS"); do
    order=()
    for slice in $(seq 1 "$SLICES"); do
      if (((round + slice) % 2 == 0)); then order+=(gantry nginx); else order+=(nginx gantry); fi
    done
    declare -A requests=([gantry]=0 [nginx]=0) ticks=([gantry]=0 [nginx]=0) client=([gantry]=0 [nginx]=0)
    for server in "${order[@]}"; do
      if [[ $server == gantry ]]; then addr=$storage_addr; pids=("$storage_pid"); else addr=$nginx_addr; read -ra pids <<<"$(nginx_pids)"; fi
      before="$(cpu_ticks "${pids[@]}")"
      read -r rps wrk_cpu <<<"$(run_wrk "$addr" "$digest" "$conns")"
      after="$(cpu_ticks "${pids[@]}")"
      requests[$server]="$(awk -v a="${requests[$server]}" -v r="$rps" -v d="$secs" 'BEGIN { print a + r * d }')"
      ticks[$server]=$((ticks[$server] + after - before))
      client[$server]="$(awk -v a="${client[$server]}" -v c="$wrk_cpu" 'BEGIN { print a + c }')"
    done
    load="$(awk '{print $1, $2, $3}' /proc/loadavg)"
    awk -v r="$round" -v g="${requests[gantry]}" -v n="${requests[nginx]}" -v d="$secs" -v b="$bytes" \
      -v gt="${ticks[gantry]}" -v nt="${ticks[nginx]}" -v hz="$ticks_per_s" \
      -v gw="${client[gantry]}" -v nw="${client[nginx]}" -v l="$load" -v k="$SLICES" 'BEGIN {
        us = 1e6
        printf "%-5s %12.1f %10.1f %12.1f %10.1f %6.2fx %9.1f %9.1f %9.1f %9.1f  %s\n", r,
          g / (k * d), g * b / (k * d) / 1e6, n / (k * d), n * b / (k * d) / 1e6, (n > 0 ? g / n : 0),
          (g > 0 ? gt / hz / g * us : 0), (n > 0 ? nt / hz / n * us : 0),
          (g > 0 ? gw / g * us : 0), (n > 0 ? nw / n * us : 0), l
      }'
    ratio="$(awk -v g="${requests[gantry]}" -v n="${requests[nginx]}" 'BEGIN { printf "%.2f", (n > 0 ? g / n : 0) }')"
    worst="$(awk -v a="$worst" -v b="$ratio" 'BEGIN { print (a == "" || b < a) ? b : a }')"
  done
  verdict="$(awk -v w="$worst" -v t="$target" 'BEGIN { print (w >= t) ? "ok" : "below" }')"
  [[ $verdict == ok ]] || status=1
  summary+=("$(printf "%-7s worst round %.2fx nginx (target >= %.2fx: %s)" "$label" "$worst" "$target" "$verdict")")
done

peak_rss_kib="$(awk '/^VmHWM:/ {print $2}' "/proc/$storage_pid/status")"
echo
echo "nginx: sendfile $NGINX_SENDFILE, open_file_cache $NGINX_OPEN_FILE_CACHE, $(($(nginx_pids | wc -w) - 1)) worker processes; gantry-storage: $(ls /proc/$storage_pid/task | wc -l) threads (one runtime worker per core, the rest reads files); wrk: $THREADS thread(s); $(nproc) cores"
printf '%s\n' "${summary[@]}"
rss_mib="$(awk -v k="$peak_rss_kib" 'BEGIN { printf "%.1f", k/1024 }')"
rss_ok="$(awk -v k="$peak_rss_kib" -v t="$RSS_TARGET_MIB" 'BEGIN { print (k < t*1024) ? "ok" : "above" }')"
[[ $rss_ok == ok ]] || status=1
echo "gantry-storage peak RSS (VmHWM): $rss_mib MiB  (target < $RSS_TARGET_MIB MiB: $rss_ok)"
exit $status
