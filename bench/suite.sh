#!/usr/bin/env bash
# Measures the README's headline table on the host it runs on, with the CLI's own benchmarks (each measures its
# baseline in the same run), into docs/bench/hosts/<host-id>/: machine.json (CPU model, family/model, ISA,
# caches, the ISA paths sdgp and oneDNN run, the FMA ceiling, date, commit), one .jsonl per benchmark,
# commands.txt (what ran), and summary.md (generated from them; a host's README row comes from it).
#
# Usage: bash bench/suite.sh [BUILD_DIR]       (default build; built by scripts/build.sh when missing)
#   SUITE_QUICK=1   a smoke run in about a minute: small batch, 2 steps, one n:m; writes to
#                   BUILD_DIR/suite-quick/<host-id>/ unless SUITE_OUT is set (its figures mean nothing)
#   SUITE_OUT=DIR   where to write instead;  HOST_ID=name   the folder name instead of the derived one
#   THREADS=N       threads of every measurement (default 2, as every recorded figure in docs/)
# Run it on a quiet machine: the figures are wall-clock. Ratios come from interleaved steps (--interleave),
# where separate processes would spread them by 5-15 % with the host's drift. The full run should take
# well under 20 minutes on a 2-core host (estimated from the step times in docs/bench; machine.json
# records elapsed_s). From a fresh clone on Debian: bash scripts/setup.sh first (packages), then this.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
QUICK=${SUITE_QUICK:-0}
T=${THREADS:-2}
PY=${PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3

if [ ! -x "$B/sdgp" ]; then
  echo "suite: no $B/sdgp, building it (scripts/build.sh)" >&2
  BUILD_DIR=$B bash scripts/build.sh
fi
S=$B/sdgp

# ---- the host: <vendor>-<microarchitecture where known>-f<family>m<model> ----
. bench/record.sh
field() { _bench_cpuinfo "$@"; }
bench_cpu_fields
HOST_ID=$(bench_host_id)
if [ -n "${SUITE_OUT:-}" ]; then OUT=$SUITE_OUT
elif [ "$QUICK" = 1 ]; then OUT=$B/suite-quick/$HOST_ID
else OUT=docs/bench/hosts/$HOST_ID
fi
mkdir -p "$OUT"
# only the files this run writes: a host's folder also holds its older records (docs/bench/README.md)
rm -f "$OUT"/{conv,step-torch,step-sdgp,step-all3,layers-all3}.jsonl "$OUT/commands.txt"

# ---- what runs: the full suite, or the same commands on small work (SUITE_QUICK=1) ----
if [ "$QUICK" = 1 ]; then
  STEPS="--steps 2"; NMS=2:4; SMALL="w0.25 64"; BIG=""; CONV="--model w0.25 --repeat 1"
else
  STEPS="--steps 10"; NMS=2:4,4:32; SMALL="w0.25 512"; BIG="w1 64"; CONV="--model all --repeat 5"
fi
ALL3="--prune rescaled --nm 2:4 --sparse-weights sste --weight-groups cout --nm-weights 2:4 --prune-wgrad mvue --nm-wgrad 2:4"
START=$(date +%s)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
# run NAME ARGS..: `sdgp ARGS --json`, appended to NAME.jsonl, the command to commands.txt
run() {
  local name=$1; shift
  echo "== $name: sdgp $* --json" | tee -a "$OUT/commands.txt" >&2
  local t0; t0=$(date +%s)
  "$S" "$@" --json >> "$OUT/$name.jsonl"
  echo "   $(( $(date +%s) - t0 )) s" | tee -a "$OUT/commands.txt" >&2
}

# 1. the sparse backward-data kernel against oneDNN's best dense one (and the FMA ceiling)
run conv bench conv $CONV --threads "$T" --nm $NMS --sdgp-domain pixel
# 2. our dense step against PyTorch's (the peer needs python3-torch; skipped without it)
TORCH=--no-torch
if "$PY" -c "import torch" 2>/dev/null; then TORCH="--python $PY"; else echo "suite: no torch for $PY: no PyTorch peer" >&2; fi
if [ "$QUICK" = 1 ]; then
  run step-torch bench step --model w0.25 --batch 64 --threads "$T" $STEPS $TORCH
else
  run step-torch bench step --model all --threads "$T" $STEPS $TORCH
fi
# 3. SDGP and all three products against our dense step, interleaved in one process; per product sums
for mb in "$SMALL" "$BIG"; do
  [ -n "$mb" ] || continue
  set -- $mb
  run step-sdgp bench step --model "$1" --batch "$2" --threads "$T" $STEPS --no-torch --interleave --prune rescaled --nm $NMS
  run step-all3 bench step --model "$1" --batch "$2" --threads "$T" $STEPS --no-torch --interleave $ALL3
  run layers-all3 bench layers --model "$1" --batch "$2" --threads "$T" $STEPS --no-torch --interleave $ALL3
done
END=$(date +%s)

# ---- machine.json and summary.md ----
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
DIRTY=$(git diff --quiet HEAD -- src include CMakeLists.txt 2>/dev/null && echo false || echo true)
LSCPU=$(LC_ALL=C lscpu 2>/dev/null || true)
# per-core cache sizes as the CPU reports them (cpuid, through glibc); lscpu's totals when it has them
GETCONF=$(for c in LEVEL1_DCACHE_SIZE LEVEL1_ICACHE_SIZE LEVEL2_CACHE_SIZE LEVEL3_CACHE_SIZE; do echo "$c: $(getconf $c 2>/dev/null)"; done)
FLAGS=$(field flags)
export OUT HOST_ID QUICK T COMMIT DIRTY LSCPU GETCONF FLAGS START END LOAD_BEFORE vendor family model cpu_name uarch
export LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)" STEPPING="$(field stepping)" ONEDNN_VERSION="$(dpkg-query -W -f='${Version}' libdnnl-dev 2>/dev/null || echo unknown)"
"$PY" - <<'PY'
import datetime, json, os

E = os.environ
out = E["OUT"]


def rows(name):
    p = os.path.join(out, name + ".jsonl")
    if not os.path.exists(p):
        return []
    return [json.loads(l) for l in open(p) if l.strip().startswith("{")]


lscpu = {}
for line in E["LSCPU"].splitlines():
    k, _, v = line.partition(":")
    lscpu[k.strip()] = v.strip()
flags = set(E["FLAGS"].split())
caches = {}
for line in E["GETCONF"].splitlines():
    k, _, v = line.partition(":")
    if v.strip().isdigit() and int(v) > 0:
        name = {"LEVEL1_DCACHE_SIZE": "L1d", "LEVEL1_ICACHE_SIZE": "L1i", "LEVEL2_CACHE_SIZE": "L2",
                "LEVEL3_CACHE_SIZE": "L3"}[k.strip()]
        caches[name + " (getconf)"] = f"{int(v) // 1024} KiB"
for k in ("L1d cache", "L1i cache", "L2 cache", "L3 cache"):
    if k in lscpu:
        caches[k.split()[0] + " (lscpu, all cores)"] = lscpu[k]
conv, torch, sdgp, all3, layers = (rows(n) for n in ("conv", "step-torch", "step-sdgp", "step-all3", "layers-all3"))
ceiling = next((r["fma_ceiling_gflops"] for r in conv if "fma_ceiling_gflops" in r and "layer" not in r), None)
dense = next((r for r in torch if r.get("prune") == "none" and "isa" in r), {})
uarch = {"zen2": "Zen 2", "zen3": "Zen 3", "zen4": "Zen 4", "zen5": "Zen 5"}.get(E["uarch"], "")
machine = {
    "host_id": E["HOST_ID"],
    "cpu_model": E["cpu_name"],
    "vendor": E["vendor"],
    "family": int(E["family"]) if E["family"].isdigit() else E["family"],
    "model": int(E["model"]) if E["model"].isdigit() else E["model"],
    "stepping": E["STEPPING"],
    "microarchitecture": uarch or "not derived (see family/model)",
    "isa": [f for f in ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16",
                        "avx512_vnni", "amx_tile", "amx_bf16") if f in flags],
    "hypervisor": "hypervisor" in flags,
    "cpus": lscpu.get("CPU(s)"),
    "caches": caches,
    "sdgp_isa": dense.get("isa"),
    "onednn_isa": dense.get("onednn_isa"),
    "onednn_package": E["ONEDNN_VERSION"],
    "fma_ceiling_gflops": ceiling,
    "threads": int(E["T"]),
    "date": datetime.datetime.fromtimestamp(int(E["START"]), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "elapsed_s": int(E["END"]) - int(E["START"]),
    "commit": E["COMMIT"],
    "uncommitted_changes_in_src": E["DIRTY"] == "true",
    "quick": E["QUICK"] == "1",
    "load_average_before": E["LOAD_BEFORE"],
    "load_average_after": E["LOAD_AFTER"],
}
json.dump(machine, open(os.path.join(out, "machine.json"), "w"), indent=1)


def x(v):
    return "-" if v is None else f"{v:.2f}x"


def mb(r):
    return f"{r['model'].split('-')[1]} b{r['batch']}" if "batch" in r else r["model"]


L = []
m = machine
L.append(f"# {m['host_id']}: the headline benchmarks\n")
if m["quick"]:
    L.append("**SUITE_QUICK=1: a smoke run (small batch, 2 steps). These figures mean nothing.**\n")
L.append(f"{m['cpu_model']} ({m['microarchitecture']}; family {m['family']} model {m['model']}), "
         f"{m['cpus']} CPUs{' under a hypervisor' if m['hypervisor'] else ''}; caches "
         + (", ".join(f"{k} {v}" for k, v in m["caches"].items()) or "not reported")
         + f". sdgp's kernels: {m['sdgp_isa']}, oneDNN's: {m['onednn_isa']}; FMA ceiling "
         + (f"{m['fma_ceiling_gflops']:.1f} GFLOP/s" if m["fma_ceiling_gflops"] else "-")
         + f" on {m['threads']} threads. {m['date']}, commit {m['commit']}"
         + (" (with uncommitted changes)" if m["uncommitted_changes_in_src"] else "")
         + f", `bash bench/suite.sh` ({m['elapsed_s']} s; load {m['load_average_before']} before). "
         "Commands: `commands.txt`; raw rows: `*.jsonl`.\n")

L.append("## Training steps\n")
L.append("| measurement | model, batch | ours ms | baseline ms | speed-up | peak RSS ours / PyTorch MB |")
L.append("|---|---|---|---|---|---|")
for r in torch:
    if r.get("prune") != "none":
        continue
    if r.get("torch_ms"):
        L.append(f"| dense step, ours vs PyTorch | {mb(r)} | {r['ours_ms']:.0f} | {r['torch_ms']:.0f} | "
                 f"**{r['speedup']:.2f}x** | {r['ours_rss_mb']:.0f} / {r['torch_rss_mb']:.0f} |")
    else:
        L.append(f"| dense step (no PyTorch peer) | {mb(r)} | {r['ours_ms']:.0f} | - | - | {r['ours_rss_mb']:.0f} / - |")
for name, rs in (("SDGP rescaled", sdgp), ("all three 2:4 (S-STE cout + SDGP rescaled + MVUE wgrad)", all3)):
    for r in rs:
        if not r.get("interleaved") or "sdgp_ms" not in r:
            continue
        what = f"{name} {r['nm']} vs our dense" if name.startswith("SDGP") else name + " vs our dense"
        L.append(f"| {what} | {mb(r)} | {r['sdgp_ms']:.0f} | {r['dense_ms']:.0f} | **{r['speedup']:.2f}x** | - |")
L.append("\nSpeed-up: baseline time / ours. SDGP and all-three rows: each variant's steps alternate with a dense "
         "partner's in one process (`--interleave`); kernels per layer are chosen at start (`--sparse-kernel auto`).\n")

if layers:
    L.append("## All three products at 2:4, per product (sums over conv1-conv7, interleaved)\n")
    L.append("| model | forward | backward-data (pruning included) | backward-weights (pruning included) |")
    L.append("|---|---|---|---|")
    for r in layers:
        if "sums" in r:
            L.append(f"| {r['model']} | {r['fwd_ratio']:.2f}x | {r['bwd_data_ratio']:.2f}x | {r['bwd_weights_ratio']:.2f}x |")
    L.append("")

tot = [r for r in conv if r.get("layer", "").endswith("/total")]
if tot:
    L.append("## The sparse backward-data kernel against oneDNN's best dense one (`sdgp bench conv`, pixel domain)\n")
    L.append("| model | n:m | threads | best dense ms | sparse ms | prune ms | vs best dense, pruning included |")
    L.append("|---|---|---|---|---|---|---|")
    for r in tot:
        L.append(f"| {r['layer'][:-6]} | {r['nm']} | {r['threads']} | {r.get('best_dense_ms', 0):.1f} | "
                 f"{r['sparse_ms']:.1f} | {r.get('prune_ms', 0):.1f} | {x(r.get('speedup_vs_best'))} |")
    L.append("")
open(os.path.join(out, "summary.md"), "w").write("\n".join(L) + "\n")
PY
echo "suite: $OUT/summary.md ($(( END - START )) s)" >&2
