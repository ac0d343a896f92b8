"""Accuracy studies: diskgnn.train against an in-memory reference trainer, and settings against each other.

`python -m bench.accuracy [--study reference|quantized|sampler|precision|cooperative|link]` (cli.py: the options,
then one study).

The reference study (the default): for every dataset x model x seed it trains
three times with the same hyper-parameters and the same initial weights:
`bench.harness.reference` (full batch, every neighbour, all in memory),
`diskgnn.train --sampling offline` (the default: each epoch sampled and
packed ahead, rows from the memory tier and the packs) and `diskgnn.train
--sampling online` (sampled during training, rows read from the feature
file). The bounds, on means over the seeds: |offline - reference| <= 1.5
points of test accuracy and |offline - online| <= 0.5 points.

The quantized study (issue 7): for every dataset it stores each quantized
variant once (`diskgnn.quantize`, seed 0, default fit sample), then trains
GraphSAGE offline with `--features fp32` and each variant, seeds 0..N-1, and
compares each variant's mean test accuracy with fp32's. The bounds, averaged
over the four real datasets: sq8 and lin8 each lose <= 0.3 points, and the
best setting of at least 30x compression loses <= 1.0 point.

The sampler study (issue 22): for every dataset (the four real ones and
train's synthetic default) it trains GraphSAGE offline with neighbour
sampling and with each LABOR setting (layer dependency, batch dependency κ),
seeds 0..N-1, and compares each setting's test accuracy with neighbour
sampling's, paired by seed. The precision study (issue 25) does the same
with --precision bf16 against fp32.

The link study (issue 39, link_study.py): `diskgnn.train --task link` against
the in-memory PyG reference (link_reference.py) on the same link batches and
eval negatives, paired by seed; the bound: mean test MRR and AUC within 1
point of the reference's.

Datasets are prepared once into --workdir/data (the variants beside their
features); results go to bench/results/accuracy[-quantized].json and the
tables to docs/accuracy.md, where each study rewrites only its own part.

Modules: `datasets` (the graphs and how they are prepared), `runs` (the hyper-parameters, one training run,
runs of settings x seeds and paired differences), one module per study (`reference_study`, `quantized` with
`quantized_report`, `settings` for the sampler and precision studies, `cooperative`, `link_study` with its
reference `link_reference`), each with its tables and section.
"""
