"""The pipeline: order, per-stage timing, errors naming their stage, every thread joined, Ctrl-C."""

import threading

import pytest

from diskgnn.errors import DiskgnnError, run_cli
from diskgnn.loading.pipeline import Pipeline, PipelineError, Stage


def diskgnn_threads():
    return [t for t in threading.enumerate() if t.name.startswith("diskgnn-")]


def test_pipeline_keeps_order_and_times_stages():
    with Pipeline(range(50), [Stage("double", lambda x: 2 * x), Stage("inc", lambda x: x + 1, depth=4)]) as p:
        assert list(p) == [2 * x + 1 for x in range(50)]
    assert p.times["double"].items == 50 and p.times["train"].items == 50
    assert not diskgnn_threads()


def test_pipeline_error_names_the_stage_and_stops_every_thread():
    def boom(x):
        if x == 7:
            raise ValueError("bad item")
        return x

    with pytest.raises(PipelineError, match="stage 'read' failed: ValueError: bad item") as e:
        list(Pipeline(range(100), [Stage("sample", lambda x: x), Stage("read", boom)]))
    assert isinstance(e.value.__cause__, ValueError)
    assert not diskgnn_threads()


def test_pipeline_user_errors_stay_one_line_and_leaving_early_joins_threads():
    def bad(x):
        raise DiskgnnError("f.packs: region 3 fails its checksum")

    with pytest.raises(DiskgnnError, match="pipeline stage 'assemble': f.packs: region 3"):
        list(Pipeline(range(3), [Stage("assemble", bad)]))
    p = Pipeline(range(10**6), [Stage("sample", lambda x: x)])
    for i in p:
        if i == 3:
            break
    p.close()
    assert not diskgnn_threads()


def test_ctrl_c_inside_a_finalizer_still_stops_the_command(capsys, monkeypatch):
    import gc
    import signal
    import sys

    swallowed = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: swallowed.append(u.exc_type))

    class InterruptedInFinalizer:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)  # the handler runs here, inside __del__, where a raise is dropped

    steps = []

    def main(argv):
        for i in Pipeline(range(10**6), [Stage("sample", lambda x: x)]):
            steps.append(i)
            if i == 2:
                InterruptedInFinalizer()
                gc.collect()

    # run_cli installs its handler only over Python's default one; an earlier test or plugin may have left another
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert run_cli("train", main) == 130
    finally:
        after = signal.signal(signal.SIGINT, outer)
    assert steps == [0, 1, 2], "the loop went on after Ctrl-C"
    assert swallowed == [], "the interrupt was raised inside the finalizer, where Python drops it"
    assert capsys.readouterr().err.strip().splitlines()[-1] == "train: interrupted"
    assert after is signal.default_int_handler
    assert not diskgnn_threads()
    assert list(Pipeline(range(3), [Stage("sample", lambda x: x)])) == [0, 1, 2], \
        "the interrupt outlived its command and stopped the next pipeline"
