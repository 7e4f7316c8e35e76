"""Pages whose one source is a module docstring or pyproject.toml: the wire protocol, the layer contract.

The wire format is specified in its module's docstring. The module may move (``edgebed/ps/wire.py``
today; ``edgebed/wire/`` after the layered redesign), so the page is made from the first candidate that
imports, and says which file it came from.
"""
from __future__ import annotations

import importlib
import inspect
import re
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WIRE_MODULES = ["edgebed.wire", "edgebed.wire.format", "edgebed.ps.wire"]
CODEC_MODULES = ["edgebed.wire.codec", "edgebed.ps.codec"]


def _first_module(names: list[str], must_mention: str):
    for name in names:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        if mod.__doc__ and must_mention.lower() in mod.__doc__.lower():
            return mod
    raise RuntimeError(f"none of {names} imports with a docstring mentioning {must_mention!r}: "
                       "update docs/gen/module_pages.py to where the module lives now")


def rst_to_markdown(doc: str) -> str:
    """The reStructuredText the docstrings use, as Markdown: ``::`` literal blocks become fenced code,
    double backquotes single ones, ``:func:`x``` plain code."""
    lines = inspect.cleandoc(doc).splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::"):
            text = line.rstrip()[:-2].rstrip()
            if text:
                out.append(text + ":")
            i += 1
            block = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith((" ", "\t"))):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            out += ["", "```text", textwrap.dedent("\n".join(block)).strip("\n"), "```", ""]
            continue
        line = re.sub(r":(?:func|class|mod|meth|attr|data):`~?([^`]+)`", r"`\1`", line)
        out.append(line.replace("``", "`"))
        i += 1
    return "\n".join(out)


def _source(mod) -> str:
    return Path(mod.__file__).resolve().relative_to(ROOT).as_posix()


def wire_page() -> str:
    wire = _first_module(WIRE_MODULES, "wire format")
    lines = ["# Wire protocol", "",
             f"Generated from the module docstring of `{wire.__name__}` (`{_source(wire)}`), the "
             "specification the code is written against; rendered by `docs/gen/module_pages.py`.", "",
             rst_to_markdown(wire.__doc__).strip(), ""]
    try:
        codec = _first_module(CODEC_MODULES, "")
    except RuntimeError:
        codec = None
    if codec is not None and codec.__doc__:
        lines += ["## Version 2 encodings", "",
                  f"From the docstring of `{codec.__name__}` (`{_source(codec)}`):", "",
                  rst_to_markdown(codec.__doc__), ""]
    lines += ["## Python reference", "", f"::: {wire.__name__}",
              "    options:", "      show_root_heading: false", "      show_root_toc_entry: false",
              "      show_docstring_description: false",   # the module docstring is the page above
              "      members_order: source", "      filters: [\"!^_\"]", ""]
    return "\n".join(lines)


def layers_page() -> str:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    lines = ["# Layer contract", "",
             "Generated from `pyproject.toml` (`[tool.importlinter]`), which `lint-imports` checks in "
             "`make check` and in CI: a module imports only from layers below its own, so an arrow "
             "back up fails the build instead of waiting for a review. Top to bottom:", ""]
    for contract in cfg.get("contracts", []):
        lines += [f"## {contract['name']}", "", "```text"]
        layers = contract.get("layers", [])
        for k, layer in enumerate(layers):
            mods = re.split(r"\s*[|:]\s*", layer)
            sep = " | " if "|" in layer else "   "
            lines.append(sep.join(m.removeprefix("edgebed.") for m in mods))
            if k < len(layers) - 1:
                lines.append("    ↓")
        lines += ["```", "",
                  "On one line, `|` separates modules that may not import each other (independent), "
                  "spaces modules of one layer that may.", ""]
        ignored = contract.get("ignore_imports", [])
        if ignored:
            lines += ["Arrows the contract still allows (`ignore_imports`; `pyproject.toml` gives the reason "
                      "for each):", ""]
            lines += [f"- `{arrow}`" for arrow in ignored] + [""]
    return "\n".join(lines)
