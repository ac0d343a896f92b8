"""A pipeline of stages in threads joined by bounded queues, timed per stage.

Each stage takes items from its input queue, applies its function and puts
the result on its output queue; the consumer (the train step, in the main
thread) iterates over the last queue. Bounded queues give backpressure: a
stage runs at most `depth` items ahead of the next, which bounds memory and,
for the read stage, sets how many batches are in flight.

Per stage the pipeline measures busy time (inside the function) and waiting
time (blocked on an empty input or a full output): the stage with the least
waiting bounds the epoch. An exception in any stage stops every stage and is
raised in the consumer as a PipelineError naming the stage; closing the
pipeline (also on Ctrl-C) stops and joins every thread, so none outlives it.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from .. import defaults
from ..errors import DiskgnnError, os_error_line, raise_if_interrupted

_DONE = object()


class PipelineError(RuntimeError):
    """A stage failed; `stage` names it and the original exception is the cause."""

    def __init__(self, stage: str, error: BaseException):
        super().__init__(f"pipeline stage '{stage}' failed: {type(error).__name__}: {error}")
        self.stage = stage


@dataclass
class StageTime:
    busy_s: float = 0.0
    wait_s: float = 0.0
    items: int = 0


@dataclass
class Stage:
    name: str
    fn: Callable
    depth: int = 2  # items queued after this stage


class Pipeline:
    """Runs `source` through `stages`; iterate to consume the last stage's results in order."""

    def __init__(self, source: Iterable, stages: list[Stage], consumer: str = "train"):
        self.times: dict[str, StageTime] = {"source": StageTime()}
        self.times.update({s.name: StageTime() for s in stages})
        self.times[consumer] = StageTime()
        self._consumer = consumer
        self._stop = threading.Event()
        self._error: tuple[str, BaseException] | None = None
        self._queues = [queue.Queue(maxsize=max(1, s.depth)) for s in [Stage("source", None, 2)] + stages]
        self._threads = [threading.Thread(target=self._run_source, args=(iter(source), self._queues[0]),
                                          name="diskgnn-source", daemon=True)]
        for i, stage in enumerate(stages):
            self._threads.append(threading.Thread(target=self._run_stage,
                                                  args=(stage, self._queues[i], self._queues[i + 1]),
                                                  name=f"diskgnn-{stage.name}", daemon=True))
        for t in self._threads:
            t.start()

    def _put(self, q: queue.Queue, item, timing: StageTime) -> bool:
        start = time.perf_counter()
        try:
            while not self._stop.is_set():
                try:
                    q.put(item, timeout=defaults.PIPELINE_POLL_S)
                    return True
                except queue.Full:
                    continue
            return False
        finally:
            timing.wait_s += time.perf_counter() - start

    def _get(self, q: queue.Queue, timing: StageTime):
        start = time.perf_counter()
        try:
            while not self._stop.is_set():
                try:
                    return q.get(timeout=defaults.PIPELINE_POLL_S)
                except queue.Empty:
                    continue
            return _DONE
        finally:
            timing.wait_s += time.perf_counter() - start

    def _fail(self, name: str, error: BaseException) -> None:
        if self._error is None:
            self._error = (name, error)
        self._stop.set()

    def _run_source(self, it, out: queue.Queue) -> None:
        timing = self.times["source"]
        try:
            while True:
                start = time.perf_counter()
                item = next(it, _DONE)
                timing.busy_s += time.perf_counter() - start
                if not self._put(out, item, timing) or item is _DONE:
                    return
                timing.items += 1
        except BaseException as e:  # noqa: BLE001 - reported to the consumer
            self._fail("source", e)

    def _run_stage(self, stage: Stage, inq: queue.Queue, out: queue.Queue) -> None:
        timing = self.times[stage.name]
        try:
            while True:
                item = self._get(inq, timing)
                if item is _DONE:
                    self._put(out, _DONE, timing)
                    return
                start = time.perf_counter()
                result = stage.fn(item)
                timing.busy_s += time.perf_counter() - start
                timing.items += 1
                if not self._put(out, result, timing):
                    return
        except BaseException as e:  # noqa: BLE001 - reported to the consumer
            self._fail(stage.name, e)

    def __iter__(self):
        """Yields results; time between yields is counted as the consumer's busy time."""
        timing = self.times[self._consumer]
        last = self._queues[-1]
        try:
            while True:
                raise_if_interrupted()
                item = self._get(last, timing)
                if self._error is not None:
                    name, error = self._error
                    if isinstance(error, DiskgnnError):  # the user's data or settings: stays one line
                        raise type(error)(f"pipeline stage '{name}': {error}") from error
                    if isinstance(error, OSError):  # a read the device failed (EIO): the file and offset, one line
                        raise DiskgnnError(f"pipeline stage '{name}': {os_error_line(error)}") from error
                    raise PipelineError(name, error) from error
                if item is _DONE:
                    return
                start = time.perf_counter()
                try:
                    yield item
                finally:  # a consumer that stops here (a validation inside the epoch) has consumed the item
                    timing.busy_s += time.perf_counter() - start
                    timing.items += 1
        finally:
            self.close()

    def close(self) -> None:
        """Stops every stage and joins its thread."""
        self._stop.set()
        for t in self._threads:
            t.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
