"""examples/ingress-to-target.ipynb runs top to bottom (nbclient, a fresh Python kernel) and answers
its question: AdaComp's PS ingress to a target (95 % as committed, 90 % here) against ASGD's, with the range over seed pairs."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "ingress-to-target.ipynb"


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_example_notebook_answers_its_question(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(NOTEBOOK, as_version=4)
    monkeypatch.setenv("EDGEBED_EXAMPLE_OUT", str(tmp_path))
    monkeypatch.setenv("EDGEBED_EXAMPLE_TARGET", "0.90")   # the committed outputs ask 95 %; 90 % is the same
    # question answered in about a third of the updates (the suite's budget)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(NOTEBOOK.parents[1]), os.environ.get("PYTHONPATH")])))
    # the kernel is this interpreter (the venv's), whatever kernelspecs the machine has
    client = NotebookClient(nb, timeout=360, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.kernel_manager_class.kernel_cmd = None
    km = client.create_kernel_manager()
    km.kernel_spec.argv[0] = sys.executable
    client.execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                     if o.get("output_type") == "stream" and o.get("name") == "stdout")
    m = re.search(r"AdaComp \(c = 0\.05\) needed ([\d.]+)x less PS ingress than ASGD \[([\d.]+)-([\d.]+)x over (\d) "
                  r"seed pairs\].*\((\d) of (\d) seeds reached it; ASGD (\d) of (\d)\)", text)
    assert m, f"the notebook did not print its answer:\n{text[-2000:]}"
    ratio, lo, hi = map(float, m.groups()[:3])
    assert lo <= ratio <= hi and ratio > 1
    assert m.group(4) == "2" and m.group(5) == m.group(6) == "2" and m.group(7) == "2"
    assert len(list(tmp_path.glob("ingress-to-95-*"))) == 4
