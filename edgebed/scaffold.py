"""``edgebed new NAME``: a ready project — scenario, model, data conversion stub, study, notebook.

The files are package data (``edgebed/templates/new/``) with ``{{name}}`` where the project's name
goes; they validate and run as written (the bundled digits, the virtual clock, a few hundred
updates), so a user starts from something that works and changes it.
"""
from __future__ import annotations

import re
from pathlib import Path

TEMPLATES = Path(__file__).with_name("templates") / "new"
FILES = ("README.md", "scenario.yaml", "model.py", "convert.py", "study.yaml", "notebook.ipynb")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


class ScaffoldError(ValueError):
    """What ``new`` refused to do, and what to do instead."""


def new_project(target: str | Path) -> list[Path]:
    """Write the project into the new directory ``target`` (its last part names the project) and
    return the files written. Refuses an existing path and a name that would not make a scenario
    name (letters, digits, ``-``, ``_``; 64 at most)."""
    target = Path(target)
    name = target.name
    if not NAME.fullmatch(name):
        raise ScaffoldError(f"{name!r}: a project name is 1 to 64 letters, digits, '-' or '_', starting with a "
                            "letter or digit (it names the scenario and its run directories); choose another")
    if target.exists() or target.is_symlink():
        raise ScaffoldError(f"{target}: already exists; edgebed new writes only into a new directory "
                            "(choose another name, or move the existing one away)")
    if not target.parent.is_dir():
        raise ScaffoldError(f"{target.parent}: no such directory to create {name!r} in; create it first")
    target.mkdir()
    written = []
    for file in FILES:
        text = (TEMPLATES / file).read_text(encoding="utf-8").replace("{{name}}", name)
        (target / file).write_text(text, encoding="utf-8")
        written.append(target / file)
    return written
