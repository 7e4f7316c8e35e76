"""Partitions: disjoint, covering, seeded; Dirichlet skew grows as α shrinks; natural keeps users whole."""
import hashlib

import numpy as np
import pytest

from edgebed import data
from edgebed.data import DatasetError
from edgebed.data.partitions import SCHEMES, make_partition

pytestmark = pytest.mark.timeout(60)


def bundled_labels():
    return data.load_idx(data.BUNDLED_DIR / data.BUNDLED_FILES[1])[:8000]


def digest(shards):
    return hashlib.sha256(b"".join(np.asarray(s, np.int64).tobytes() for s in shards)).hexdigest()


@pytest.mark.parametrize("scheme, want", [
    # data.partition(bundled 8000 labels, 20, scheme, seed 7) as of d22b288, before this module existed
    ("iid", "0a3aab6d8404c518f3ea86f61478cbd09e1ef798eef05933840070038f86a524"),
    ("by-label", "4b9911c8b1c0041e6df4095d79cc18c5b8aee3bf3d8fdf26137ed2644beb45e1"),
])
def test_todays_partitions_are_bit_identical(scheme, want):
    shards, _ = make_partition(scheme, bundled_labels(), 20, 7, labels_per_worker=2)
    assert digest(shards) == want


def users_of(m, n_users, seed=0):
    return np.random.default_rng(seed).integers(0, n_users, m)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_is_disjoint_covering_and_seeded(scheme):
    y = bundled_labels().astype(np.int64)
    users = users_of(len(y), 40)
    kw = dict(alpha=0.5, labels_per_worker=2, users=users)
    shards, summary = make_partition(scheme, y, 16, 3, 10, **kw)
    allidx = np.concatenate(shards)
    assert len(allidx) == len(np.unique(allidx)) == len(y)        # disjoint and covering
    assert all(len(s) > 0 for s in shards)
    again, _ = make_partition(scheme, y, 16, 3, 10, **kw)
    assert digest(again) == digest(shards)                        # same seed, same shards
    other, _ = make_partition(scheme, y, 16, 4, 10, **kw)
    assert digest(other) != digest(shards)
    assert summary.samples == [len(s) for s in shards]
    assert [sum(h) for h in summary.label_histogram] == summary.samples
    assert summary.label_histogram[0] == np.bincount(y[shards[0]], minlength=10).tolist()


def label_skew(shards, y):
    """Mean total-variation distance between a device's label distribution and the whole set's."""
    overall = np.bincount(y, minlength=10) / len(y)
    return float(np.mean([0.5 * np.abs(np.bincount(y[s], minlength=10) / len(s) - overall).sum() for s in shards]))


def test_dirichlet_skew_grows_as_alpha_shrinks():
    y = bundled_labels().astype(np.int64)
    skew = {a: label_skew(make_partition("dirichlet", y, 20, 1, alpha=a)[0], y) for a in (100.0, 1.0, 0.1)}
    assert skew[100.0] < 0.1 < skew[1.0] < skew[0.1]


def test_dirichlet_min_size_guard_redraws_or_says_what_to_do():
    y = bundled_labels().astype(np.int64)
    shards, summary = make_partition("dirichlet", y, 50, 0, alpha=0.1, min_size=20)
    assert min(len(s) for s in shards) >= 20 and summary.redraws > 0    # the first draws fell short
    with pytest.raises(DatasetError, match="alpha=-1 must be positive"):
        make_partition("dirichlet", y, 5, 0, alpha=-1)
    with pytest.raises(DatasetError, match="needs dataset.alpha"):
        make_partition("dirichlet", y, 5, 0)
    with pytest.raises(DatasetError, match=r"raise alpha, lower dataset.min_size"):
        make_partition("dirichlet", y[:200], 10, 0, alpha=0.001, min_size=19)


def test_natural_keeps_each_user_on_one_device():
    y = bundled_labels().astype(np.int64)[:1000]
    users = users_of(1000, 30)
    shards, summary = make_partition("natural", y, 30, 0, users=users)
    assert [len(np.unique(users[s])) for s in shards] == [1] * 30 == summary.users
    shards, summary = make_partition("natural", y, 7, 0, users=users)
    owner = {}
    for d, s in enumerate(shards):
        for u in np.unique(users[s]):
            assert owner.setdefault(int(u), d) == d                  # no user spans two devices
    assert sorted(summary.users) == [4, 4, 4, 4, 4, 5, 5]
    with pytest.raises(DatasetError, match="only 30 users; a device holds whole users, so lower workers.n to at most 30"):
        make_partition("natural", y, 31, 0, users=users)
    with pytest.raises(DatasetError, match="needs a user / writer id per sample"):
        make_partition("natural", y, 3, 0)


@pytest.mark.parametrize("sizes", ["lognormal", "powerlaw"])
def test_quantity_skew_gives_unequal_sizes_but_iid_labels(sizes):
    y = bundled_labels().astype(np.int64)
    shards, summary = make_partition("quantity", y, 20, 2, sizes=sizes, sigma=1.5, exponent=1.0, min_size=10)
    counts = np.array(summary.samples)
    assert counts.min() >= 10 and counts.max() > 4 * counts.min()
    big = shards[int(np.argmax(counts))]
    assert label_skew([big], y) < 0.1                                # the biggest shard mirrors the set
    with pytest.raises(DatasetError, match="use lognormal or powerlaw"):
        make_partition("quantity", y, 5, 0, sizes="zipf")


def test_unknown_scheme_names_the_known_ones():
    with pytest.raises(DatasetError, match="use one of iid, by-label, dirichlet, natural, quantity"):
        make_partition("pathological", np.zeros(10, np.int64), 2, 0)
