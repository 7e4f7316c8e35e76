"""Evaluator: test accuracy and loss of Θ snapshots, off the PS thread.

The PS hands over a copy of Θ taken at exactly update i·k, so results are reproducible in update
space however late they are computed. ``ProcessEvaluator`` runs in its own process (one torch thread)
so evaluation never stalls the PS; ``InlineEvaluator`` computes on the spot (virtual-clock runtime).

A model with running statistics (BatchNorm) is evaluated with statistics that belong to the evaluated
weights: those Θ carries (``model.buffers`` average), or, for recompute and local, statistics
re-estimated for Θ from ``model.buffer_samples`` training samples (``models.recompute_statistics``:
the first N of ``default_rng([seed, 0xB7]).permutation``, batches of 100, as
``torch.optim.swa_utils.update_bn`` computes them) before each evaluation.
"""
from __future__ import annotations

import multiprocessing as mp
import queue
import threading
from typing import Callable, Optional

import numpy as np


def evaluate(model, theta: np.ndarray, x, y, batch: int = 1000, workload=None, buffers: bool = False,
             recompute_from=None) -> tuple[float, float]:
    """(accuracy in [0,1], mean loss) of Θ on tensors x [N, ...], y [N]: the workload's loss and
    metric (default: the paper's, cross-entropy and top-1). ``buffers``: Θ carries the running
    statistics after the weights; ``recompute_from``: training inputs to re-estimate them from."""
    import torch
    from ..models import recompute_statistics, set_flat
    from ..workload import cross_entropy, top1_correct
    loss_fn = workload.loss if workload is not None else cross_entropy
    correct_fn = workload.correct if workload is not None else top1_correct
    set_flat(model, theta, buffers)
    if recompute_from is not None:
        recompute_statistics(model, recompute_from)   # leaves the model in eval mode
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(y), batch):
            out = model(x[i:i + batch])
            loss += float(loss_fn(out, y[i:i + batch], reduction="sum"))
            correct += correct_fn(out, y[i:i + batch])
    return correct / len(y), loss / len(y)


class TestSet:
    """The held-out split of a scenario as tensors, with the model to evaluate on."""

    def __init__(self, scenario_dict: dict):
        import torch
        from ..data import load_dataset, normalize
        from ..models import build_model, statistics
        from ..workload import resolve, use_path
        from ..scenario import Scenario
        sc = Scenario.model_validate(scenario_dict)
        use_path(sc.model.path)
        ds = load_dataset(sc.dataset, sc.seed)
        n = sc.eval.test_samples or len(ds.test_y)
        dev = torch.device(sc.device)   # cuda: validate made sure there is one
        self.model = build_model(sc.model, sc.seed).to(dev)
        self.model.eval()
        self.x = torch.from_numpy(normalize(ds.test_x[:n])).to(dev)
        self.workload = resolve(sc.model)
        if self.workload.channels_last:
            self.x = self.x.contiguous(memory_format=torch.channels_last)
        self.y = torch.from_numpy(ds.test_y[:n].astype(np.int64)).to(dev)
        self.buffers = sc.statistics_in_theta() > 0
        self.recompute_from = None
        if statistics(self.model) and not self.buffers:   # recompute or local
            pick = np.random.default_rng([sc.seed, 0xB7]).permutation(len(ds.train_y))[:sc.model.buffer_samples]
            self.recompute_from = torch.from_numpy(normalize(ds.train_x[pick])).to(dev)
            if self.workload.channels_last:
                self.recompute_from = self.recompute_from.contiguous(memory_format=torch.channels_last)

    def __call__(self, theta: np.ndarray) -> tuple[float, float]:
        return evaluate(self.model, theta, self.x, self.y, workload=self.workload, buffers=self.buffers,
                        recompute_from=self.recompute_from)


def _row(version: int, info: dict, acc: float, loss: float) -> dict:
    return {"update": version, "wall_time": info["wall_time"], "virtual_time": info["virtual_time"],
            "ingress_bytes": info["ingress_bytes"], "push_bytes": info["push_bytes"],
            "accuracy": acc, "loss": loss}


class Collector:
    """Finished evaluations → ``rows`` and the evals table, in update order, from any thread: the PS
    thread collects right after each snapshot (an inline evaluator's row is ready at once), the engine
    thread every tick. Without the lock two collecting threads could record rows out of order."""

    def __init__(self, evaluator, record: Callable[[dict], None], on_row: Callable[[dict], None]):
        self.evaluator, self.record, self.on_row = evaluator, record, on_row
        self.rows: list[dict] = []
        self._lock = threading.Lock()

    def collect(self, rows: Optional[list[dict]] = None, notify: bool = True) -> None:
        """Record ``rows`` (default: the evaluator's finished ones), then (if ``notify``) call
        ``on_row`` for each — outside the lock: it takes ``ps.lock``, which the PS thread holds when
        it calls us."""
        with self._lock:
            new = self.evaluator.results() if rows is None else rows
            for row in new:
                self.rows.append(row)
                self.record(row)
        for row in new if notify else ():
            self.on_row(row)


class InlineEvaluator:
    alive = True

    def __init__(self, scenario_dict: dict):
        self.test = TestSet(scenario_dict)
        self._out: list[dict] = []

    def submit(self, version: int, theta: np.ndarray, info: dict) -> None:
        self._out.append(_row(version, info, *self.test(theta)))

    def results(self) -> list[dict]:
        out, self._out = self._out, []
        return out

    def close(self, wait: bool = True) -> list[dict]:
        return self.results()


def _worker(scenario_dict: dict, inbox, outbox) -> None:
    """The spawned evaluator. Started with the group signals blocked (ProcessEvaluator): those that
    arrived during our start-up are dropped, we leave the engine's process group (a batch system's
    SIGTERM or a closing terminal's SIGHUP to the group would kill us: "the evaluator process died"),
    and Ctrl-C stays ignored: the engine answers all of them and closes us itself."""
    from ..procs import die_with_parent, leave_group
    leave_group()
    # its own queue keeps it blocked forever once the engine is gone (kill -9); the engine may be
    # PID 1 (the PS container of a compose project), so the parent's PID is given, not guessed
    die_with_parent(parent=mp.parent_process().pid if mp.parent_process() else None)
    _serve(scenario_dict, inbox, outbox)


def _forked_worker(scenario_dict: dict, inbox, outbox, env: dict) -> None:
    """The evaluator forked from the agents' fork server (torch already imported there: a fork, not a
    1–2 s interpreter and torch import). Its parent is the fork server, which dies with the engine
    once no child holds its "alive" pipe: as a forked agent, it drops those pipes, dies with the fork
    server, leaves the engine's group, and takes the run's numerics profile from ``env``."""
    import os

    from ..procs import die_with_parent, drop_inherited_lifelines, leave_group
    die_with_parent()
    drop_inherited_lifelines()
    leave_group()
    os.environ.update(env)
    _serve(scenario_dict, inbox, outbox)


def _serve(scenario_dict: dict, inbox, outbox) -> None:
    from .. import numerics
    numerics.apply_from_env()   # the engine's profile, before torch runs here
    import torch
    torch.set_num_threads(1)
    try:
        test = TestSet(scenario_dict)
        outbox.put("ready")
        while True:
            item = inbox.get()
            if item is None:
                break
            version, theta, info = item
            outbox.put(_row(version, info, *test(theta)))
    except Exception as err:   # e.g. a dataset file it can't read: the engine says why the run stopped
        outbox.put(("error", f"{type(err).__name__}: {err}"))
        raise
    outbox.put(None)


class ProcessEvaluator:
    """The evaluator in a process of its own: spawned (a fresh interpreter), or, given ``fork_env``,
    forked from the agents' fork server, which must be running (``emulator/runtimes/forkserver.py``
    starts it; ``fork_env``: the variables the child needs, the numerics profile's)."""

    def __init__(self, scenario_dict: dict, fork_env: Optional[dict] = None):
        ctx = mp.get_context("spawn" if fork_env is None else "forkserver")
        target, args = (_worker, ()) if fork_env is None else (_forked_worker, (fork_env,))
        # The spawned child (and the resource tracker the queues start) begin with the group signals
        # blocked (the mask survives fork and exec); the child leaves the group as its first step, so
        # a Ctrl-C in the terminal never prints its traceback and a group SIGTERM/SIGHUP doesn't kill
        # it. The engine itself must not lose such a signal: ignoring SIGINT here dropped one that
        # arrived during the start (test_interrupt's start-up case, now and then); signals_deferred
        # notes it and raises it right after.
        # A signal noted there is raised as the block ends, before this object exists: the child is
        # killed then, before the engine's exit unlinks the queues' semaphores under a child still
        # unpickling them (it would print a FileNotFoundError traceback into the user's terminal).
        from .. import procs
        from ..nomain import without_main
        self.proc = None
        try:
            with procs.signals_deferred(), procs.children_shielded():
                self.inbox, self.outbox = ctx.Queue(), ctx.Queue()
                self.proc = ctx.Process(target=target, args=(scenario_dict, self.inbox, self.outbox, *args),
                                        name="edgebed-evaluator", daemon=True)
                with without_main():   # never the user's script again (nomain.py)
                    self.proc.start()
        except BaseException:
            if self.proc is not None and self.proc.pid is not None:
                self.proc.kill()
                self.proc.join(5)
            raise
        self.pending = 0
        self.ready = False
        self.error: Optional[str] = None   # why the worker ended, if it failed

    @property
    def alive(self) -> bool:
        return self.proc.is_alive()

    def submit(self, version: int, theta: np.ndarray, info: dict) -> None:
        self.pending += 1
        self.inbox.put((version, theta, info))

    def results(self, timeout: Optional[float] = None) -> list[dict]:
        out = []
        while True:
            try:
                item = self.outbox.get(timeout=timeout) if timeout and not out else self.outbox.get_nowait()
            except queue.Empty:
                return out
            if item == "ready":
                self.ready = True
            elif isinstance(item, tuple):   # ("error", why): the worker is ending
                self.error = item[1]
            elif item is not None:
                self.pending -= 1
                out.append(item)

    def close(self, wait: bool = True, timeout: float = 120.0) -> list[dict]:
        """Evaluate what is queued (if wait), end the process, return the remaining rows."""
        out = []
        if wait and self.proc.is_alive():
            self.inbox.put(None)
            import time
            deadline = time.monotonic() + timeout
            while self.pending > 0 and time.monotonic() < deadline and self.proc.is_alive():
                out += self.results(timeout=0.5)
        if self.proc.is_alive():
            self.proc.terminate()
        self.proc.join(5)
        out += self.results()
        self.inbox.close()
        self.outbox.close()
        return out
