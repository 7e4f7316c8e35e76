"""The docs cite only files that are committed, and the README's numbers are the committed files' own.

Results pages are generated from committed result files (docs/gen/results.py): every file a page names
as its source, every figure it embeds and every page it links to must exist. The hand-written pages
(the measurement log, the lab notebook, ...) name result files by path: each must exist too.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path, PurePosixPath

import pytest

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "gen"))
import results  # noqa: E402

_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s#]+)(?:#[^)]*)?\)")
_REPO_PATH = re.compile(r"`((?:benchmarks|scenarios|edgebed|tests|docs)/[\w./-]*\w)`")


def _resolve(page: str, target: str) -> str:
    parts = []
    for part in (PurePosixPath(page).parent / target).parts:
        if part == "..":
            parts.pop() if parts else parts.append("..")
        elif part != ".":
            parts.append(part)
    return "/".join(parts)


def _missing_repo_paths(text: str, root: Path = ROOT) -> list[str]:
    return sorted({p for p in _REPO_PATH.findall(text)
                   if not any(c in p for c in "<*{") and not (root / p).exists()})


def problems_of(pages, root: Path = ROOT) -> list[str]:
    """What is wrong with generated pages: a cited file, a copied figure or a linked page missing."""
    generated = {p.path for p in pages} | {a for p in pages for a in p.assets}
    problems = []
    for page in pages:
        problems += [f"{page.path}: cites {c}, which is not committed" for c in page.cites if not (root / c).exists()]
        problems += [f"{page.path}: copies {src}, which is missing" for src in page.assets.values() if not src.is_file()]
        problems += [f"{page.path}: names {p}, which is not committed" for p in _missing_repo_paths(page.text, root)]
        for target in _LINK.findall(page.text):
            if re.match(r"[a-z]+:", target):
                continue
            resolved = _resolve(page.path, target)
            if resolved not in generated and not (DOCS / resolved).is_file():
                problems.append(f"{page.path}: links to {target} ({resolved}), which no page or file provides")
    return problems


def test_results_pages_cite_only_committed_files():
    pages = results.pages()
    assert any(p.path == "results/index.md" for p in pages)
    assert sum(p.path.startswith("results/benchmarks/") for p in pages) >= 10
    assert sum(p.path.startswith("results/tuning-") for p in pages) >= 2
    problems = problems_of(pages)
    assert not problems, "\n".join(problems)


def test_a_results_page_citing_a_missing_file_is_caught(tmp_path, monkeypatch):
    """The check above can fail: a study report whose figure is gone leaves a dangling link."""
    study = tmp_path / "benchmarks" / "results" / "studies" / "s"
    (study / "report").mkdir(parents=True)
    (study / "report" / "report.md").write_text("# Study s\n\n![accuracy](gone.png)\n")
    monkeypatch.setattr(results, "ROOT", tmp_path)
    monkeypatch.setattr(results, "STUDIES", tmp_path / "benchmarks" / "results" / "studies")
    page = results.study_page("s", study / "report")
    assert problems_of([page], tmp_path) == ["results/s.md: links to gone.png (results/gone.png), "
                                             "which no page or file provides"]


def test_hand_written_pages_name_only_existing_files():
    problems = []
    for md in sorted(DOCS.glob("*.md")):
        problems += [f"docs/{md.name}: names {p}, which does not exist" for p in _missing_repo_paths(md.read_text())]
    assert not problems, "\n".join(problems)


def test_the_readme_is_short_and_its_numbers_are_the_committed_files():
    readme = (ROOT / "README.md").read_text()
    assert 150 <= len(readme.splitlines()) <= 250
    readme = " ".join(readme.split())
    # the headline: the compression-tuned report's 97 % line for AdaComp c = 0.01
    report = (ROOT / "benchmarks/results/studies/compression-tuned/report/report.md").read_text()
    section = report[report.index("## To 97 %"):]
    line = next(ln for ln in section.splitlines() if ln.startswith("| adacomp c=0.01 |"))
    m = re.search(r"([\d.]+)× = ([\d.]+)× per update × ([\d.]+) updates \[([\d.]+)–([\d.]+)×", line)
    ratio, per_update, updates, lo, hi = m.groups()
    paper = line.rstrip(" |").rsplit("|", 1)[1].strip()
    for number in (f"{ratio}× less PS ingress", f"{per_update}× smaller pushes", f"{updates}× fewer updates",
                   f"{lo}–{hi}×", f"{paper} in the paper's byte encoding"):
        assert number in readme, f"README's headline should read {number!r} (from the committed report)"
    # the reproducibility promise, checked on two instruction-set "hosts" (numpy's dispatch included)
    dispatch = json.loads((ROOT / "benchmarks/results/numerics-dispatch.json").read_text())
    tie, old = dispatch["tie_rule"], dispatch["argpartition_ties"]
    assert tie["fingerprint_a"]["id"] == tie["fingerprint_b"]["id"] and tie["identical"] == tie["of"]
    assert f"the {tie['of']} golden scenarios" in readme
    assert f"gave identical tables, {tie['identical']} of {tie['of']}, with one fingerprint id" in readme
    assert f"{len(old['trajectory_differs'])} of them differed" in readme
    # and the previous fixture across vendors
    hosts = json.loads((ROOT / "benchmarks/results/numerics-hosts.json").read_text())
    vendors = {h["cpu"].split()[0] for h in hosts["earlier_fixtures"]}
    assert vendors >= {"Intel(R)", "AMD"} and "Intel Xeon and AMD EPYC" in readme
    checked = [h for h in hosts["earlier_fixtures"] if "golden_identical" in h.get("portable", {})]
    assert all(h["portable"]["golden_identical"] == hosts["scenarios"] for h in checked) and checked
    assert f"{hosts['scenarios']} of {hosts['scenarios']} (`benchmarks/results/numerics-hosts.json`" in readme
    # the cost of portable numerics
    for host in ("numerics.json", "numerics-amd-epyc.json"):
        summary = json.loads((ROOT / "benchmarks/results" / host).read_text())["summary"]
        for model, label in (("mlp", "MLP"), ("cnn", "paper CNN")):
            assert f"{label} {summary[f'ratio_{model}']['median']:.2f}×" in readme, (host, model)


def test_generated_reference_pages_come_from_their_sources():
    """CLI page from the parser (every verb), wire page from the wire module's docstring (its frame
    layout as a code block), layer page from pyproject.toml (every layer)."""
    import tomllib

    import cli_ref
    import module_pages

    from edgebed.cli import build_parser
    cli = cli_ref.page()
    verbs = [n for n, _, _ in cli_ref._subcommands(build_parser())]
    assert {"run", "report", "validate", "study", "clean"} <= set(verbs)
    assert all(f"## `edgebed {v}`" in cli for v in verbs)
    assert "runs/&lt;name&gt;-&lt;time&gt;/" in cli        # help text with <...> survives as text

    wire = module_pages.wire_page()
    assert "```text\nframe 0   header:" in wire and "Hello(device, speed_class, attempt)" in wire
    assert "``" not in wire.replace("```", "")

    layers = module_pages.layers_page()
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    for layer in contract["layers"]:
        for module in layer.replace("|", ":").split(":"):
            assert module.strip().removeprefix("edgebed.") in layers


def test_the_executor_cost_tables_are_the_benchmark_files_own(tmp_path, monkeypatch):
    """docs/studies-on-clusters.md's "Cost" tables are written from benchmarks/results/executors.json;
    a re-measured file with a page left as it was is caught."""
    from benchmarks import bench_executors
    assert bench_executors.write_docs(check=True) == 0, "run `python -m benchmarks.bench_executors --docs`"
    data = json.loads(bench_executors.OUT.read_text())
    slurm = next(k for k in data["scheduling_overhead"] if k.startswith("slurm"))
    data["scheduling_overhead"][slurm]["per_task_s"] = 9.876
    remeasured = tmp_path / "executors.json"
    remeasured.write_text(json.dumps(data))
    monkeypatch.setattr(bench_executors, "OUT", remeasured)
    assert "| 9876 ms |" in bench_executors.tables(data)
    assert bench_executors.write_docs(check=True) == 1


def test_the_results_index_says_what_each_study_is():
    """One line per study on the results index, not only its slug (issue #41.4)."""
    index = next(p for p in results.pages() if p.path == "results/index.md").text
    rows = [r for r in index.splitlines() if r.startswith("| `") and "](" in r and ".md)" in r]
    studies = [r for r in rows if not r.startswith("| `tuning")]
    assert len(studies) >= 10
    blank = [r.split(" | ")[0] for r in studies if r.split(" | ")[1].strip() in ("", "—")]
    assert not blank, f"studies with no line saying what they are: {blank}"
    assert "| study | what it is |" in index


def test_the_nav_file_is_not_a_page_and_the_home_page_says_how_to_browse_offline():
    import hooks
    from mkdocs.structure.files import File, Files, InclusionLevel
    summary = File("SUMMARY.md", str(DOCS), str(ROOT / "site"), use_directory_urls=True)
    hooks.on_files(Files([summary]), config=None)
    assert summary.inclusion == InclusionLevel.EXCLUDED
    readme = (ROOT / "README.md").read_text()
    assert "file://" in readme and "mkdocs serve" in readme and "python -m http.server" in readme
