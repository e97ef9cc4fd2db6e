# bench-lib.sh: shared by integration/bench-process, bench-runc and bench-rss
# (sourced, not run). The caller sets PROG (its name in messages) first.
#
# Gives: die/log; bench_preflight (root, the binary, the tools: one clear line
# and a non-zero exit when anything is missing, never a silent pass);
# bench_host, bench_cache_padding, bench_rootfs and bench_bundle to build the
# fixtures; bench_cleanup_containers; BENCH_OUT, where fixtures go.
# shellcheck shell=bash

die() { echo "$PROG: error: $*" >&2; exit 1; }
log() { echo "$PROG: $*" >&2; }

BENCH_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Fixtures go to $BENCH_OUT/bench-*; another directory keeps a run apart from
# someone else's run of the same benchmark on the same checkout.
BENCH_OUT=$(realpath -m -- "${BENCH_OUT:-$BENCH_HERE/out}")

# cgroup v2 on a cgroup v1 host: runc in a private mount namespace with the
# cgroup2 hierarchy mounted on /sys/fs/cgroup (device control on v2 is a BPF
# program, which needs no controller, so this works beside v1's devices).
# As an array to run directly, and as hyperfine's command prefix (-N splits
# its commands like a shell, quotes included).
# shellcheck disable=SC2016   # $0 and $@ are for the inner sh
V2_WRAP=(unshare -m --propagation private sh -c 'mount -t cgroup2 none /sys/fs/cgroup && exec "$0" "$@"')
# shellcheck disable=SC2016,SC2034   # the inner sh expands them; used by the callers
V2_PREFIX='unshare -m --propagation private sh -c '\''mount -t cgroup2 none /sys/fs/cgroup && exec "$0" "$@"'\'' '

# bench_preflight BINARY TOOL...: exits with one line unless we are root, the
# binary is executable and every tool is on PATH.
bench_preflight() {
  local bin=$1 t; shift
  [[ $(id -u) -eq 0 ]] || die "must run as root (simhost uses mknod; runc needs root); try: sudo $0"
  [[ -x $bin ]] || die "no executable binary at $bin: run make build"
  for t in "$@"; do
    command -v "$t" >/dev/null || die "$t missing: run integration/install-deps"
  done
}

# bench_host DIR GPUS [PADDING]: a synthetic simhost with GPUS GPUs and PADDING
# extra ld.so.cache entries in DIR. Quiet; simhost's own log on failure.
bench_host() {
  local dir=$1 gpus=$2 pad=${3:-0} out
  out=$("$BENCH_HERE/simhost" --flavour synthetic --gpus "$gpus" --cache-padding "$pad" \
          --out "$dir" 2>&1) || { printf '%s\n' "$out" >&2; die "simhost --gpus $gpus --cache-padding $pad --out $dir failed"; }
}

# bench_cache_entries DIR: how many entries the simhost in DIR has in its
# driver's ld.so.cache (the count in ldconfig -p's first line).
bench_cache_entries() {
  local listing first
  # Whole output first: `| head -n1` would SIGPIPE ldconfig (fatal under pipefail).
  listing=$(ldconfig -p -C "$1/driver/etc/ld.so.cache") || die "ldconfig -p -C $1/driver/etc/ld.so.cache failed"
  first=${listing%%$'\n'*}
  [[ $first =~ ^([0-9]+)\ libs\ found ]] || die "cannot count the entries of $1/driver/etc/ld.so.cache: $first"
  echo "${BASH_REMATCH[1]}"
}

# bench_cache_padding DIR TOTAL: the --cache-padding that gives a host like
# the one in DIR a cache of TOTAL entries.
bench_cache_padding() {
  local base
  base=$(bench_cache_entries "$1")
  ((base < $2)) || die "$1 already has $base cache entries, not fewer than $2"
  echo $(($2 - base))
}

# bench_rootfs DIR: the runtime tests' template root filesystem in DIR.
bench_rootfs() {
  local out
  out=$("$BENCH_HERE/rootfs" "$1" 2>&1) || { printf '%s\n' "$out" >&2; die "integration/rootfs $1 failed"; }
}

# bench_bundle DIR ROOTFS CAPS HOOK_PATH HOOK_ARGV...: a runc bundle in DIR
# whose container runs /bin/true on root ROOTFS (writable, as the hook needs)
# with NVIDIA_VISIBLE_DEVICES=all and NVIDIA_DRIVER_CAPABILITIES=CAPS, and one
# prestart hook: HOOK_PATH run with argv HOOK_ARGV.
bench_bundle() {
  local dir=$1 rootfs=$2 caps=$3; shift 3
  mkdir -p "$dir"
  rm -f -- "$dir/config.json"
  (cd "$dir" && runc spec) || die "runc spec in $dir failed"
  python3 - "$dir/config.json" "$rootfs" "$caps" "$@" <<'PY' || die "cannot write $dir/config.json"
import json, sys
path, rootfs, caps, hook, *argv = sys.argv[1:]
c = json.load(open(path))
c["process"]["terminal"] = False
c["process"]["args"] = ["/bin/true"]
c["process"]["env"] = ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all", f"NVIDIA_DRIVER_CAPABILITIES={caps}"]
c["root"] = {"path": rootfs, "readonly": False}
c["hooks"] = {"prestart": [{"path": hook, "args": argv, "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]}]}
json.dump(c, open(path, "w"), indent=1)
PY
}

# bench_cleanup_containers STATE: deletes every container runc still knows in
# STATE. A container made under V2_WRAP is deleted under it too, since its
# cgroup is only visible there. Never fails: it runs from traps.
bench_cleanup_containers() {
  local state=$1 id
  [[ -d $state ]] || return 0
  for id in $(runc --root "$state" list -q 2>/dev/null); do
    runc --root "$state" delete -f "$id" >/dev/null 2>&1 ||
      "${V2_WRAP[@]}" runc --root "$state" delete -f "$id" >/dev/null 2>&1 ||
      log "warning: could not delete leftover container $id (runc --root $state)"
  done
}
