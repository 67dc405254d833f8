#!/usr/bin/env bash
# Runs each fuzz target for a bounded time on its seed corpus and fails on any crash, leak,
# sanitizer report or timeout. Usage: fuzz/run.sh [seconds-per-target, default 60]
# The committed seeds (fuzz/corpus/<target>/) are read only; inputs the fuzzer finds go to
# fuzz/build/work/<target>/, crash reproducers to fuzz/build/artifacts/.
set -uo pipefail
secs=${1:-60}
here=$(cd "$(dirname "$0")" && pwd)
build=$here/build
"$here/build.sh" "$build" || exit 1
status=0
for t in fuzz_idx fuzz_cifar fuzz_safetensors fuzz_config; do
    work=$build/work/$t
    art=$build/artifacts/$t/
    mkdir -p "$work" "$art"
    log=$build/$t.log
    # One process, bounded time; -timeout: a single input taking > 10 s is a bug (hang).
    OMP_NUM_THREADS=1 "$build/$t" "$work" "$here/corpus/$t" -max_total_time="$secs" -timeout=10 \
        -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1 -artifact_prefix="$art" >"$log" 2>&1
    rc=$?
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
    speed=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    crashes=$(find "$art" -type f | wc -l)
    if [ $rc -ne 0 ] || [ "$crashes" -ne 0 ] || grep -q 'ERROR: \(AddressSanitizer\|LeakSanitizer\)\|runtime error:' "$log"; then
        echo "$t: FAILED (exit $rc, $crashes artifacts in $art); see $log"
        grep -m5 -A20 'ERROR:\|runtime error:\|invariant failed' "$log" | head -40
        status=1
    else
        echo "$t: ok, ${execs:-?} executions in ${secs}s (${speed:-?}/s), ${cov:-cov: ?}, corpus $(ls "$work" | wc -l) new inputs"
    fi
done
exit $status
