"""Results pages, generated from the committed result files: nothing here is typed by hand.

One page per committed study report (``benchmarks/results/studies/<study>/report/report.md``, made by
``edgebed study report``; its figures and HTML page are copied next to it), one page per committed
benchmark file (``benchmarks/results/*``), and an index of both built from each study's
``status.json`` and each benchmark file's own ``what``/``date`` fields.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
STUDIES = RESULTS / "studies"
BENCH_SUFFIXES = {".json", ".jsonl", ".md", ".txt", ".png"}


@dataclass
class Page:
    path: str                                   # under docs/, e.g. results/compression-tuned.md
    text: str
    assets: dict[str, Path] = field(default_factory=dict)   # site path -> committed file to copy
    cites: list[str] = field(default_factory=list)           # repo paths the page names as its sources


def _rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def _demote(md: str) -> str:
    """Drop the report's own H1 and push its headings one level down under the page's."""
    lines = md.splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return "\n".join(("#" + ln) if re.match(r"#{1,5} ", ln) else ln for ln in lines)


def _intro_as_list(md: str) -> str:
    """The report's opening lines (one statement each, written without blank lines between them) as
    a list, so Markdown does not run them into one paragraph."""
    lines = md.splitlines()
    out, intro = [], True
    for ln in lines:
        if intro and (ln.startswith(("|", "#", "!")) or (out and not ln.strip() and out[-1] == "")):
            intro = False
        if intro and ln.strip():
            out.append(f"- {ln}")
        else:
            out.append(ln)
    return "\n".join(out)


def _rewrite_images(md: str, src_dir: Path, page_dir: str, slug: str, assets: dict[str, Path]) -> str:
    """Relative images and links to the report's own files: copied beside the page (in ``page_dir``,
    under the docs) into ``slug/``."""
    def repl(m):
        bang, text, target = m.group(1), m.group(2), m.group(3)
        if re.match(r"[a-z]+://|#|/", target):
            return m.group(0)
        src = (src_dir / target).resolve()
        if not src.is_file():
            return m.group(0)        # left as is: the strict build (and the test) report it
        assets[f"{page_dir}/{slug}/{src.name}"] = src
        return f"{bang}[{text}]({slug}/{src.name})"
    return re.sub(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)", repl, md)


def study_reports() -> list[tuple[str, Path]]:
    """(slug, report directory) of every committed study report, the earlier one-seed reports too."""
    out = []
    for d in sorted(STUDIES.iterdir()) if STUDIES.is_dir() else []:
        for report_dir, slug in ((d / "report", d.name), (d, d.name), (d / "earlier-1seed", f"{d.name}-earlier-1seed")):
            if (report_dir / "report.md").is_file() and slug not in {s for s, _ in out}:
                out.append((slug, report_dir))
    return out


def _status(study_dir: Path) -> dict:
    f = study_dir / "status.json"
    return json.loads(f.read_text()) if f.is_file() else {}


def _csv_block(path: Path, link: str) -> list[str]:
    """A committed CSV as a folded table (as it is: every column, every row) with a link to the file."""
    import csv
    rows = list(csv.reader(path.read_text().splitlines()))
    if not rows:
        return []
    head, body = rows[0], rows[1:]
    esc = lambda v: v.replace("|", "/")   # noqa: E731
    out = [f'??? note "{path.name}: {len(body)} rows × {len(head)} columns"', "",
           f"    [{path.name}]({link}) (the file, `{_rel(path)}`)", "",
           "    | " + " | ".join(esc(h) for h in head) + " |", "    |" + "---|" * len(head)]
    out += ["    | " + " | ".join(esc(v) for v in r) + " |" for r in body]
    return out + [""]


def study_page(slug: str, report_dir: Path) -> Page:
    study_dir = STUDIES / slug.removesuffix("-earlier-1seed")
    status = _status(study_dir) if not slug.endswith("-earlier-1seed") else {}
    report = report_dir / "report.md"
    assets: dict[str, Path] = {}
    cites = [_rel(report)]
    head = [f"# Study `{slug}`", ""]
    report_text = report.read_text()
    if status.get("description") and status["description"] not in report_text:
        head += [status["description"], ""]
    facts = []
    if status:
        facts.append(f"**{status.get('complete', '?')} of {status.get('total', '?')}** runs complete "
                     f"(`{_rel(study_dir / 'status.json')}`, updated {status.get('updated', '?')})")
        cites.append(_rel(study_dir / "status.json"))
        if status.get("file"):
            facts.append(f"study file `{status['file']}`")
            cites.append(status["file"])
        if status.get("protocol"):
            facts.append(f"protocol: {status['protocol']}")
    if slug.endswith("-earlier-1seed"):
        study = slug.removesuffix("-earlier-1seed")
        later = (f"the study's 3-seed report ([{study}]({study}.md))" if (STUDIES / study / "report" / "report.md").is_file()
                 else "the study's 3-seed runs once they are committed")
        facts.append(f"earlier single-seed runs on the raw accuracy curve, superseded by {later}")
    html = report_dir / "report.html"
    if html.is_file():
        assets[f"results/{slug}/report.html"] = html
        facts.append(f"the self-contained HTML page: [report.html]({slug}/report.html)")
    facts.append(f"generated from `{_rel(report)}` (written by `edgebed study report`)")
    for f in ("table.csv", "runs.csv"):
        if (report_dir / f).is_file():
            cites.append(_rel(report_dir / f))
    head += [f"- {f}" for f in facts] + ["", "## The report", ""]
    body = _rewrite_images(_intro_as_list(_demote(report_text)), report_dir, "results", slug, assets)
    csvs = sorted(report_dir.glob("*.csv"))
    if csvs:
        body += "\n\n## The tables as committed\n\nEvery CSV `edgebed study report` wrote beside the report, as it is.\n\n"
        for f in csvs:
            assets[f"results/{slug}/{f.name}"] = f
            cites.append(_rel(f))
            body += "\n".join(_csv_block(f, f"{slug}/{f.name}")) + "\n"
    return Page(f"results/{slug}.md", "\n".join(head) + body + "\n", assets, cites)


def _producer(name: str) -> str | None:
    """The benchmark script that writes a result file, if one names it."""
    stem = name.split(".")[0]
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        text = script.read_text()
        if name in text or f'"{stem}' in text or f"'{stem}" in text:
            return _rel(script)
    return None


def benchmark_files() -> list[Path]:
    files = [p for p in sorted(RESULTS.rglob("*")) if p.is_file() and p.suffix in BENCH_SUFFIXES]
    return [p for p in files if STUDIES not in p.parents]


def _summary(p: Path) -> tuple[str, str]:
    """A result file's own one-line description and date, where it carries them."""
    if p.suffix != ".json":
        if p.suffix == ".md":
            lines = [ln for ln in p.read_text().splitlines() if ln.strip()]
            first = next((ln for ln in lines if ln.startswith("#")), None) or \
                next((ln for ln in lines if not ln.startswith("|")), "")
            return first.lstrip("# ").strip()[:160], ""
        return "", ""
    try:
        d = json.loads(p.read_text())
    except ValueError:
        return "", ""
    if not isinstance(d, dict):
        return "", ""
    what = d.get("what") or d.get("benchmark") or d.get("description") or ""
    if not what and d.get("scenario"):
        what = f"scenario {d['scenario']}"
    date = str(d.get("date", ""))
    return " ".join(str(what).split())[:160], date


def _slug(p: Path) -> str:
    """The page name of a benchmark file: its path under benchmarks/results without the suffix, or with
    it when another file has the same stem (ps.json and ps.md)."""
    rel = p.relative_to(RESULTS).with_suffix("").as_posix()
    twins = [q for q in p.parent.iterdir() if q.stem == p.stem and q.suffix in BENCH_SUFFIXES]
    if len(twins) > 1:
        rel += "-" + p.suffix.lstrip(".")
    return rel.replace("/", "--")


def _cell(v) -> str:
    if isinstance(v, float):
        return str(v) if abs(v) < 1e5 else f"{v:,}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v).replace("|", "/").replace("\n", " ")


def _json_tables(data) -> list[str]:
    """A benchmark file's scalar fields, and its ``summary`` (a mapping of mappings), as tables."""
    if not isinstance(data, dict):
        return []
    out = []
    scalars = {k: v for k, v in data.items()
               if isinstance(v, (str, int, float, bool)) and len(str(v)) <= 200 and k not in ("what",)}
    if scalars:
        out += ["| field | value |", "|---|---|"] + [f"| `{k}` | {_cell(v)} |" for k, v in scalars.items()] + [""]
    summary = data.get("summary")
    if isinstance(summary, dict) and summary and all(isinstance(v, dict) for v in summary.values()):
        cols = list(dict.fromkeys(c for v in summary.values() for c in v))
        if all(not isinstance(v.get(c), (dict, list)) for v in summary.values() for c in cols):
            out += ["`summary`:", "", "| | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
            out += [f"| `{k}` | " + " | ".join(_cell(v.get(c, "")) for c in cols) + " |" for k, v in summary.items()]
            out.append("")
    return out


def benchmark_page(p: Path) -> Page:
    rel, slug = _rel(p), _slug(p)
    what, date = _summary(p)
    producer = _producer(p.name)
    lines = [f"# {p.relative_to(RESULTS).as_posix()}", ""]
    facts = [f"the committed file `{rel}`, shown as it is"]
    if producer:
        facts.append(f"written by `{producer}`")
    if date:
        facts.append(f"dated {date}")
    lines += [f"- {f}" for f in facts] + [""]
    if what and p.suffix == ".json":
        lines += [f"> {what}", ""]
    assets: dict[str, Path] = {}
    cites = [rel] + ([producer] if producer else [])
    text = p.read_text() if p.suffix != ".png" else ""
    if p.suffix == ".md":
        lines.append(_rewrite_images(_demote(text), p.parent, "results/benchmarks", slug, assets))
    elif p.suffix == ".png":
        assets[f"results/benchmarks/{slug}/{p.name}"] = p
        lines.append(f"![{p.name}]({slug}/{p.name})")
    else:
        lang = "json" if p.suffix in (".json", ".jsonl") else "text"
        if p.suffix == ".json":
            try:
                data = json.loads(text)
                lines += _json_tables(data)
                text = json.dumps(data, indent=1, ensure_ascii=False)
            except ValueError:
                pass
        body = [f"```{lang}", *text.rstrip().splitlines(), "```"]
        if p.suffix == ".json" and len(text.splitlines()) > 40:      # the tables above come first
            lines += ['??? note "The whole file"', ""] + ["    " + ln if ln else "" for ln in body]
        else:
            lines += body
    return Page(f"results/benchmarks/{slug}.md", "\n".join(lines) + "\n", assets, cites)


def tuning_tables() -> list[Path]:
    return sorted((ROOT / "scenarios" / "studies").glob("*.tuning.csv"))


def tuning_page(csv_path: Path) -> Page:
    """The α grid a study's tuning ran: validation score per cell × α (mean over tuning seeds), and the
    α chosen, from ``<study>.tuning.csv`` and ``<study>.tuned.yaml``."""
    import csv

    import yaml
    study = csv_path.name.removesuffix(".tuning.csv")
    rows = list(csv.DictReader(csv_path.read_text().splitlines()))
    tuned_file = csv_path.with_name(f"{study}.tuned.yaml")
    tuned = yaml.safe_load(tuned_file.read_text()) if tuned_file.is_file() else {}
    chosen = tuned.get("chosen", {}) or {}
    lrs = sorted({float(r["lr"]) for r in rows})
    horizon = tuned.get("horizon")
    cells = list(dict.fromkeys(r["cell"] for r in rows))
    lines = [f"# Tuning of `{study}`", "",
             f"- generated from `{_rel(csv_path)}` (every cell × α × seed, written by `edgebed study tune`)"]
    cites = [_rel(csv_path)]
    if tuned_file.is_file():
        lines.append(f"- the rule and the chosen α: `{_rel(tuned_file)}` — rule `{tuned.get('rule', '?')}`, "
                     f"horizon {tuned.get('horizon', '?'):,} updates, seeds {tuned.get('seeds', '?')}")
        cites.append(_rel(tuned_file))
    lines += ["", "Validation score (mean over the tuning seeds, %); a run that ended before the horizon says "
              "when and why (a diverging α turns Θ to NaN, the PS refuses its pushes, no device is left).", "",
              "| cell | " + " | ".join(f"α = {lr:g}" for lr in lrs) + " | chosen α |",
              "|---|" + "---|" * (len(lrs) + 1)]
    for cell in cells:
        out = []
        for lr in lrs:
            runs = [r for r in rows if r["cell"] == cell and float(r["lr"]) == lr]
            scores = [float(r["score"]) for r in runs if r["score"] not in ("", "nan", "None")]
            early = [r for r in runs if r.get("updates") and horizon and int(r["updates"]) < horizon]
            text = f"{100 * sum(scores) / len(scores):.1f}" if scores else "no score" if runs else "—"
            if early:
                text += " (" + "; ".join(sorted({f"ended at {int(r['updates']):,}: {r['ended']}" for r in early})) + ")"
            out.append(text)
        lines.append(f"| {cell} | " + " | ".join(out) + f" | {chosen.get(cell, '—')} |")
    return Page(f"results/tuning-{study}.md", "\n".join(lines) + "\n", {}, cites)


def _first_sentence(text: str, limit: int = 160) -> str:
    """The first sentence of ``text`` on one line ("Fig. 3" is no sentence end), cut at ``limit``."""
    one = " ".join(text.split())
    one = re.split(r"(?<=[a-z0-9)%])\. (?=[A-Z])", one, maxsplit=1)[0].rstrip(".")
    return one if len(one) <= limit else one[:limit - 1].rstrip() + "…"


def what_it_is(slug: str) -> str:
    """One line saying what study ``slug`` is: its description (status.json, else its study file), else
    the cells its table compares."""
    base = slug.removesuffix("-earlier-1seed")
    status = _status(STUDIES / base)
    text = status.get("description") or ""
    study_file = ROOT / status["file"] if status.get("file") else ROOT / "scenarios" / "studies" / f"{base}.yaml"
    if not text and study_file.is_file():
        import yaml
        text = (yaml.safe_load(study_file.read_text()) or {}).get("description") or ""
    line = _first_sentence(text)
    if not line:
        import csv
        table = next((d / "table.csv" for d in (STUDIES / base / "report", STUDIES / base)
                      if (d / "table.csv").is_file()), None)
        cells = [r.get("cell", "") for r in csv.DictReader(table.read_text().splitlines())] if table else []
        line = _first_sentence("cells: " + ", ".join(filter(None, cells))) if cells else ""
        full = base.removesuffix("-reduced")
        if full != base and (STUDIES / full).is_dir():
            line = f"a reduced version of `{full}`" + (f"; {line}" if line else "")
    if slug.endswith("-earlier-1seed"):
        line = f"earlier single-seed runs of `{base}`" + (f": {line}" if line else "")
    return line.replace("|", "/")


def index_page(studies: list[Page], benches: list[tuple[Path, Page]], tunings: list[Page] = ()) -> Page:
    lines = [
        "# Results",
        "",
        "Generated at build time from the committed result files (`docs/gen/results.py`): each study "
        "report as `edgebed study report` wrote it, each benchmark file as its script wrote it. "
        "Nothing on these pages is typed by hand; what the numbers mean, and the dated record of how "
        "they were obtained, is in the [lab notebook](../lab-notebook.md) and on "
        "[Performance](../performance.md).",
        "",
        "## Studies",
        "",
        "| study | what it is | runs complete | protocol | updated | page |",
        "|---|---|---|---|---|---|",
    ]
    for page in studies:
        slug = Path(page.path).stem
        status = _status(STUDIES / slug) if not slug.endswith("-earlier-1seed") else {}
        done = f"{status['complete']} of {status['total']}" if status else "—"
        updated = status.get("updated", "—")[:16].replace("T", " ")
        lines.append(f"| `{slug}` | {what_it_is(slug) or '—'} | {done} | {status.get('protocol', '—')} | {updated} | "
                     f"[{slug}]({slug}.md) |")
    if tunings:
        lines += ["", "## Tuning of α", "", "| study | page |", "|---|---|"]
        lines += [f"| `{Path(t.path).stem.removeprefix('tuning-')}` | [{Path(t.path).stem}]({Path(t.path).name}) |"
                  for t in tunings]
    lines += ["", "## Benchmark files", "",
              "| file | what it holds | date | written by |", "|---|---|---|---|"]
    for p, page in benches:
        what, date = _summary(p)
        producer = _producer(p.name)
        target = Path(page.path).relative_to("results").as_posix()
        lines.append(f"| [{p.relative_to(RESULTS).as_posix()}]({target}) | {what.replace('|', '/') or '—'} | "
                     f"{date or '—'} | {f'`{producer}`' if producer else '—'} |")
    return Page("results/index.md", "\n".join(lines) + "\n")


def pages() -> list[Page]:
    studies = [study_page(slug, d) for slug, d in study_reports()]
    benches = [(p, benchmark_page(p)) for p in benchmark_files()]
    tunings = [tuning_page(p) for p in tuning_tables()]
    return [index_page(studies, benches, tunings), *studies, *tunings, *(pg for _, pg in benches)]
