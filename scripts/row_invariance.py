"""Does a product give a row the same bits whatever the number of rows? Per dtype, on this CPU.

    .venv/bin/python scripts/row_invariance.py

For oneDNN's packed linear (`cpu_path.linear`'s kernel) at SmolLM2-135M's shapes and for `torch.bmm`
(the stacked-query attention), each row of an M-row product is compared bit for bit with the same
row computed alone (as plain decoding computes it); also with the M rows run in blocks of 32.
Exact tree verification needs 0 everywhere: a row that differs can change a greedy token.
"""

from __future__ import annotations

import torch

from treegraft_lab import cpu_path
from treegraft_lab.models import cpu_flags

SHAPES = ((3072, 576), (576, 1536), (49152, 576))  # gate|up, down, output head
ROWS = (8, 32, 33, 64, 128)


def main() -> None:
    torch.manual_seed(0)
    isa = " ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in cpu_flags())
    print(f"CPU flags: {isa}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| dtype | product [out, in] | " + " | ".join(f"M={m}" for m in ROWS) + " | M=128 in blocks of 32 |")
    print("|---|---|" + "---|" * (len(ROWS) + 1))
    for dt in (torch.float32, torch.bfloat16):
        if dt == torch.bfloat16 and not cpu_path.onednn_bf16():
            print("| bfloat16 | – | no oneDNN bf16 kernels on this CPU |")
            continue
        for o, i in SHAPES:
            p, x = cpu_path.pack((torch.randn(o, i) * 0.05).to(dt)), torch.randn(128, i).to(dt)
            alone = torch.cat([cpu_path.linear(x[r : r + 1], p) for r in range(128)])
            diff = [int((cpu_path.linear(x[:m], p) != alone[:m]).any(1).sum()) for m in ROWS]
            blocks = torch.cat([cpu_path.linear(x[s : s + 32], p) for s in range(0, 128, 32)])
            print(f"| {str(dt)[6:]} | linear [{o}, {i}] | " + " | ".join(f"{d} of {m}" for d, m in zip(diff, ROWS))
                  + f" | {int((blocks != alone).any(1).sum())} of 128 |")
        q, k = torch.randn(3, 384, 64).to(dt), torch.randn(3, 600, 64).to(dt)
        alone = torch.cat([torch.bmm(q[:, r : r + 3], k.transpose(1, 2)) for r in range(0, 384, 3)], 1)
        diff = [int((torch.bmm(q[:, : 3 * m], k.transpose(1, 2)) != alone[:, : 3 * m]).any(-1).sum()) for m in ROWS]
        print(f"| {str(dt)[6:]} | bmm q·kᵀ, 3 heads a group | " + " | ".join(f"{d} of {3 * 3 * m}" for d, m in zip(diff, ROWS)) + " | – |")


if __name__ == "__main__":
    main()
