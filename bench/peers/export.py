"""Exports a diskgnn dataset to a peer's layout (and optionally runs the peer on it).

    python -m bench.peers.export --data DIR --to marius|ginex --out DIR [--cap 2GiB] [--fanouts 10,5]
        [--batch-size 1024] [--epochs 1] [--hidden 256] [--lr 0.003] [--device cpu|cuda]
        [--memory-budget 256MiB] [--overwrite] [--run] [--timeout SECONDS]
    python -m bench.peers.export --data DIR --to marius --task link --out DIR [--fanouts none]
        [--embeddings 64] [--embedding-lr 0.1] [--negatives 100] [--chunks 10] [--degree-fraction 0]
        [--eval-negatives 1000] [--link-loss softmax|bce] ...

--cap is the memory cap the peer will run under: MariusGNN's partition buffer and
Ginex's caches are sized from it. --run trains the peer under that cap afterwards
and prints its row as JSON (or why it did not run). --task link (MariusGNN only)
exports a dataset prepared with --edge-split for link prediction over learnable
embeddings, with diskgnn.train's link options. Layouts: docs/peers.md.
"""

from __future__ import annotations

import argparse
import json
import sys

from diskgnn.errors import DiskgnnError, run_cli

from . import ginex, marius

PEERS = {"marius": marius, "ginex": ginex}


def _fanouts(text: str) -> list[int]:
    if text == "none":
        return []  # link prediction over the embeddings alone
    try:
        fanouts = [int(f) for f in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated positive integers, e.g. 10,5") from None
    if min(fanouts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: fanouts must be positive (the peers sample uniformly)")
    return fanouts


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.peers.export", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="diskgnn dataset directory")
    ap.add_argument("--to", required=True, choices=sorted(PEERS), help="the peer's layout")
    ap.add_argument("--out", required=True, help="output directory (built beside it, then renamed)")
    ap.add_argument("--cap", default="2GiB", help="memory cap the peer runs under (sizes its buffer/caches)")
    ap.add_argument("--fanouts", type=_fanouts, default=[10, 5], help="neighbours per hop, from the seeds out")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.003, help="MariusGNN only (Ginex's Adam uses 0.003)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="MariusGNN only (Ginex: CUDA)")
    ap.add_argument("--memory-budget", default="256MiB", help="memory for the export's chunks")
    ap.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    ap.add_argument("--task", choices=["node", "link"], default="node", help="link: MariusGNN only")
    link = ap.add_argument_group("--task link (diskgnn.train's options of these names)")
    link.add_argument("--embeddings", type=int, default=64)
    link.add_argument("--embedding-lr", type=float, default=0.1)
    link.add_argument("--negatives", type=int, default=100)
    link.add_argument("--chunks", type=int, default=10)
    link.add_argument("--degree-fraction", type=float, default=0.0)
    link.add_argument("--eval-negatives", type=int, default=1000)
    link.add_argument("--link-loss", choices=sorted(marius.LOSSES), default="softmax")
    ap.add_argument("--run", action="store_true", help="then run the peer under --cap and print its row")
    ap.add_argument("--timeout", type=float, help="seconds before a --run is stopped")
    args = ap.parse_args(argv)
    for name in ("batch_size", "epochs", "hidden"):
        if getattr(args, name) < 1:
            raise DiskgnnError(f"--{name.replace('_', '-')} {getattr(args, name)}: must be at least 1")
    common = dict(cap=args.cap, fanouts=args.fanouts, batch_size=args.batch_size, epochs=args.epochs,
                  hidden=args.hidden, memory_budget=args.memory_budget, overwrite=args.overwrite)
    if args.task == "link" and args.to != "marius":
        raise DiskgnnError(f"--task link: {args.to} trains node classification only")
    if not args.fanouts and args.task != "link":
        raise DiskgnnError("--fanouts none: only for --task link (the embeddings alone)")
    if args.to == "marius":
        link = None if args.task == "node" else {
            "embeddings": args.embeddings, "embedding_lr": args.embedding_lr, "negatives": args.negatives,
            "chunks": args.chunks, "degree_fraction": args.degree_fraction, "eval_negatives": args.eval_negatives,
            "loss": args.link_loss}
        result = marius.export(args.data, args.out, lr=args.lr, device=args.device, link=link, **common)
    else:
        result = ginex.export(args.data, args.out, **common)
    print(f"exported {args.data} to {args.to}'s layout in {result['out']}")
    if args.run:
        row = PEERS[args.to].run(args.out, timeout=args.timeout)
        print(json.dumps(row, sort_keys=True))
        result["run"] = row
    return result


if __name__ == "__main__":
    sys.exit(run_cli("python -m bench.peers.export", main))
