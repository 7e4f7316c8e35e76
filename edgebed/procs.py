"""Process identity and lifetime: a PID plus its start time proves a process is the one recorded.

A PID alone proves nothing (PIDs are reused, and every fork-server child has the same command line),
so runs record ``{"pid", "start"}`` — ``start`` is field 22 of ``/proc/<pid>/stat``, the process's
start time in clock ticks since boot, which a reused PID can't repeat. ``die_with_parent`` makes a
child receive SIGKILL when the process that started it dies, whatever ended that process.
Standard library only: the fork server preloads this module.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import time
from typing import Optional

PR_SET_PDEATHSIG = 1


def start_time(pid: int) -> Optional[int]:
    """Start time of ``pid`` (clock ticks since boot), None if there is no such process (or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2:].split()   # after "pid (comm) ": comm may hold spaces
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def wait_blocked(pid: int, sig: int, timeout: float = 10.0, proc: str = "/proc") -> bool:
    """Wait until ``pid`` blocks ``sig`` (its ``SigBlk`` mask): True once it does; False if it is gone
    or ``timeout`` s passed first. ``proc``: where the pid's procfs is mounted (a host's /proc seen
    from a container)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(f"{proc}/{pid}/status") as f:
                mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigBlk:"))
        except (OSError, StopIteration):
            return False
        if mask & (1 << (sig - 1)):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)


def identity(pid: int) -> dict:
    """What a run records about a child it started: {"pid", "start"}."""
    return {"pid": int(pid), "start": start_time(pid)}


def is_alive(record: dict) -> bool:
    """True if the process ``record`` (from ``identity``) still runs — the same process, not a PID reuse."""
    pid, start = record.get("pid"), record.get("start")
    if not isinstance(pid, int) or pid <= 1 or start is None:
        return False
    return start_time(pid) == start


def die_with_parent(sig: int = signal.SIGKILL, parent: Optional[int] = None) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux; no-op elsewhere).

    Call it first thing in a child. If the parent is already gone (it died before the call), exit.
    ``parent``: the PID the child knows its parent has (``multiprocessing.parent_process().pid``);
    without it a parent of PID 1 counts as gone (re-parented to init) — wrong where the parent *is*
    PID 1, as a container's main process (the compose PS), so children that can be there pass it."""
    expected = os.getppid() if parent is None else parent
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != expected or (parent is None and expected == 1):
        os._exit(1)


def drop_inherited_lifelines() -> None:
    """In a child forked from the fork server: close the write ends of the fork server's and the
    resource tracker's "alive" pipes, which multiprocessing hands every forked child (so it could fork
    in turn). A child holding them keeps both alive after the engine dies — and the fork server alive
    keeps its children alive: nothing ever exits. Without them, the engine's death closes the fork
    server, whose death ends its children (``die_with_parent``)."""
    from multiprocessing import forkserver, resource_tracker
    for owner, attr in ((forkserver._forkserver, "_forkserver_alive_fd"),
                        (resource_tracker._resource_tracker, "_fd")):
        fd = getattr(owner, attr, None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
            setattr(owner, attr, None)


@contextlib.contextmanager
def signals_deferred(signals=(signal.SIGINT, signal.SIGTERM)):
    """Hold ``signals`` back for the block (main thread only; elsewhere a no-op): they are noted and
    re-raised right after it, so a start-then-record step is never cut in half. (Blocking them with
    a signal mask would not do: the kernel hands them to another thread, and Python still runs the
    handler in the main thread at once.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    old = {s: signal.signal(s, lambda signum, frame: noted.append(signum)) for s in signals}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(noted):
            # A Python handler is called, not re-signalled: a second delivery would be counted twice by
            # whoever watches the wakeup fd (the engine answers each Ctrl-C: emulator/stopping.py).
            if callable(old[s]):
                old[s](s, None)
            else:
                signal.raise_signal(s)


GROUP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)   # what a terminal or batch system sends a group


@contextlib.contextmanager
def children_shielded():
    """Start children in the block with the signals sent to a whole process group blocked — Ctrl-C
    (the terminal), SIGTERM (a batch system), SIGHUP (a closing terminal or multiplexer) — so none of
    them ends a child before it could leave the engine's group (``leave_group``): the engine alone
    answers them and ends its children itself. A signal mask survives fork and exec; this thread's is
    put back after the block, and meanwhile the kernel hands such signals to the engine's other threads
    (Python still runs the engine's handler at once)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, GROUP_SIGNALS)
    try:
        # multiprocessing's resource tracker, started here (it ignores SIGINT/SIGTERM, and SIGHUP now
        # stays blocked in it), unblocks SIGINT and SIGTERM in this thread once it is started: again.
        from multiprocessing import resource_tracker
        resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_BLOCK, GROUP_SIGNALS)
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def leave_group(ignore=(signal.SIGINT,), honour=()) -> None:
    """In a child started under ``children_shielded``: drop the group signals that arrived while they
    were blocked, move to a session of its own (the engine's group signals no longer reach it), then
    unblock them — ``ignore`` stays ignored, the others are back at their default. A signal in
    ``honour`` that is already pending is delivered instead of dropped: a device agent's SIGTERM may be
    the engine's own ``terminate()``, sent before the agent got here, and must end it (a group SIGTERM
    ends the run anyway, and the engine then ends its agents itself)."""
    for s in GROUP_SIGNALS:
        if s not in honour:
            signal.signal(s, signal.SIG_IGN)   # a pending signal set to "ignore" is discarded (POSIX)
    try:
        os.setsid()
    except OSError:   # already a session leader
        pass
    # The dropped ones are unblocked while still ignored: Linux keeps a blocked signal pending even when
    # it is ignored, so one that came during this function is discarded only now. An honoured one is
    # unblocked after its default action is back: pending (whenever it came), it is delivered then.
    dropped = [s for s in GROUP_SIGNALS if s not in honour]
    signal.pthread_sigmask(signal.SIG_UNBLOCK, dropped)
    for s in GROUP_SIGNALS:
        signal.signal(s, signal.SIG_IGN if s in ignore else signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [s for s in GROUP_SIGNALS if s in honour])


def end_helpers(within: float = 3.0) -> list[str]:
    """At the program's exit: end multiprocessing's fork server and resource tracker if this process
    started them, and wait for them. Left alone they end on their own once the program has exited
    (their pipe from it closes) — after their own teardown, over 2 s later on a loaded host (issue 51:
    a process of the run alive 2 s after a group SIGHUP). Each gets ``within`` s, then SIGKILL. Only
    for the program's own process: it runs the process's multiprocessing exit now. The order is the
    interpreter's: the fork server (its socket lies in multiprocessing's temporary directory), this
    process's multiprocessing finalizers (they remove that directory, unlink the process's semaphores
    and tell the tracker so; a tracker ended before them unlinks the semaphores itself, and the
    finalizers then fail "No such file or directory"), the tracker last. → the helpers killed."""
    import sys
    from multiprocessing import util
    killed = []
    for module, attr, pid_attr in (("multiprocessing.forkserver", "_forkserver", "_forkserver_pid"),
                                   ("multiprocessing.resource_tracker", "_resource_tracker", "_pid")):
        helper = getattr(sys.modules.get(module), attr, None)
        pid = getattr(helper, pid_attr, None)
        if module.endswith("tracker"):
            util._exit_function()
        if pid is None:
            continue

        def stop(helper=helper):
            with contextlib.suppress(OSError):   # closes its pipe, waits for it, removes its socket
                helper._stop()
        stopper = threading.Thread(target=stop, daemon=True)
        stopper.start()
        stopper.join(within)
        if stopper.is_alive():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            stopper.join(1.0)
            killed.append(module.rsplit(".", 1)[1])
    return killed
