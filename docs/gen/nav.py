"""The site's navigation: the intended order, keeping only pages that exist (written or generated).

Several pages are written on other branches (security, swarm, clusters, ...): the nav names them here
and shows each as soon as its file is in ``docs/``, so the strict build is green before and after they
land. Any page in ``docs/`` that the list below does not name is shown under "More", so none is lost.
"""
from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parents[1]

# Pages written on other branches, shown (and linkable) once they are in docs/.
PENDING = {"running.md", "analysis.md", "architecture.md", "runtimes-swarm.md", "kubernetes-export.md",
           "scale.md", "studies-on-clusters.md", "security.md"}

# (title, page) or (section title, [entries]); pages relative to docs/.
NAV = [
    ("Home", "index.md"),
    ("Getting started", [
        ("Quickstart", "quickstart.md"),
        ("Running experiments", "running.md"),
        ("Analysing runs", "analysis.md"),
        ("Your own model and data", "your-own-model.md"),
        ("Extending edgebed", "extending.md"),
    ]),
    ("Concepts", [
        ("What a run is and records", "concepts.md"),
        ("Data formats and partitions", "data.md"),
        ("Architecture", "architecture.md"),
        ("Layer contract", "layers.md"),
    ]),
    ("Runtimes", [
        ("Runtimes", "runtimes.md"),
        ("Docker Swarm", "runtimes-swarm.md"),
        ("Kubernetes export", "kubernetes-export.md"),
        ("Scale", "scale.md"),
    ]),
    ("Algorithms and compression", "algorithms.md"),
    ("Fidelity", "fidelity.md"),
    ("Devices that come and go", "churn.md"),
    ("Reproducibility", "reproducibility.md"),
    ("Studies", [
        ("Writing and running studies", "studies.md"),
        ("Study files and reports", "studies-guide.md"),
        ("Studies on clusters", "studies-on-clusters.md"),
    ]),
    ("Results", [
        ("Index", "results/index.md"),
        ("@studies", None),          # every generated study and tuning page
        ("@benchmarks", None),       # every generated benchmark-file page, in a section
        ("Lab notebook", "lab-notebook.md"),
    ]),
    ("Performance", "performance.md"),
    ("Limitations", "limitations.md"),
    ("Security and reliability", [
        ("Security", "security.md"),
        ("Reliability and hostile peers", "reliability.md"),
    ]),
    ("Reference", [
        ("Scenario keys", "scenario-reference.md"),
        ("Command line", "cli.md"),
        ("Run directory columns", "data-dictionary.md"),
        ("Wire protocol", "wire.md"),
        ("Python API", "api.md"),
    ]),
    ("Contributing", "contributing.md"),
]


def summary(generated: set[str], study_pages: list[tuple[str, str]],
            bench_pages: list[tuple[str, str]] = ()) -> str:
    """SUMMARY.md for mkdocs-literate-nav. ``generated``: pages made during the build;
    ``study_pages``, ``bench_pages``: (title, path) of the generated results pages."""
    exists = lambda p: p in generated or (DOCS / p).is_file()   # noqa: E731
    named: set[str] = set()
    lines: list[str] = []

    def walk(entries, depth):
        for title, target in entries:
            pad = "    " * depth
            if title == "@studies":
                for t, p in study_pages:
                    lines.append(f"{pad}- [{t}]({p})")
                    named.add(p)
            elif title == "@benchmarks":
                if bench_pages:
                    lines.append(f"{pad}- Benchmark files")
                    lines.extend(f"{pad}    - [{t}]({p})" for t, p in bench_pages)
            elif isinstance(target, list):
                before = len(lines)
                lines.append(f"{pad}- {title}")
                n = len(lines)
                walk(target, depth + 1)
                if len(lines) == n:          # no page of the section exists yet
                    del lines[before:]
            elif exists(target):
                lines.append(f"{pad}- [{title}]({target})")
                named.add(target)

    walk(NAV, 0)
    others = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")
                    if "gen" not in p.relative_to(DOCS).parts)
    others = [p for p in others if p not in named and not p.startswith("results/")]
    if others:
        lines.append("- More")
        lines += [f"    - [{Path(p).stem.replace('-', ' ').capitalize()}]({p})" for p in others]
    return "\n".join(lines) + "\n"
