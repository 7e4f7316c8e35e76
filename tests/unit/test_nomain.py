"""Processes edgebed starts (spawn, forkserver) never re-import the user's ``__main__`` (edgebed/nomain.py);
processes the user starts outside ``without_main`` keep multiprocessing's behaviour."""
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(60)

SCRIPT = textwrap.dedent('''
    import multiprocessing as mp
    import os
    from multiprocessing import spawn
    from edgebed.nomain import without_main
    print("module level ran", flush=True)
    for method in ("spawn", "forkserver"):
        p = mp.get_context(method).Process(target=os.getpid)
        with without_main():
            p.start()
        p.join(30)
        print(method, p.exitcode, flush=True)
    print("outside the block", "init_main_from_path" in spawn.get_preparation_data("x"), flush=True)
''')


def test_children_started_inside_without_main_do_not_run_the_script_again(tmp_path):
    (tmp_path / "script.py").write_text(SCRIPT)
    done = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=50)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["module level ran", "spawn 0", "forkserver 0", "outside the block True"]


EXECUTOR = textwrap.dedent('''
    import os
    from edgebed.study.executors.local import LocalExecutor
    print("module level ran", flush=True)
    ex = LocalExecutor(workers=2)
    print("pids", len({f.result(60) for f in [ex.submit(os.getpid) for _ in range(2)]}), flush=True)
''')

GUARDED = textwrap.dedent('''
    from edgebed.study.executors.local import LocalExecutor

    def double(x):
        return 2 * x

    if __name__ == "__main__":
        print(LocalExecutor(workers=2).submit(double, 21).result(60), flush=True)
''')


@pytest.mark.parametrize("script, lines", [(EXECUTOR, ["module level ran", "pids 2"]), (GUARDED, ["42"])])
def test_a_studys_workers_skip_the_script_unless_their_task_is_defined_there(tmp_path, script, lines):
    (tmp_path / "script.py").write_text(script)
    done = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=50)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == lines
