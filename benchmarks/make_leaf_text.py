"""A LEAF-Shakespeare-format text set from text on this machine: the licence texts Debian ships.

**Not Shakespeare.** Nothing can be downloaded here, so the zoo's char-LSTM run trains on the
licences under ``/usr/share/common-licenses`` (Apache-2.0, GPL-3, MPL-2.0, ...), written in LEAF's
JSON (Caldas et al. 2018) exactly as LEAF's ``shakespeare/preprocess`` writes its set::

    {"users": [...], "num_samples": [...], "user_data": {user: {"x": [80-character strings],
                                                                "y": [the next character]}}}

Natural split: one user per licence file (the writer), as LEAF has one per speaking role. Each text
is read as UTF-8, every character outside LEAF's 80-character vocabulary (``* _ / = < ` %``, tabs,
form feeds) becomes a space, and runs of whitespace (the hard line wraps) become one space. A user's
samples are the windows ``text[i:i+80] → text[i+80]`` for ``i`` in steps of ``stride``; the first
``1 - test_fraction`` of a user's windows are training samples, the rest test samples, with ``seq``
characters left out between them so that no test window overlaps a training window (LEAF splits
Shakespeare by position for the same reason). Files that are the same text (symlinks) are read once;
``GFDL-1.2`` and ``LGPL-2`` are left out by default: revisions of ``GFDL-1.3`` and ``LGPL-2.1``
whose text is nearly the same, which would put a user's test text into another's training set.
Writes ``<out>/train/licences.json`` and ``<out>/test/licences.json``.

    python -m benchmarks.make_leaf_text [--src /usr/share/common-licenses] [--out ~/.cache/edgebed/licences-leaf]
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from edgebed.data.leaf import SHAKESPEARE_VOCAB

SOURCE = "/usr/share/common-licenses"
OUT = "~/.cache/edgebed/licences-leaf"
NEAR_DUPLICATES = ("GFDL-1.2", "LGPL-2")


def clean(text: str) -> str:
    """``text`` over LEAF's vocabulary: other characters become spaces, whitespace runs one space."""
    keep = set(SHAKESPEARE_VOCAB) - {"\n"}
    return re.sub(r"\s+", " ", "".join(c if c in keep else " " for c in text)).strip()


def windows(text: str, seq: int, stride: int) -> tuple[list[str], list[str]]:
    """(x, y): every ``stride``-th ``seq``-character window of ``text`` and the character after it."""
    starts = range(0, len(text) - seq, stride)
    return [text[i:i + seq] for i in starts], [text[i + seq] for i in starts]


def split_user(text: str, seq: int, stride: int, test_fraction: float) -> tuple[dict, dict]:
    """A user's ({x, y} train, {x, y} test): the text's first part trains, its last ``test_fraction``
    tests, ``seq`` characters apart so no test window shares a character with a training window."""
    cut = int(len(text) * (1 - test_fraction))
    train = windows(text[:cut], seq, stride)
    test = windows(text[cut + seq:], seq, stride)
    return {"x": train[0], "y": train[1]}, {"x": test[0], "y": test[1]}


def texts(src: Path, exclude=NEAR_DUPLICATES) -> dict[str, str]:
    """{user: cleaned text} of every regular file under ``src``, each real file once, by sorted name."""
    seen, out = set(), {}
    for f in sorted(src.iterdir()):
        real = f.resolve()
        if f.name in exclude or real in seen or not real.is_file():
            continue
        seen.add(real)
        out[real.name] = clean(real.read_text(encoding="utf-8", errors="replace"))
    return out


def make(src: Path, out: Path, seq: int = 80, stride: int = 4, test_fraction: float = 0.2,
         exclude=NEAR_DUPLICATES) -> dict:
    """Write the LEAF JSON train and test files under ``out``; returns {"users", "train", "test"}
    (sample counts)."""
    docs = {"train": {"users": [], "num_samples": [], "user_data": {}},
            "test": {"users": [], "num_samples": [], "user_data": {}}}
    for user, text in texts(src, exclude).items():
        parts = dict(zip(("train", "test"), split_user(text, seq, stride, test_fraction)))
        if not parts["train"]["y"] or not parts["test"]["y"]:
            continue                                      # too short for a window on both sides
        for name, data in parts.items():
            docs[name]["users"].append(user)
            docs[name]["num_samples"].append(len(data["y"]))
            docs[name]["user_data"][user] = data
    if not docs["train"]["users"]:
        raise SystemExit(f"{src}: no text long enough for {seq}-character windows")
    for name, doc in docs.items():
        (out / name).mkdir(parents=True, exist_ok=True)
        (out / name / "licences.json").write_text(json.dumps(doc))
    return {"users": docs["train"]["users"], "train": sum(docs["train"]["num_samples"]),
            "test": sum(docs["test"]["num_samples"])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default=SOURCE, help="directory of text files, one user each")
    ap.add_argument("--out", default=OUT, help="writes <out>/train/licences.json and <out>/test/licences.json")
    ap.add_argument("--seq", type=int, default=80, help="characters per sample (LEAF: 80)")
    ap.add_argument("--stride", type=int, default=4, help="characters between consecutive windows")
    ap.add_argument("--test-fraction", type=float, default=0.2)
    args = ap.parse_args(argv)
    made = make(Path(args.src).expanduser(), Path(args.out).expanduser(), args.seq, args.stride,
                args.test_fraction)
    print(f"{args.out}: {len(made['users'])} users, {made['train']:,} training and {made['test']:,} test samples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
