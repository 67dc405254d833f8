# Shared by the benchmark recorders (run_all.sh, run_sdgp_domain.sh, run_mask_block.sh, run_mpi.sh): source it, then
#   bench_cpu_fields         sets vendor, family, model, cpu_name, uarch from /proc/cpuinfo
#   bench_host_id            prints this host's folder name under docs/bench/hosts/ (HOST_ID when set):
#                            <vendor>-<microarchitecture where known>-f<family>m<model> (bench/suite.sh's too)
#   bench_machine DIR        writes DIR/machine.txt (date, commit, CPU, load before)
#   bench_run DIR NAME CMD.. runs CMD --json into DIR/NAME.jsonl
#   bench_done DIR           appends the load after
_bench_cpuinfo() { grep -m1 -E "^$1\s*:" /proc/cpuinfo 2>/dev/null | sed 's/^[^:]*:\s*//'; }
# Sets vendor, family, model, cpu_name and uarch (zen2..zen5 where the family and model tell; else empty).
bench_cpu_fields() {
  vendor=$(_bench_cpuinfo vendor_id); family=$(_bench_cpuinfo "cpu family"); model=$(_bench_cpuinfo model)
  cpu_name=$(_bench_cpuinfo "model name"); uarch=""
  if [ "$vendor" = AuthenticAMD ]; then
    case "$family" in
      25) if [ "$model" -lt 16 ] || { [ "$model" -ge 32 ] && [ "$model" -lt 96 ]; }; then uarch=zen3; else uarch=zen4; fi ;;
      26) uarch=zen5 ;;
      23) uarch=zen2 ;;
    esac
  fi
}
bench_host_id() {
  if [ -n "${HOST_ID:-}" ]; then echo "$HOST_ID"; return; fi
  local vendor family model cpu_name uarch v
  bench_cpu_fields
  case "$vendor" in AuthenticAMD) v=amd ;; GenuineIntel) v=intel ;; *) v=$(uname -m) ;; esac
  if [ -n "$family" ]; then echo "$v${uarch:+-$uarch}-f${family}m${model}"
  else echo "$v-$(echo "$cpu_name" | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '-' | sed 's/-$//')"
  fi
}
bench_machine() {
  mkdir -p "$1"
  {
    echo "date: $(date -u +%FT%TZ)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
    lscpu | grep -E "^(Model name|Vendor ID|CPU family|Model:|CPU\(s\)|L1d|L2|L3)"
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  } > "$1/machine.txt"
}
bench_run() {
  local dir=$1 name=$2; shift 2
  echo "== $name: $*"
  "$@" --json > "$dir/$name.jsonl"
}
bench_done() { echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$1/machine.txt"; }
