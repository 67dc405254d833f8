# Shared by the benchmark recorders (run_all.sh, run_sdgp_domain.sh): source it, then
#   bench_machine DIR        writes DIR/machine.txt (date, commit, CPU, load before)
#   bench_run DIR NAME CMD.. runs CMD --json into DIR/NAME.jsonl
#   bench_done DIR           appends the load after
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
