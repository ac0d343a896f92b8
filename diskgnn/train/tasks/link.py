"""Link prediction: batches of the graph's edges, each batch's nodes sampled as seeds, a decoder scoring pairs
against shared negatives, MRR (with Hits@k and AUC) on the held-out edges."""

from __future__ import annotations

import numpy as np
import torch

from ... import defaults
from ...errors import DiskgnnError
from ...nn.link import Decoder, batch_scores, link_loss, metrics_of, rank_sums
from ...offline.link_batches import EVAL_CHUNK_EDGES, LinkEpoch, LinkSpec
from .base import EVAL_EPOCH, Task


PILOT_BATCHES = 16  # of each kind, spread over the epoch and the val set
SUMS = tuple(rank_sums(torch.zeros(0), torch.zeros(0, 1)))  # what an evaluation sums, in rank_sums' order


class LinkTask(Task):
    name, metric = "link", "mrr"
    sized_from_epoch0 = False  # an evaluation's batches may be larger than epoch 0's train batches
    uncaptured = "its loss reads each batch's own edges and negatives"

    def seeds_per_batch(self) -> int:
        """A train batch's endpoints and negatives, or an eval batch's."""
        cfg = self.cfg
        return max(2 * cfg.batch_size + cfg.chunks * cfg.negatives, 2 * EVAL_CHUNK_EDGES + cfg.eval_negatives)

    def pilot_rows(self, ds) -> int | None:
        """The input rows of PILOT_BATCHES train batches (of an unpartitioned epoch 0: a partitioned epoch samples
        among fewer neighbours) and as many val batches, sampled now, at most, times MEASURED_ROWS_HEADROOM (the
        plan keeps the fanouts' bound where it is lower). The fanouts' bound counts every seed's neighbours as new
        (the 9M-node link graph at 12,000 seeds, fanout 5: 72,000 rows, where 9,240 are read): a partitioned plan
        sizes its buffer before epoch 0, which it needs to sample."""
        from ...offline.sample import batch_key, open_graph, sample_batch

        cfg, graph = self.cfg, open_graph(ds)
        if not defaults.MEASURED_ROWS_HEADROOM:
            return None
        train = LinkEpoch(ds.indptr, ds.indices, self.link_spec(), seed=cfg.seed, epoch=0)
        val = LinkEpoch.held_out(ds.held_out_edges("val"), ds.indptr, ds.indices, negatives=cfg.eval_negatives,
                                 split_key=EVAL_EPOCH["val"])
        most = 0
        for batches, fanouts in ((train, cfg.fanout_list), (val, cfg.eval_fanout_list)):
            for b in np.unique(np.linspace(0, max(0, len(batches) - 1), min(PILOT_BATCHES, len(batches)))
                               .astype(np.int64)).tolist():
                seeds = batches[b].seeds
                most = max(most, sample_batch(graph, seeds, key=batch_key(0, b), fanouts=fanouts, seed=cfg.seed,
                                              threads=cfg.threads or 1).nodes.size)
        return int(most * defaults.MEASURED_ROWS_HEADROOM) + 1

    def link_spec(self) -> LinkSpec:
        cfg = self.cfg
        return LinkSpec(cfg.batch_size, cfg.chunks, cfg.negatives, cfg.degree_fraction)

    def check(self, ds, data) -> None:
        if "edge_split" not in ds.manifest:
            raise DiskgnnError(f"{data}: --task link needs held-out edges to score: prepare it with "
                               "--edge-split TRAIN,VAL,TEST")

    def output_dim(self, ds) -> int:
        return self.cfg.hidden

    def train_items(self, ds) -> int:
        return ds.num_edges

    def items_text(self, ds) -> str:
        return f"{ds.num_edges:,} train edges"

    def splits(self, ds) -> dict[str, int]:
        return {"train edges (the graph's)": ds.num_edges,
                **{f"{s} edges": len(ds.held_out_edges(s)) for s in ("val", "test")}}

    def eval_size(self, ds, split: str) -> int:
        return len(ds.held_out_edges(split))

    def eval_batch(self) -> int:
        return EVAL_CHUNK_EDGES

    def eval_sets(self, loader, split: str):
        return None, self.pass_batches(loader, split)

    def pass_batches(self, loader, split_or_epoch) -> LinkEpoch:
        """An epoch's train batches, or a split's eval batches (what its sample file's batch b was sampled for is
        batch b here; a pass's MiniBatch carries its own as `link`)."""
        ds = loader.ds
        if isinstance(split_or_epoch, str):
            return LinkEpoch.held_out(ds.held_out_edges(split_or_epoch), ds.indptr, ds.indices,
                                      negatives=self.cfg.eval_negatives, split_key=EVAL_EPOCH[split_or_epoch])
        return loader.epochs.link_batches(split_or_epoch)

    def workload_text(self) -> str:
        cfg = self.cfg
        return (f"; task link (batches of {cfg.batch_size} edges in {cfg.chunks} chunks of {cfg.negatives} "
                f"shared negatives, {cfg.degree_fraction:.0%} by degree; decoder {cfg.decoder}, loss "
                f"{cfg.link_loss}; eval against {cfg.eval_negatives} negatives)")

    def head(self, model) -> None:
        model.decoder = Decoder(self.cfg.decoder, self.cfg.hidden)

    def loss(self, model, out, mb):
        return link_loss(*batch_scores(model.decoder, out.float(), mb.link, mb.link.local), self.cfg.link_loss), \
            mb.link.src.size

    def eval_sums(self, model, out, mb):
        """rank_sums of the batch's held-out edges against their negatives."""
        if mb is None:
            return np.zeros(len(SUMS))
        return np.array(list(rank_sums(*batch_scores(model.decoder, out, mb.link, mb.link.local)).values()))

    def score(self, sums: list, split: str) -> float:
        """MRR; every metric kept in scores."""
        self.scores[split] = metrics_of(dict(zip(SUMS, sums)))
        return self.scores[split]["mrr"]

    def summary(self) -> dict:
        return {"test_metrics": self.scores.get("test")}

    def result_line(self, test: float, best: dict) -> str:
        m = self.scores.get("test") or {}
        return (f"test MRR {test:.4f} (Hits@1 {m.get('hits@1', float('nan')):.4f}, Hits@10 "
                f"{m.get('hits@10', float('nan')):.4f}, AUC {m.get('auc', float('nan')):.4f}; against "
                f"{self.cfg.eval_negatives} sampled negatives), best val MRR {best['val_acc']:.4f}")
