"""Issue 51, points 5–10: small files whose declared content is huge (or hostile) end in one clear
error naming the file and the limit, quickly and within a small memory bound — never a list of 2^40
class names, a walk over 2^60 paths, a 1.5 GB read, a 10^7-row parse or a traceback. Each case runs in
a child process under an address-space limit (``hostile.run_hostile``), so code that would allocate
the declared size fails fast there instead of taking this host's memory."""
from __future__ import annotations

import gzip
import json
import pickle
import struct
import tarfile
import zlib

import numpy as np
import pytest

from hostile import run_hostile

pytestmark = pytest.mark.timeout(120)


# --- point 5: a label beyond a sane class count ---------------------------------------------------

def test_npz_label_of_2_to_the_40_is_refused_not_listed(tmp_path):
    p = tmp_path / "big_label.npz"
    np.savez(p, x=np.zeros((3, 4), np.float32), y=np.array([0, 1, 2**40]))
    r = run_hostile(f"""
        from edgebed.data.npz import load_npz
        report(lambda: load_npz({str(p)!r}))""")
    assert r.refused_with("LimitError"), r.out
    assert str(p) in r.message and "classes" in r.message and "EDGEBED_LIMIT_CLASSES" in r.message
    assert r.seconds < 20


def test_leaf_label_of_10_to_the_12_is_refused(tmp_path):
    p = tmp_path / "leaf.json"
    p.write_text(json.dumps({"users": ["u"], "num_samples": [2],
                             "user_data": {"u": {"x": [[0.0] * 4, [1.0] * 4], "y": [0, 10**12]}}}))
    r = run_hostile(f"""
        from edgebed.data.leaf import load_leaf
        report(lambda: load_leaf({str(p)!r}))""")
    assert r.refused_with("LimitError"), r.out
    assert str(p) in r.message and "classes" in r.message


def test_parquet_label_of_10_to_the_12_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    p = tmp_path / "t.parquet"
    pq.write_table(pa.table({"image": [[0.0, 1.0], [1.0, 0.0]], "label": [0, 10**12]}), p)
    r = run_hostile(f"""
        from edgebed.data.tabular import TableReader
        report(lambda: TableReader({str(p)!r}).labels())""")
    assert r.refused_with("LimitError"), r.out
    assert str(p) in r.message and "label" in r.message and "classes" in r.message


def test_python_factory_label_of_10_to_the_12_is_refused(tmp_path):
    (tmp_path / "hostile_factory.py").write_text(
        "import numpy as np\n"
        "def make():\n    return np.zeros((2, 3), np.float32), np.array([0, 10**12])\n")
    r = run_hostile(f"""
        sys.path.insert(0, {str(tmp_path)!r})
        from edgebed.data.factory import load_factory
        report(lambda: load_factory("hostile_factory:make"))""")
    assert r.refused_with("LimitError"), r.out
    assert "hostile_factory:make" in r.message and "classes" in r.message


# --- point 6: shared references and self-containing pickles ---------------------------------------

def _shared_pickle(levels: int = 60) -> bytes:
    a: list = []
    for _ in range(levels):
        a = [a, a]
    return pickle.dumps(a, protocol=2)


def test_a_pickle_of_2_to_the_60_shared_paths_is_checked_in_linear_time(tmp_path):
    p = tmp_path / "shared.pkl"
    p.write_bytes(_shared_pickle())
    assert p.stat().st_size < 2000
    r = run_hostile(f"""
        from edgebed.data import safe_pickle
        report(lambda: type(safe_pickle.load({str(p)!r})).__name__)""", timeout=20)
    assert r.rc == 0 and "OK 'list'" in r.out, r.out      # old code: walked every path, cut off at 20 s
    assert r.seconds < 10


def test_the_fedscale_importer_and_cifar_meta_finish_on_a_shared_pickle(tmp_path):
    p = tmp_path / "behave.pkl"
    p.write_bytes(pickle.dumps({0: pickle.loads(_shared_pickle())}, protocol=2))
    r = run_hostile(f"""
        from edgebed.traces.fedscale import import_fedscale
        report(lambda: import_fedscale(behaviour={str(p)!r}))""", timeout=20)
    assert r.refused_with("TraceError"), r.out
    assert str(p) in r.message
    d = tmp_path / "cifar-10-batches-py"
    d.mkdir()
    (d / "batches.meta").write_bytes(_shared_pickle())
    r = run_hostile(f"""
        from edgebed.data.cifar import load_cifar
        report(lambda: load_cifar({str(tmp_path)!r}))""", timeout=20)
    assert r.refused_with("DatasetError"), r.out
    assert "meta" in r.message


def test_a_list_that_contains_itself_is_a_clear_error_not_a_recursion_error(tmp_path):
    a: list = []
    a.append(a)
    p = tmp_path / "self.pkl"
    p.write_bytes(pickle.dumps(a, protocol=2))
    from edgebed.data import DatasetError, safe_pickle
    with pytest.raises(DatasetError, match="contains itself") as got:
        safe_pickle.load(p)
    assert str(p) in str(got.value)
    from edgebed.traces import TraceError
    from edgebed.traces.fedscale import import_fedscale
    q = tmp_path / "behave.pkl"
    q.write_bytes(pickle.dumps({0: a}, protocol=2))
    with pytest.raises(TraceError, match="contains itself"):
        import_fedscale(behaviour=q)


# --- point 7: a FedScale period of 1e-9 s ----------------------------------------------------------

def test_a_fedscale_period_of_a_nanosecond_is_refused_before_unrolling(tmp_path):
    p = tmp_path / "behave.pkl"
    p.write_bytes(pickle.dumps({0: {"active": [0.0], "inactive": [1e-10], "finish_time": 1e-9}}))
    r = run_hostile(f"""
        from edgebed.traces.fedscale import import_fedscale
        report(lambda: import_fedscale(behaviour={str(p)!r}))""")
    assert r.refused_with("LimitError") and r.refused_with("TraceError"), r.out
    assert str(p) in r.message and "finish_time" in r.message


def test_a_fedscale_period_unrolling_past_the_row_budget_is_refused(tmp_path):
    p = tmp_path / "behave.pkl"
    p.write_bytes(pickle.dumps({0: {"active": [0.0], "inactive": [0.001], "finish_time": 0.002}}))
    r = run_hostile(f"""
        from edgebed.traces.fedscale import import_fedscale
        report(lambda: import_fedscale(behaviour={str(p)!r}))""")     # 86400 s / 2 ms = 43 M cycles
    assert r.refused_with("LimitError"), r.out
    assert "rows" in r.message and "EDGEBED_LIMIT_ROWS" in r.message


# --- point 8: a tar member of 1.5 GB zeros ---------------------------------------------------------

def test_a_tar_member_of_1_5_gb_zeros_is_refused_by_its_declared_size(tmp_path):
    size = 1536 << 20
    info = tarfile.TarInfo("cifar-10-batches-py/batches.meta")
    info.size = size
    zeros = gzip.compress(bytes(1 << 20), compresslevel=9)
    p = tmp_path / "cifar-10-python.tar.gz"
    with open(p, "wb") as f:                 # concatenated gzip members: one stream of 1.5 GB + zeros
        f.write(gzip.compress(info.tobuf(tarfile.USTAR_FORMAT)))
        for _ in range(size >> 20):
            f.write(zeros)
        f.write(gzip.compress(bytes(1024)))
    assert p.stat().st_size < 3 << 20
    r = run_hostile(f"""
        from edgebed.data.cifar import load_cifar
        report(lambda: load_cifar({str(p)!r}))""", memory_bytes=1 << 30)
    assert r.refused_with("LimitError"), r.out
    assert "batches.meta" in r.message and "bytes" in r.message and "EDGEBED_LIMIT_BYTES" in r.message
    assert r.seconds < 10


# --- point 9: a 10^7-row CSV trace ------------------------------------------------------------------

def test_a_csv_trace_of_ten_million_rows_is_refused_at_the_row_budget_quickly(tmp_path):
    p = tmp_path / "trace.csv"
    with open(p, "wb") as f:
        f.write(b"device,time_s\n")
        f.write(b"0,1\n" * 10**7)
    r = run_hostile(f"""
        from edgebed.traces import read_trace
        report(lambda: len(read_trace({str(p)!r})))""", timeout=30)
    assert r.refused_with("TraceError") and r.refused_with("LimitError"), r.out
    assert str(p) in r.message and "rows" in r.message
    assert r.seconds < 10


# --- point 10: images, LEAF structure, nesting, non-finite samples, symlinks, trace ranges -------

def _png_header_only(path, w: int, h: int) -> None:
    """A PNG whose header declares w×h greyscale pixels, with one tiny IDAT (Pillow reads the size
    from the header; the decoded image would need w·h bytes)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(bytes(w + 1)))
                     + chunk(b"IEND", b""))


@pytest.mark.parametrize("side", [20000, 12000])     # 400 Mpx (Pillow's bomb error), 144 Mpx (its warning)
def test_a_png_decompression_bomb_names_the_file(tmp_path, side):
    d = tmp_path / "set" / "cls"
    d.mkdir(parents=True)
    _png_header_only(d / "bomb.png", side, side)
    r = run_hostile(f"""
        from edgebed.data.imagefolder import load_imagefolder
        report(lambda: load_imagefolder({str(tmp_path / 'set')!r}))""")
    assert r.refused_with("LimitError"), r.out
    assert "bomb.png" in r.message and "pixels" in r.message and "EDGEBED_LIMIT_PIXELS" in r.message


@pytest.mark.parametrize("doc", [
    {"users": ["u"], "num_samples": 5, "user_data": {"u": {"x": [[0.0]], "y": [0]}}},
    {"users": ["u"], "num_samples": [1], "user_data": [{"x": [[0.0]], "y": [0]}]},
    {"users": 5, "num_samples": [1], "user_data": {"u": {"x": [[0.0]], "y": [0]}}},
    {"users": ["u"], "num_samples": [1], "user_data": {"u": {"x": 3, "y": [0]}}},
], ids=["num_samples-int", "user_data-list", "users-int", "x-int"])
def test_leaf_files_with_wrong_types_name_the_file_and_field(tmp_path, doc):
    from edgebed.data import DatasetError
    from edgebed.data.leaf import load_leaf
    p = tmp_path / "leaf.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(DatasetError) as got:
        load_leaf(p)
    assert str(p) in str(got.value)
    assert any(k in str(got.value) for k in ("num_samples", "user_data", "users", "'x'"))


def test_deeply_nested_leaf_and_trace_json_name_the_file(tmp_path):
    from edgebed.data import DatasetError
    from edgebed.data.leaf import load_leaf
    from edgebed.traces import TraceError, read_trace
    p = tmp_path / "leaf.json"
    p.write_text('{"users": ["u"], "user_data": {"u": {"x": ' + "[" * 200_000 + "]" * 200_000 + ', "y": []}}}')
    with pytest.raises(DatasetError, match="nest") as got:
        load_leaf(p)
    assert str(p) in str(got.value)
    q = tmp_path / "trace.json"
    q.write_text('{"format": "edgebed-trace/1", "devices": {"0": ' + "[" * 100_000 + "]" * 100_000 + "}}")
    with pytest.raises(TraceError, match="nest") as got:
        read_trace(q)
    assert str(q) in str(got.value)


def test_nan_or_inf_samples_are_refused_at_validate_naming_the_file(tmp_path):
    from edgebed.data import missing
    from edgebed.scenario import DatasetSpec
    x = np.zeros((20, 1, 4, 4), np.float32)
    x[7, 0, 1, 1] = np.nan
    p = tmp_path / "nan.npz"
    np.savez(p, x=x, y=np.arange(20) % 2)
    problems = missing(DatasetSpec(format="npz", path=str(p)))
    assert any(str(p) in m and "NaN" in m and "row 7" in m for m in problems), problems
    x[7, 0, 1, 1] = 0.0
    x[3, 0, 0, 0] = np.inf
    np.savez(p, x=x, y=np.arange(20) % 2)
    assert any("row 3" in m for m in missing(DatasetSpec(format="npz", path=str(p))))
    x[3, 0, 0, 0] = 0.0
    np.savez(p, x=x, y=np.arange(20) % 2)
    assert missing(DatasetSpec(format="npz", path=str(p))) == []
    leaf = tmp_path / "leaf.json"
    leaf.write_text('{"users": ["u"], "user_data": {"u": {"x": [[0.0, 1.0, 0.0, Infinity]], "y": [0]}}}')
    assert any(str(leaf) in m and "Inf" in m for m in missing(DatasetSpec(format="leaf", path=str(leaf))))


def test_imagefolder_refuses_symlinks_out_of_its_folder_unless_the_scenario_says_so(tmp_path):
    from PIL import Image
    from edgebed.data import DatasetError
    from edgebed.data.imagefolder import load_imagefolder
    root, outside = tmp_path / "set", tmp_path / "elsewhere"
    (root / "a").mkdir(parents=True)
    outside.mkdir()
    Image.new("L", (4, 4)).save(root / "a" / "in.png")
    Image.new("L", (4, 4)).save(outside / "secret.png")
    (root / "a" / "link.png").symlink_to(outside / "secret.png")
    with pytest.raises(DatasetError, match="follow_symlinks") as got:
        load_imagefolder(root)
    assert "link.png" in str(got.value)
    assert len(load_imagefolder(root, follow_symlinks=True)) == 2
    (root / "a" / "link.png").unlink()
    (root / "b").symlink_to(outside, target_is_directory=True)       # a class folder pointing out
    with pytest.raises(DatasetError, match="follow_symlinks"):
        load_imagefolder(root)
    (root / "b").unlink()
    (root / "a" / "inside.png").symlink_to(root / "a" / "in.png")    # a link within the folder is fine
    assert len(load_imagefolder(root)) == 2


@pytest.mark.parametrize("row,field", [
    ("0,1e308,1,,,,", "time_s"), ("0,0,1,,,1e308,", "uplink_kbit_s"), ("0,1e-300,1,,,,", "time_s"),
    ("0,0,1,,1e-300,,", "ms_per_sample"), ("0,0,1,1e300,,,", "slowdown")])
def test_trace_values_outside_a_sane_range_are_refused(tmp_path, row, field):
    from edgebed.traces import COLUMNS, TraceError, read_trace
    p = tmp_path / "t.csv"
    p.write_text(",".join(COLUMNS) + "\n" + row + "\n")
    with pytest.raises(TraceError, match=field) as got:
        read_trace(p)
    assert str(p) in str(got.value) and "EDGEBED_LIMIT_" in str(got.value)


def test_edgebed_validate_refuses_nan_samples_naming_the_file(tmp_path):
    import yaml
    from edgebed.cli import _validate_one
    x = np.zeros((40, 1, 28, 28), np.float32)
    x[11, 0, 3, 3] = np.inf
    np.savez(tmp_path / "inf.npz", x=x, y=np.arange(40) % 10)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({"name": "nan", "workers": {"n": 2}, "stop": {"updates": 5},
                                        "model": {"name": "mlp"},
                                        "dataset": {"format": "npz", "path": str(tmp_path / "inf.npz")}}))
    out = _validate_one(scenario, ())
    assert not out["ok"]
    assert any("inf.npz" in e and "row 11" in e and "NaN or Inf" in e for e in out["errors"]), out["errors"]
