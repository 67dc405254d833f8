"""The scaling model of docs/scaling.md: ring allreduce of the weight gradients over K machines on
25 Gb/s Ethernet against the backward pass, which shrinks as 1/K at a fixed global batch.
T_comm(K) = 2 (K-1)/K S/BW + 2 (K-1) alpha buckets; communication hides while T_comm(K) <= T_bwd(1)/K.
Usage: python3 bench/scaling_model.py"""
BW = 25e9 / 8 * 0.9  # bytes/s: 25 Gb/s at 90 % efficiency
ALPHA = 30e-6        # s per message step (TCP over Ethernet)
BUCKET = 1 << 20     # bytes per bucket (src/train/dist.c)
# gradient bytes; backward seconds of one node of this machine's speed at the global batch; global batch
MODELS = {
    "ResNet-9 w=0.25": (2.28e6, 0.50, 512),
    "ResNet-9 w=1": (36.3e6, 6.7, 512),
    "ResNet-50 (ImageNet head)": (102.2e6, 34.0, 256),
}
NODES = {"this machine (2 vCPUs)": 1, "64-core node (32x)": 32}
SDGP_BWD = 1 / 1.45  # SDGP 4:32: backward 1.45x shorter


def t_comm(size, k):
    return 2 * (k - 1) / k * size / BW + 2 * (k - 1) * ALPHA * max(1, round(size / BUCKET))


def k_max(size, bwd):
    k = 2
    while k < 4096 and t_comm(size, k) <= bwd / k:
        k += 1
    return k - 1


for node, speed in NODES.items():
    for name, (size, bwd, batch) in MODELS.items():
        cells = []
        for factor in (1.0, SDGP_BWD):
            k = k_max(size, bwd * factor / speed)
            cells.append(f"{k} ({batch / k:.0f})")
        print(f"| {node} | {name}, {batch} | {cells[0]} | {cells[1]} |")
