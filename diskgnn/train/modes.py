"""The run's modes as typed values, resolved once from their flags (config.py's properties): nothing past config
compares a mode's string."""

from __future__ import annotations

from enum import Enum


class Sampling(Enum):
    """--sampling: where batches come from."""

    OFFLINE = "offline"  # sampled and packed ahead, a fresh sample every epoch
    REPLAY = "replay"  # epoch 0's samples and packs for every epoch
    ONLINE = "online"  # sampled as training reaches them, rows read by id (the baseline)

    @property
    def online(self) -> bool:
        return self is Sampling.ONLINE

    @property
    def replay(self) -> bool:
        return self is Sampling.REPLAY

    @property
    def ahead(self) -> bool:
        """Batches sampled (and packed) before training reaches them."""
        return self is not Sampling.ONLINE


class Distribution(Enum):
    """--distributed: how the ranks of a torchrun share the work."""

    NONE = "none"
    INDEPENDENT = "independent"  # data parallel: a shard of the batches each, gradients averaged (DDP)
    COOPERATIVE = "cooperative"  # every rank's share of each global batch, rows exchanged

    @property
    def independent(self) -> bool:
        return self is Distribution.INDEPENDENT

    @property
    def cooperative(self) -> bool:
        return self is Distribution.COOPERATIVE


class Evaluation(Enum):
    """--eval: how the val and test splits are scored."""

    SAMPLED = "sampled"  # batches sampled and packed once, like training's
    FULL = "full"  # layer-wise inference over every neighbour
    NONE = "none"

    @property
    def sampled(self) -> bool:
        return self is Evaluation.SAMPLED

    @property
    def full(self) -> bool:
        return self is Evaluation.FULL

    @property
    def off(self) -> bool:
        return self is Evaluation.NONE


class Precision(str, Enum):
    """The step's precision once --precision is resolved for the device (plan.py's resolve_precision). A str, so
    that it is written and printed as its value."""

    FP32 = "fp32"
    BF16 = "bf16"

    __str__ = str.__str__  # its value, as a str's (not "Precision.BF16")
    __format__ = str.__format__

    @property
    def bf16(self) -> bool:
        return self is Precision.BF16


class Hag(Enum):
    """--hag: whether blocks sum through shared partial sums (loading/hag.py)."""

    OFF = "off"
    ON = "on"  # wherever a HAG sums fewer rows
    AUTO = "auto"  # where the cost model predicts it pays

    @property
    def off(self) -> bool:
        return self is Hag.OFF

    @property
    def on(self) -> bool:
        return self is Hag.ON
