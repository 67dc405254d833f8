"""Markdown tables from the JSON lines that bench/run_all.sh records under docs/bench/hosts/<host-id>/run-all/
(run_all.sh writes its summary.md with this).
Usage: python3 bench/summarize.py DIR > DIR/summary.md"""
import json
import os
import sys

if len(sys.argv) != 2:
    sys.exit("usage: python3 bench/summarize.py DIR > DIR/summary.md  (DIR: docs/bench/hosts/<host-id>/run-all)")
d = sys.argv[1]


def rows(name):
    path = os.path.join(d, name + ".jsonl")
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path) if line.strip().startswith("{")]


print(open(os.path.join(d, "machine.txt")).read().strip().replace("\n", "  \n"), "\n")

p = rows("prune")
if p:
    print("## `sdgp bench prune`: prune + compress, GB/s and ratio to a plain copy in the same run\n")
    print("| fn | n:m | threads | GB/s | copy GB/s | ratio |\n|---|---|---|---|---|---|")
    for r in p:
        print(f"| {r['fn']} | {r['nm']} | {r['threads']} | {r['gbps']:.1f} | {r['copy_gbps']:.1f} | {r['ratio']:.2f} |")
    print()

c = [r for r in rows("conv") if r.get("layer", "").endswith("/total")]
if c:
    # Rows recorded before the Winograd baselines and domains existed: the pixel domain against
    # direct only (no best-dense figure: Winograd was not measured then).
    def ms(v):
        return "-" if v is None else f"{v:.1f}"

    def ratio(v):
        return "-" if v is None else f"{v:.2f}x"

    print("## `sdgp bench conv`: sparse backward-data against oneDNN dense (direct, Winograd with 48 MB, "
          "best of the two), totals over the pruned layers weighted by their count in the model\n")
    print("| model | n:m | threads | domain | layers | dense direct ms | dense Winograd ms | best dense ms | sparse ms | "
          "prune ms | speedup vs direct | speedup vs best (prune included) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in c:
        layers = f"{r['layers']} of {r['model_layers']}" if "layers" in r else ""
        if r.get("domain") == "auto" and "auto_winograd_layers" in r:
            layers += f" (winograd in {r['auto_winograd_layers']})"
        print(f"| {r['layer'][:-6]} | {r['nm']} | {r['threads']} | {r.get('domain', 'pixel')} | {layers} | "
              f"{ms(r.get('dense_direct_ms', r['dense_ms']))} | {ms(r.get('dense_winograd_ms'))} | "
              f"{ms(r.get('best_dense_ms'))} | {r['sparse_ms']:.1f} | {r.get('prune_ms', 0):.1f} | "
              f"{ratio(r['speedup'])} | {ratio(r.get('speedup_vs_best'))} |")
    print()

def conv_desc(r):
    """Rows recorded before --conv-algo existed ran direct; before --conv-workspace, no limit."""
    algo, ws = r.get("conv_algo", "direct"), r.get("conv_ws_mb", 0)
    return algo if algo == "direct" else f"{algo}, {ws} MB" if ws else f"{algo}, no limit"

s = rows("step") + rows("step-direct") + rows("step-workspace")
if s:
    print("## `sdgp bench step`: one training step, ours against PyTorch 1.13 (2 threads)\n")
    print("| model | batch | our convs (workspace limit) | prune | n:m | ours ms | PyTorch ms | speedup vs our dense | "
          "vs PyTorch | peak RSS ours / torch MB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in s:
        algo = conv_desc(r)
        if r["prune"] == "none":
            print(f"| {r['model']} | {r['batch']} | {algo} | dense | | {r['ours_ms']:.1f} | {r['torch_ms']:.1f} | 1.00 | "
                  f"{r['speedup']:.2f}x | {r['ours_rss_mb']:.0f} / {r['torch_rss_mb']:.0f} |")
        else:
            print(f"| {r['model']} | {r['batch']} | {algo} | {r['prune']} | {r['nm']} | {r['sdgp_ms']:.1f} | "
                  f"{r['torch_ms']:.1f} | {r['speedup']:.3f}x | {r['vs_torch']:.2f}x | {r['ours_rss_mb']:.0f} / |")
    print()

lay = rows("layers")
if lay:
    print("## `sdgp bench layers`: per conv layer, ms (the paper's Figure 9)\n")
    print("| model | layer | n:m | forward | bwd-data dense | bwd-data sparse | prune | bwd-weights |")
    print("|---|---|---|---|---|---|---|---|")
    for r in lay:
        print(f"| {r['model']} | {r['layer']} | {r['nm']} | {r['fwd_ms']:.2f} | {r['bwd_data_dense_ms']:.2f} | "
              f"{r['bwd_data_sparse_ms']:.2f} | {r['prune_ms']:.2f} | {r['bwd_weights_ms']:.2f} |")
