"""Accuracy benchmarks: diskgnn.train against an in-memory reference trainer, and quantized features.

    python -m bench.accuracy [--datasets cora,citeseer,amazon_computers,coauthor_cs] [--models sage,gcn]
                             [--seeds 5] [--pause-while FILE]
    python -m bench.accuracy --study quantized [--datasets ...,synthetic] [--features fp32,sq1,...]
                             [--seeds 3] [--pause-while FILE]
    python -m bench.accuracy --study sampler [--datasets ...,synthetic] [--settings "neighbor;labor;..."]
    python -m bench.accuracy --study precision [--datasets ...,synthetic]
    python -m bench.accuracy --study cooperative [--datasets amazon_computers,coauthor_cs] [--seeds 10]
    python -m bench.accuracy --study link [--datasets cora,...] [--seeds 5]
    python -m bench.accuracy --study hetero [--datasets acm,imdb] [--seeds 5] [--settings reference,diskgnn,seam]
    python -m bench.accuracy [--study quantized|sampler|precision|cooperative] --smoke  # Cora, 1 seed, 3 epochs

The studies are described in bench/accuracy/__init__.py; this module checks the options and runs one.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from diskgnn.data.features import RAW_FEATURES
from diskgnn.data.quantize.spec import canonical_spec
from diskgnn.errors import DiskgnnError

from ..harness.common import REPO, machine_info
from ..harness.output import RESULTS, command_line
from .quantized import QUANT_DATASETS, QUANT_FEATURES, QUANT_SEEDS, quantized_study, saved
from .quantized_report import publish
from .cooperative import DATASETS as COOP_DATASETS, SEEDS as COOP_SEEDS, cooperative_study
from .datasets import DATASETS, SHARED, SYNTHETIC
from .hetero_study import DATASETS as HETERO_DATASETS, SYSTEMS as HETERO_SYSTEMS, hetero_study, render_hetero
from .link_study import link_study
from .reference_study import reference_study
from .runs import HOST_CACHE_FRACTION, MODEL
from .settings import PRECISION_SETTINGS, SAMPLER_DATASETS, SAMPLER_SETTINGS, SETTINGS_STUDIES, settings_study


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.accuracy", description=__doc__.split("\n\n")[0])
    ap.add_argument("--study", choices=("reference", "quantized", "sampler", "precision", "cooperative", "link",
                                        "hetero"),
                    default="reference",
                    help="reference: diskgnn.train against the in-memory reference; quantized: fp32 against "
                         "each quantized variant (issue 7); sampler: neighbour sampling against LABOR and "
                         "dependent minibatches (issue 22); precision: bf16 against fp32 (issue 25); cooperative: "
                         "2 cooperative ranks against one process (issue 38); link: --task link against PyG's "
                         "in-memory link prediction (issue 39); hetero: heterogeneous graphs (HGB ACM, IMDB) against PyG's "
                         "to_hetero in memory (issue 50)")
    ap.add_argument("--settings",
                    help="sampler and precision studies: settings to run, separated by ';' (default all; the "
                         "baseline, neighbor or fp32, is added when missing), from: " + "; ".join(SAMPLER_SETTINGS)
                         + "; " + "; ".join(PRECISION_SETTINGS))
    ap.add_argument("--datasets", help="comma-separated, from " + ", ".join(QUANT_DATASETS) + " (default: "
                    + ", ".join(DATASETS) + f"; the quantized study adds {SYNTHETIC}, train's built-in dataset)")
    ap.add_argument("--models", help="reference study: comma-separated, from sage, gcn, gat (default sage,gcn); "
                    f"the quantized study trains {MODEL}")
    ap.add_argument("--features", default=",".join(QUANT_FEATURES),
                    help="quantized study: fp32 and quantize specs, comma-separated outside a spec's options "
                         "(fp32, the baseline, is added when missing)")
    ap.add_argument("--seeds", type=int, help=f"seeds 0 .. N-1 (default 5; quantized study {QUANT_SEEDS})")
    ap.add_argument("--epochs", type=int, help="epochs for every dataset (default: each dataset's own)")
    ap.add_argument("--keep-others", action="store_true",
                    help="link study: keep --out's earlier runs of the datasets not run now (a study made dataset by "
                         "dataset)")
    ap.add_argument("--shared", default=str(SHARED), help="the real datasets' directory")
    ap.add_argument("--workdir", default=str(RESULTS / "accuracy-work"),
                    help="prepared datasets and their variants, run logs and (while they run) diskgnn workdirs")
    ap.add_argument("--out", help="result JSON (default: bench/results/accuracy.json, accuracy-quantized.json for "
                                  "the quantized study; -smoke.json with --smoke)")
    ap.add_argument("--markdown", help="tables (default: docs/accuracy.md, where each study rewrites only its own "
                                       "part; with --smoke, beside --out)")
    ap.add_argument("--host-cache-fraction", type=float, default=HOST_CACHE_FRACTION,
                    help="offline runs: the host tier's share of the stored rows' bytes (the rest read from packs)")
    ap.add_argument("--pause-while", metavar="FILE", help="before each training run, wait while FILE exists")
    ap.add_argument("--jobs", type=int, default=1, help="quantized study: training runs at once (default 1)")
    ap.add_argument("--render-only", action="store_true",
                    help="quantized and hetero studies: no training; the tables again from the runs saved in --out")
    ap.add_argument("--smoke", action="store_true", help="cora, 1 seed, 3 epochs (for the test suite); the "
                                                         "quantized study with fp32, sq16 and sq1")
    args = ap.parse_args(argv)
    quantized, sampler, coop = args.study == "quantized", args.study in SETTINGS_STUDIES, args.study == "cooperative"
    link, hetero = args.study == "link", args.study == "hetero"
    if hetero:
        return hetero_cli(args, argv)
    if args.smoke:
        args.datasets, args.seeds, args.epochs = "cora", 1, args.epochs or 3
        if quantized:
            args.features = "fp32,sq16,sq1"
        args.settings = args.settings or ("neighbor;labor + layer dep., κ=4" if args.study == "sampler" else None)
    known = QUANT_DATASETS if quantized else SAMPLER_DATASETS if sampler else tuple(DATASETS)
    names = (args.datasets or ",".join(COOP_DATASETS if coop else known)).split(",")
    if (quantized or sampler or coop or link) and args.models is not None:
        raise SystemExit(f"bench.accuracy: --models is for the reference study; the {args.study} study trains "
                         f"{MODEL}")
    table = SETTINGS_STUDIES.get(args.study, (SAMPLER_SETTINGS, None))[0]
    chosen = args.settings.split(";") if args.settings else table
    settings = list(dict.fromkeys([next(iter(table)), *(t.strip() for t in chosen if t.strip())]))
    if sampler and set(settings) - set(table):
        raise SystemExit(f"bench.accuracy: --settings: unknown {sorted(set(settings) - set(table))}; "
                         "choose from " + "; ".join(table))
    models = [MODEL] if quantized or sampler else (args.models or "sage,gcn").split(",")
    unknown = [n for n in names if n not in known] + [m for m in models if m not in ("sage", "gcn", "gat")]
    if unknown:
        raise SystemExit(f"bench.accuracy: unknown dataset(s) or model(s) {unknown}; datasets: "
                         f"{', '.join(known)}; models: sage, gcn, gat")
    try:
        features = feature_list(args.features)
    except DiskgnnError as e:
        raise SystemExit(f"bench.accuracy: --features: {e}") from None
    if args.seeds is None:
        args.seeds = QUANT_SEEDS if quantized or sampler else COOP_SEEDS if coop else 5
    if args.seeds < 1 or (args.epochs is not None and args.epochs < 1) or args.jobs < 1:
        raise SystemExit("bench.accuracy: --seeds, --epochs and --jobs must be at least 1")
    if not 0 <= args.host_cache_fraction <= 1:
        raise SystemExit(f"bench.accuracy: --host-cache-fraction {args.host_cache_fraction}: must be in [0, 1]")
    out, md, work, info = outputs(args)
    # As run: the thread count matters on a busy machine (torch's spinning threads waste a shared core).
    threads_env = f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} " if "OMP_NUM_THREADS" in os.environ else ""
    command = threads_env + command_line("bench.accuracy", argv)
    if args.render_only:
        if not quantized:
            raise SystemExit("bench.accuracy: --render-only is for the quantized and hetero studies")
        return publish(saved(out, command), md)
    if sampler:
        return settings_study(args, names, settings, work, out, md, info, command)
    if coop:
        return cooperative_study(args, names, work, out, md, info, command)
    if link:
        return link_study(args, names, work, out, md, info, command)
    if quantized:
        result = publish(quantized_study(args, names, features, work, out, info, command), md)
    else:
        result = reference_study(args, names, models, work, out, md, info, command)
    bad = [r for r in result["runs"] if not (math.isfinite(r["test_acc"]) and 0 <= r["test_acc"] <= 1)]
    if bad:
        raise SystemExit(f"bench.accuracy: {len(bad)} run(s) without a test accuracy in [0, 1], e.g. {bad[0]}")
    return result


def outputs(args) -> tuple[Path, Path, Path, dict]:
    """The study's result JSON, its markdown, its workdir (with logs/) and the machine it runs on (printed)."""
    suffix = ("" if args.study == "reference" else f"-{args.study}") + ("-smoke" if args.smoke else "")
    out = Path(args.out or RESULTS / f"accuracy{suffix}.json")
    md = Path(args.markdown) if args.markdown else (out.with_suffix(".md") if args.smoke else
                                                     REPO / "docs" / "accuracy.md")
    work = Path(args.workdir)
    (work / "logs").mkdir(parents=True, exist_ok=True)
    info = machine_info(work)
    print(f"machine: {info['summary']}")
    return out, md, work, info


def hetero_cli(args, argv) -> dict:
    if args.smoke:
        args.datasets, args.seeds = "acm", 1
    names = (args.datasets or ",".join(HETERO_DATASETS)).split(",")
    if set(names) - set(HETERO_DATASETS) or args.models is not None or args.epochs is not None:
        raise SystemExit(f"bench.accuracy: --study hetero takes --datasets from {', '.join(HETERO_DATASETS)} and "
                         "--seeds (its epochs and model are the study's)")
    args.seeds = args.seeds or 5
    out, md, work, info = outputs(args)
    if args.render_only:
        return render_hetero(out, md)
    systems = (args.settings or ",".join(HETERO_SYSTEMS)).replace(";", ",").split(",")
    if set(systems) - set(HETERO_SYSTEMS):
        raise SystemExit(f"bench.accuracy: --settings for --study hetero: systems from {', '.join(HETERO_SYSTEMS)}")
    if "reference" not in systems and not args.keep_others:
        raise SystemExit("bench.accuracy: --study hetero pairs each system with the reference: run it too, or keep "
                         "the saved one with --keep-others")
    return hetero_study(args, names, systems, work, out, md, info, command_line("bench.accuracy", argv))


def feature_list(text: str) -> list[str]:
    """fp32 first, then each spec in its canonical spelling; a comma inside a spec's options (`vq:w=8,L=256`)
    stays with the spec."""
    items: list[str] = []
    for part in text.split(","):
        if items and "=" in part and ":" not in part:
            items[-1] += "," + part
        else:
            items.append(part.strip())
    names = [RAW_FEATURES if f == RAW_FEATURES else canonical_spec(f) for f in items if f]
    return list(dict.fromkeys([RAW_FEATURES, *names]))


if __name__ == "__main__":
    main()
