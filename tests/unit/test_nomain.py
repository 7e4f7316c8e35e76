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
