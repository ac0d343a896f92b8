"""The trainer's configuration: every option once, with its default and help, and what follows from the options
(the task, the modes as typed values, fanouts as integers, sizes in bytes).

Every option has one kebab-case flag and the same key in YAML (kebab or snake case): options.py reads them
(defaults, then a YAML file, then flags) and saves the resolved configuration with the run, so a run can be
repeated from its own `config.yaml`; validation.py refuses bad values.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .. import defaults
from ..data.features import RAW_FEATURES
from ..distributed.cooperative import OWNERS
from ..distributed.group import MODES
from ..errors import UsageError
from ..io.reader import BACKENDS
from ..loading.hag import MODES as HAG_MODES
from ..nn.link import DECODERS, LOSSES
from ..store.records import OPTIMIZERS
from ..nn.models import MODELS
from ..offline.link_batches import LinkSpec
from ..offline.sample import SAMPLERS, Sampler
from ..units import parse_interval, parse_seconds, parse_size
from .modes import Distribution, Evaluation, Hag, Precision, Sampling
from .tasks import TASKS, Task

SAMPLING = tuple(m.value for m in Sampling)
EVAL = tuple(m.value for m in Evaluation)
DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("fp32", "bf16", "auto")


@dataclass
class TrainConfig:
    data: str | None = field(default=None, metadata={"help": "dataset directory (default: the built-in "
                                                             "synthetic dataset, prepared once under $DISKGNN_HOME)"})
    # choices: the registry itself, so that a task registered later is one
    task: str = field(default="node", metadata={
        "help": "node: classify the split's nodes; link: predict the graph's edges, scored against the held-out "
                "ones of a dataset prepared with --edge-split (batches of --batch-size train edges, the nodes whose "
                "representations they need sampled and packed as a node batch's seeds)", "choices": TASKS})
    model: str = field(default="sage", metadata={
        "help": "sage | gcn | gat; on a heterogeneous dataset one of them per relation (sage: RGraphSAGE), or rgcn "
                "(R-GCN with --bases)", "choices": MODELS + ("rgcn",)})
    fanouts: str = field(default="10,5", metadata={
        "help": "neighbours per layer, seeds' layer first; -1 = all. Heterogeneous: one count per layer for every "
                "relation, or per relation and layer, layers split by '/': writes=10,cites=5/writes=5 (a relation "
                "not named is not followed at that layer)"})
    batch_size: int = field(default=1024, metadata={"help": "seeds per batch"})
    hidden: int = field(default=256, metadata={"help": "hidden size"})
    heads: int = field(default=4, metadata={"help": "attention heads (gat)"})
    dropout: float = field(default=0.5, metadata={"help": "dropout between layers"})
    lr: float = field(default=0.003, metadata={"help": "Adam learning rate"})
    weight_decay: float = field(default=0.0, metadata={"help": "Adam weight decay"})
    epochs: int = field(default=3, metadata={"help": "training epochs"})
    max_batches: int | None = field(default=None, metadata={"help": "stop each epoch after N batches"})
    seed: int = field(default=0, metadata={"help": "seed for sampling, initialisation and dropout"})
    device: str = field(default="auto", metadata={"help": "auto | cpu | cuda", "choices": DEVICES})
    precision: str = field(default="fp32", metadata={
        "help": "bf16: the layers under autocast in bfloat16 (weights, optimizer and loss in fp32, neighbour "
                "sums accumulated in fp32); auto: bf16 where the device computes it natively (AVX-512 BF16, AMX, "
                "CUDA), else fp32",
        "choices": PRECISIONS})
    memory_budget: str = field(default=defaults.MEMORY_BUDGET, metadata={"help": "all host memory the run may use"})
    host_cache: str = field(default="auto", metadata={
        "help": "host cache tier budget (auto: half of what the budget leaves after the working set)"})
    device_cache: str = field(default="auto", metadata={
        "help": "device cache tier budget with CUDA (auto: a quarter of free device memory)"})
    zero_copy: str = field(default="auto", metadata={
        "help": "with CUDA, host tier rows gathered by the GPU itself from mapped pinned memory (PyTorch-Direct; "
                "needs CuPy): auto (where it can, else CPU gather + pinned copy, and the plan says why), on, off",
        "choices": ("auto", "on", "off")})
    cuda_graphs: str = field(default="auto", metadata={
        "help": "with CUDA, the train step captured as a CUDA graph and replayed per batch (shapes padded to a "
                "bucket): auto (where the run allows it: node classification, no --embeddings, no --distributed; a "
                "failed capture falls back to eager steps, said once), on (refused where it cannot), off",
        "choices": ("auto", "on", "off")})
    sampler: str = field(default="neighbor", metadata={
        "help": "neighbor: node-wise uniform; labor: LABOR-0, one variate per vertex shared by a batch's seeds "
                "(fewer distinct vertices per batch)", "choices": SAMPLERS})
    layer_dependency: bool = field(default=False, metadata={
        "help": "labor: the same variates for every layer of a batch"})
    batch_dependency: int = field(default=1, metadata={
        "help": "labor, κ: consecutive batches' variates drift and are renewed every K batches, so they sample "
                "mostly the same vertices (1: independent batches)"})
    recent_batches: str = field(default="auto", metadata={
        "help": "rows the last N batches read are kept in memory and not packed again (auto: 1 with "
                "--batch-dependency above 1, else 0)"})
    hag: str = field(default="off", metadata={
        "help": "sage and gcn on a CPU: sum neighbours through each block's HAG, shared partial sums computed once, "
                "searched as batches are sampled and stored with them; --eval full through the whole graph's, stored "
                "beside the dataset (auto: where the cost model measured by bench.hag predicts a tenth less time; "
                "on: wherever it sums fewer rows)",
        "choices": HAG_MODES})
    sampling: str = field(default="offline", metadata={
        "help": "offline: fresh samples each epoch, sampled and packed ahead; replay: one sampled epoch "
                "replayed in a new order (DiskGNN); online: sampled during training, rows read directly",
        "choices": SAMPLING})
    features: str = field(default=RAW_FEATURES, metadata={
        "help": "feature rows to train from: fp32 (features.bin as stored) or a quantized variant stored in the "
                "dataset (sq1..sq16, lin4, lin8, vq:w=16,L=2048, ...; add one with python -m diskgnn.quantize); "
                "packs, caches and reads then move code rows, decoded on the training device"})
    force_features: bool = field(default=False, metadata={
        "help": "train on a quantized variant whose fit was refused (stored with quantize --force)"})
    max_blowup: float | None = field(default=None, metadata={
        "help": "cap on packed rows / nodes (rows shared within a segment of batches are stored once)"})
    eval: str = field(default="sampled", metadata={
        "help": "sampled: offline-sampled eval batches; full: layer-wise full-neighbour inference; none",
        "choices": EVAL})
    eval_fanouts: str | None = field(default=None, metadata={"help": "fanouts of eval batches (default: --fanouts)"})
    eval_max_batches: int | None = field(default=None, metadata={"help": "evaluate on at most N batches"})
    backend: str = field(default="auto", metadata={"help": "reader backend: " + " | ".join(BACKENDS),
                                                   "choices": BACKENDS})
    read_depth: int | None = field(default=None, metadata={
        "help": f"batches whose reads are in flight at once (default: {defaults.READ_DEPTH}, fewer where "
                "--memory-budget needs it)"})
    threads: int | None = field(default=None, metadata={"help": "sampling and packing threads (default: cores)"})
    workdir: str | None = field(default=None, metadata={
        "help": "where samples, packs, checkpoints and the summary go (default: $DISKGNN_HOME/runs/NAME)"})
    resume: bool = field(default=False, metadata={
        "help": "continue from the workdir's last checkpoint (mid-epoch ones too: the next batch on); without "
                "one, start from the beginning"})
    checkpoint_every: str = field(default="10min", metadata={
        "help": "save a checkpoint during an epoch every so often: a time (90s, 10min, 1h) or a number of batches "
                "(500); 0 or off: at epoch ends only"})
    val_every: str = field(default="off", metadata={
        "help": "validate during an epoch too, every so often: a number of batches (500) or a time (5min); the "
                "epoch's batches stop for it (their pipeline's memory is the evaluation's) and go on after; off: at "
                "epoch ends only"})
    distributed: str = field(default="none", metadata={
        "help": "under torchrun: independent (data parallel: each rank trains its own batches, gradients "
                "all-reduced) or cooperative (the ranks share one batch of ranks x --batch-size seeds: each vertex "
                "read and computed once, by its owner, and exchanged all-to-all); none: one process",
        "choices": MODES})
    owner: str = field(default="hash", metadata={
        "help": "cooperative: which rank owns a vertex: hash (of its id) or range (contiguous id ranges)",
        "choices": OWNERS})
    dist_timeout: str = field(default="10min", metadata={
        "help": "distributed: how long a collective waits for the other ranks before every rank stops (longer "
                "than the slowest rank's sampling and packing of an epoch)"})
    negatives: int = field(default=100, metadata={"help": "link: negative nodes per chunk of a batch's edges"})
    chunks: int = field(default=10, metadata={"help": "link: chunks per batch, each sharing its negatives (MariusGNN's "
                                                      "protocol)"})
    degree_fraction: float = field(default=0.0, metadata={
        "help": "link: share of the negatives drawn in proportion to degree (the rest uniformly)"})
    decoder: str = field(default="dot", metadata={"help": "link: dot or distmult", "choices": DECODERS})
    link_loss: str = field(default="bce", metadata={
        "help": "link: bce (each positive against its negatives, weighed alike) or softmax (cross-entropy over "
                "each positive and its negatives)", "choices": LOSSES})
    eval_negatives: int = field(default=1000, metadata={
        "help": "link: negatives each eval batch of 1,000 held-out edges is ranked against (MRR, Hits@k, AUC)"})
    embeddings: int = field(default=0, metadata={
        "help": "learnable node embeddings of this width beside the features (a featureless dataset's input; a "
                "typed graph's: every type's), kept on disk with their optimizer state, the rows read most held in "
                "memory"})
    embedding_optimizer: str = field(default="adagrad", metadata={
        "help": "embeddings: adagrad (row-wise) or adam (lazy, as torch.optim.SparseAdam)", "choices": OPTIMIZERS})
    embedding_lr: float = field(default=0.1, metadata={"help": "embeddings: the optimizer's learning rate"})
    embedding_cache: str = field(default="auto", metadata={
        "help": "embeddings: memory for their hot rows, or the partitions' buffer (auto: half of what the budget "
                "leaves after the working set; partitioned, 3/4 of it; a typed graph's: ranked with the feature "
                "rows in the host tier)"})
    embedding_partitions: int = field(default=0, metadata={
        "help": "embeddings, link: MariusGNN's order: the table in P (2-64) partitions, as many as --embedding-cache "
                "holds in memory at once, each batch's edges, negatives and neighbours among them (0: row by row)"})
    featureless: str = field(default="learned", metadata={
        "help": "heterogeneous: node types without features get a learned row each (learned: in memory; table: "
                "the --embeddings store per type, on disk with its optimizer state, hot rows in memory, "
                "--embedding-optimizer, --embedding-lr) or a fixed one hashed from the node's id (hashed: no memory)",
        "choices": ("learned", "table", "hashed")})
    bases: int = field(default=0, metadata={
        "help": "rgcn: relation matrices as combinations of this many shared bases (0: one matrix per relation)"})
    relation_aggr: str = field(default="sum", metadata={
        "help": "heterogeneous sage: a type's relations' outputs summed (as PyG's to_hetero) or averaged",
        "choices": ("sum", "mean")})
    summary_json: str | None = field(default=None, metadata={"help": "also write the summary JSON here"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})

    @property
    def task_spec(self) -> Task:
        """--task as the run's Task (tasks/)."""
        return TASKS[self.task](self)

    @property
    def sampling_mode(self) -> Sampling:
        return Sampling(self.sampling)

    @property
    def distribution(self) -> Distribution:
        return Distribution(self.distributed)

    @property
    def hag_mode(self) -> Hag:
        return Hag(self.hag)

    @property
    def weighs_every_edge(self) -> bool:
        """gat: attention weighs every edge, so no partial sums are shared (HAG) and its layers stay fp32."""
        return self.model == "gat"

    @property
    def precision_asked(self) -> Precision | None:
        """--precision as written: None for auto (the plan resolves it for the device)."""
        return None if self.precision == "auto" else Precision(self.precision)

    @property
    def evaluation(self) -> Evaluation:
        return Evaluation(self.eval)

    @property
    def per_relation(self) -> bool:
        """--fanouts names relations (a heterogeneous dataset's, checked against its schema when it opens)."""
        return "=" in str(self.fanouts) or "=" in str(self.eval_fanouts or "")

    @property
    def fanout_list(self) -> tuple[int, ...]:
        return ints(self.fanouts, "--fanouts")

    @property
    def eval_fanout_list(self) -> tuple[int, ...]:
        return ints(self.eval_fanouts, "--eval-fanouts") if self.eval_fanouts else self.fanout_list

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def link_spec(self) -> LinkSpec | None:
        """How --task link batches its edges; None for other tasks."""
        return self.task_spec.link_spec()

    @property
    def seeds_per_batch(self) -> int:
        """The most seed nodes a batch has, which the plan sizes the working set for (the task's)."""
        return self.task_spec.seeds_per_batch()

    @property
    def sampler_spec(self) -> Sampler:
        return Sampler(self.sampler, self.layer_dependency, self.batch_dependency)

    @property
    def recent_window(self) -> int:
        """Batches whose rows the recent-rows tier keeps (0 where the batches do not train in file order)."""
        if self.sampling_mode is not Sampling.OFFLINE:
            return 0
        if self.recent_batches == "auto":
            return 1 if self.batch_dependency > 1 else 0
        return int(self.recent_batches)

    @property
    def dist_timeout_s(self) -> float:
        seconds = parse_seconds(self.dist_timeout)
        if seconds is None:
            raise UsageError(f"--dist-timeout {self.dist_timeout}: expected a time such as 90s or 10min")
        return seconds

    @property
    def budget_bytes(self) -> int:
        """--memory-budget, the whole run's (every other memory of the run is a share of it, the plan's)."""
        return parse_size(self.memory_budget, "--memory-budget")

    def _size_or_auto(self, name: str) -> int | None:
        """--host-cache, --device-cache or --embedding-cache in bytes; None for auto."""
        value = getattr(self, name)
        return None if value == "auto" else parse_size(value, "--" + name.replace("_", "-"))

    host_cache_bytes = property(lambda self: self._size_or_auto("host_cache"))
    device_cache_bytes = property(lambda self: self._size_or_auto("device_cache"))
    embedding_cache_bytes = property(lambda self: self._size_or_auto("embedding_cache"))

    @property
    def checkpoint_interval(self) -> tuple[str, float] | None:
        """("batches", N) or ("seconds", S) between mid-epoch checkpoints; None: at epoch ends only."""
        return parse_interval(self.checkpoint_every)

    @property
    def val_interval(self) -> tuple[str, float] | None:
        """("batches", N) or ("seconds", S) between validations inside an epoch; None: at epoch ends only."""
        return parse_interval(self.val_every, "--val-every")

    def validate(self) -> None:
        """Refuses a bad value in one line (validation.py), before any work."""
        from .validation import validate

        validate(self)


def ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in str(text).split(","))
    except ValueError:
        raise UsageError(f"{flag} {text}: expected comma-separated integers") from None
    return values
