"""Run by mkdocs-gen-files during `mkdocs build`: writes the generated pages into the build only.

Generated pages are never committed (so never stale): the scenario reference, the CLI reference, the
wire protocol, the layer contract, the results pages with their figures, CONTRIBUTING as a page, and
the navigation (SUMMARY.md, read by mkdocs-literate-nav).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import mkdocs_gen_files

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT)]

import cli_ref  # noqa: E402
import module_pages  # noqa: E402
import nav  # noqa: E402
import results  # noqa: E402
import scenario_ref  # noqa: E402



def index_from_readme() -> str:
    """The site's home page is the README (one source): its links to docs/ pages become site links,
    the generated pages it names in plain text become links, other repository links become paths."""
    text = (ROOT / "README.md").read_text().replace("](docs/", "](")
    text = re.sub(r"\]\(benchmarks/results/studies/([\w.-]+)/report/report\.md\)", r"](results/\1.md)", text)
    text = re.sub(r"\]\((?![a-z]+:|#)([^)]+)\)", lambda m: m.group(0) if (HERE.parent / m.group(1)).exists()
                  or m.group(1) in nav.PENDING or m.group(1).startswith("results/") else f"](../{m.group(1)})", text)
    architecture = (HERE.parent / "architecture.md").is_file()
    security = (HERE.parent / "security.md").is_file()
    for plain, linked in (
            ("| Architecture, layer contract", "| [Architecture](architecture.md), [layer contract](layers.md)"
             if architecture else "| Architecture, [layer contract](layers.md)"),
            ("| Scenario reference", "| [Scenario reference](scenario-reference.md)"),
            ("| CLI reference", "| [CLI reference](cli.md)"),
            ("| Wire protocol", "| [Wire protocol](wire.md)"),
            ("| Results (", "| [Results](results/index.md) ("),
            (", Python API", ", [Python API](api.md)"),
            (", security |", ", [security](security.md) |" if security else ", security |")):
        text = text.replace(plain, linked, 1)
    return text


generated: dict[str, str] = {
    "index.md": index_from_readme(),
    "scenario-reference.md": scenario_ref.page(),
    "cli.md": cli_ref.page(),
    "wire.md": module_pages.wire_page(),
    "layers.md": module_pages.layers_page(),
    "contributing.md": (ROOT / "CONTRIBUTING.md").read_text(),
    "studies-guide.md": "# Study files and reports\n\nFrom `scenarios/studies/README.md`, the guide kept "
                        "beside the study files.\n" + (ROOT / "scenarios/studies/README.md").read_text().split("\n", 1)[1]
                        .replace("](../../docs/", "]("),   # its links to docs/ pages become site links
}
for path, text in generated.items():
    with mkdocs_gen_files.open(path, "w") as f:
        f.write(text)
    mkdocs_gen_files.set_edit_path(path, "gen/build.py")

pages = results.pages()
for page in pages:
    with mkdocs_gen_files.open(page.path, "w") as f:
        f.write(page.text)
    for site_path, src in page.assets.items():
        with mkdocs_gen_files.open(site_path, "wb") as f:
            f.write(src.read_bytes())

studies = [(Path(p.path).stem, p.path) for p in pages
           if p.path.startswith("results/") and "/benchmarks/" not in p.path and p.path != "results/index.md"]
benches = [(p.text.split("\n", 1)[0].removeprefix("# "), p.path) for p in pages if "/benchmarks/" in p.path]
with mkdocs_gen_files.open("SUMMARY.md", "w") as f:
    f.write(nav.summary(set(generated) | {p.path for p in pages}, studies, benches))
