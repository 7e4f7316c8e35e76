"""The CLI reference, generated from ``edgebed.cli.build_parser()``: every verb, its arguments and help."""
from __future__ import annotations

import argparse
import html


def _subcommands(parser: argparse.ArgumentParser):
    """(name, parser, help) of each direct sub-command, in the order they were added."""
    for action in parser._actions:      # argparse has no public walk over sub-commands
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            seen = set()
            for name, sub in action.choices.items():
                if id(sub) in seen:
                    continue
                seen.add(id(sub))
                yield name, sub, helps.get(name, "")


def _arguments(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for a in parser._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if a.help == argparse.SUPPRESS:
            continue
        if a.option_strings:
            name = ", ".join(f"`{o}`" for o in a.option_strings)
            if a.nargs != 0 and not isinstance(a, (argparse._StoreTrueAction, argparse._CountAction,
                                                   argparse._VersionAction)):
                name += f" `{a.metavar or a.dest.upper()}`"
        else:
            name = f"`{a.metavar or a.dest}`"
            if a.nargs in ("?", "*"):
                name += " (optional)"
            if a.nargs in ("+", "*"):
                name += " …"
        detail = html.escape(a.help or "", quote=False).replace("|", "\\|")
        if a.choices and not isinstance(a, argparse._SubParsersAction):
            detail += f" Choices: {', '.join(f'`{c}`' for c in a.choices)}."
        if (a.option_strings and a.default not in (None, False, argparse.SUPPRESS, 0, "")
                and "default" not in detail):
            detail += f" Default: `{a.default}`."
        rows.append(f"| {name} | {detail.strip()} |")
    return rows


def _section(parser: argparse.ArgumentParser, path: list[str], help_: str, level: int) -> list[str]:
    out = [f"{'#' * level} `{' '.join(path)}`", ""]
    if help_:
        help_ = html.escape(help_, quote=False)
        out += [help_[0].upper() + help_[1:] + ("" if help_.endswith(".") else "."), ""]
    out += ["```", parser.format_usage().strip().removeprefix("usage: "), "```", ""]
    rows = _arguments(parser)
    if rows:
        out += ["| argument | meaning |", "|---|---|", *rows, ""]
    for name, sub, h in _subcommands(parser):
        out += _section(sub, path + [name], h, min(level + 1, 4))
    return out


def page() -> str:
    """The Markdown of docs/cli.md."""
    from edgebed.cli import build_parser
    parser = build_parser()
    parser.prog = "edgebed"
    lines = [
        "# Command-line reference",
        "",
        "Generated at build time from the argument parser (`edgebed.cli.build_parser`, by "
        "`docs/gen/cli_ref.py`), so it lists exactly what `edgebed <verb> -h` prints. "
        "`-q`, `-v` and `--json` are accepted before or after any verb. Exit codes: 0 ok, 1 a run or "
        "study that did not complete, 2 bad input (the message says what, where and what to do), "
        "130 interrupted (Ctrl-C), 141 output pipe closed early.",
        "",
        "```",
        parser.format_usage().strip().removeprefix("usage: "),
        "```",
        "",
        "| argument | meaning |",
        "|---|---|",
        *_arguments(parser),
        "",
    ]
    for name, sub, h in _subcommands(parser):
        lines += _section(sub, ["edgebed", name], h, 2)
    return "\n".join(lines)
