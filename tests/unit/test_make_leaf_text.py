"""benchmarks/make_leaf_text.py writes LEAF's Shakespeare JSON that edgebed's LEAF loader reads, one
user per text file, with no test window overlapping a training window."""
from __future__ import annotations

import json

import pytest

from benchmarks.make_leaf_text import make
from edgebed.data.leaf import SHAKESPEARE_VOCAB, load_leaf
from edgebed.data.partitions import make_partition

pytestmark = pytest.mark.timeout(20)


def _texts(src):
    src.mkdir()
    (src / "ALPHA").write_text("The quick brown fox jumps over the lazy dog. * Tabs\tand/or_stars; " * 20)
    (src / "BETA").write_text("Permission is hereby granted, free of charge, to any person!\n" * 30)
    (src / "BETA-link").symlink_to(src / "BETA")                       # same text: one user
    (src / "TINY").write_text("too short")                             # no 80-character window
    (src / "LGPL-2").write_text("a near-duplicate revision " * 20)     # left out by default
    return src


def test_writes_leaf_json_with_users_counts_and_next_characters(tmp_path):
    made = make(_texts(tmp_path / "src"), tmp_path / "out", seq=80, stride=3, test_fraction=0.25)
    assert made["users"] == ["ALPHA", "BETA"]
    for split in ("train", "test"):
        doc = json.loads((tmp_path / "out" / split / "licences.json").read_text())
        assert set(doc) == {"users", "num_samples", "user_data"} and doc["users"] == ["ALPHA", "BETA"]
        for u, k in zip(doc["users"], doc["num_samples"]):
            data = doc["user_data"][u]
            assert k == len(data["x"]) == len(data["y"]) > 0
            assert all(len(s) == 80 for s in data["x"]) and all(len(c) == 1 for c in data["y"])
            assert set("".join(data["x"]) + "".join(data["y"])) <= set(SHAKESPEARE_VOCAB) - {"\n", "*", "\t"}
    train = json.loads((tmp_path / "out" / "train" / "licences.json").read_text())["user_data"]["ALPHA"]
    assert train["x"][1][:-3] == train["x"][0][3:] and train["y"][0] == train["x"][1][77]  # stride 3, next char
    assert "  " not in train["x"][0] and "and or stars" in "".join(train["x"])


def test_no_test_window_overlaps_a_training_window(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "U").write_text(" ".join(str(i) for i in range(600)))              # no window repeats
    make(src, tmp_path / "out", seq=80, stride=1, test_fraction=0.2)
    text = (src / "U").read_text()
    last_train = json.loads((tmp_path / "out" / "train" / "licences.json").read_text())["user_data"]["U"]
    first_test = json.loads((tmp_path / "out" / "test" / "licences.json").read_text())["user_data"]["U"]
    end_train = text.index(last_train["x"][-1]) + 80 + 1          # one past its label
    assert text.index(first_test["x"][0]) >= end_train


def test_the_loader_reads_it_with_a_natural_partition_per_user(tmp_path):
    make(_texts(tmp_path / "src"), tmp_path / "out", stride=2)
    s = load_leaf(tmp_path / "out" / "train")
    assert s.x.shape[1] == 80 and len(s.classes) == 80 and list(s.user_names) == ["ALPHA", "BETA"]
    shards, summary = make_partition("natural", s.y, 2, seed=1, num_classes=80, users=s.users)
    assert sorted(len(sh) for sh in shards) == sorted(int((s.users == u).sum()) for u in (0, 1))
