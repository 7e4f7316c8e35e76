"""summary.json in the data dictionary (issue 56): every key the engine writes is documented, and every
documented key is one the code writes — read from the code that writes it, and from a real run."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from edgebed import datadict

ROOT = Path(__file__).resolve().parents[2]
WRITERS = ["edgebed/emulator/runloop.py", "edgebed/emulator/engine.py", "edgebed/emulator/cleanup.py"]


def _dict_keys(node: ast.Dict, prefix: str = "") -> set[str]:
    keys = set()
    for k, v in zip(node.keys, node.values):
        if k is None:      # **({...} if ... else {}): the optional keys
            for d in ast.walk(v):
                if isinstance(d, ast.Dict):
                    keys |= _dict_keys(d, prefix)
        elif isinstance(k, ast.Constant):
            name = f"{prefix}{k.value}"
            keys |= _dict_keys(v, f"{name}.") if isinstance(v, ast.Dict) and name == "devices" else {name}
    return keys


def written_keys() -> set[str]:
    """The keys the engine's code writes into summary.json: the dict ``_summary`` returns, the dicts
    written to ``.../"summary.json"``, and the keys set on a ``summary`` afterwards."""
    keys: set[str] = set()
    for file in WRITERS:
        tree = ast.parse((ROOT / file).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "_summary":
                keys |= {k for r in ast.walk(node) if isinstance(r, ast.Return) and isinstance(r.value, ast.Dict)
                         for k in _dict_keys(r.value)}
            elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "write_json_atomic" \
                    and "summary.json" in ast.unparse(node.args[0]) and isinstance(node.args[1], ast.Dict):
                keys |= _dict_keys(node.args[1])
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) \
                    and getattr(node.value, "id", "") == "summary" and isinstance(node.slice, ast.Constant):
                keys.add(node.slice.value)
            elif isinstance(node, ast.Call) and ast.unparse(node.func) == "summary.update":
                keys |= {kw.arg for kw in node.keywords}
    return keys


def test_every_key_the_code_writes_is_documented_and_every_documented_key_is_written():
    written = written_keys()
    assert {"status", "devices.said_hello", "devices.alive_at_end", "fidelity", "engine"} <= written  # the reader works
    assert not written - set(datadict.SUMMARY), "summary.json keys without a row in datadict.toml"
    assert not set(datadict.SUMMARY) - written, "datadict.toml documents summary.json keys no code writes"


@pytest.mark.timeout(120)
def test_a_real_runs_summary_has_only_documented_keys(tmp_path):
    import edgebed
    run = edgebed.run({"name": "keys", "seed": 1, "model": {"name": "mlp"}, "workers": {"n": 2},
                       "stop": {"updates": 20}, "eval": {"every": 20, "test_samples": 100},
                       "runtime": {"name": "sim"}}, out=tmp_path, progress=False)
    s = run.summary
    keys = {k for k in s if k != "devices"} | {f"devices.{k}" for k in s["devices"]}
    assert s["status"] == "complete" and not keys - set(datadict.SUMMARY)


def test_the_data_dictionary_page_lists_the_summary_keys():
    page = (ROOT / "docs" / "data-dictionary.md").read_text()
    assert page == datadict.markdown()
    assert "| `devices.said_hello` | count |" in page and "| `devices.alive_at_end` | count |" in page
