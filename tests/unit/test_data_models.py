"""Datasets (IDX, bundled digits, verified download, partitions) and the paper's models."""
import gzip
import hashlib
import http.server
import struct
import threading
from functools import partial

import numpy as np
import pytest
import torch

from edgebed import data
from edgebed.models import build_model, get_flat, grad_flat, layers_of, num_params, set_flat


def test_cnn_has_exactly_the_papers_211690_parameters():
    m = build_model("cnn")
    assert num_params(m) == 211_690
    assert [l.size for l in layers_of(m)] == [288, 32, 9216, 32, 200704, 128, 1280, 10]
    assert num_params(build_model("mlp")) == 784 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10


def test_flat_roundtrip_keeps_channels_last():
    m = build_model("cnn", seed=3)
    theta = get_flat(m)
    m2 = build_model("cnn", seed=4)
    set_flat(m2, theta)
    np.testing.assert_array_equal(get_flat(m2), theta)
    assert m2.conv2.weight.is_contiguous(memory_format=torch.channels_last)
    x = torch.randn(2, 1, 28, 28)
    torch.nn.functional.cross_entropy(m2(x), torch.tensor([1, 2])).backward()
    assert grad_flat(m2).shape == theta.shape


def test_bundled_digits_are_the_real_10k():
    ds = data.load_bundled(0.2)
    assert ds.train_x.shape == (8000, 28, 28) and ds.test_x.shape == (2000, 28, 28)
    y = np.concatenate([ds.train_y, ds.test_y])
    assert np.bincount(y).tolist() == [1001, 1127, 991, 1032, 980, 863, 1014, 1070, 944, 978]


def write_idx(path, arr, gz=False):
    code = {np.uint8: 0x08}[arr.dtype.type]
    raw = struct.pack(">BBBB", 0, 0, code, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()
    (gzip.open if gz else open)(path, "wb").write(raw)


def test_load_dir_reads_standard_layout(tmp_path):
    rng = np.random.default_rng(0)
    for stem, shape in [("train-images-idx3-ubyte", (6, 28, 28)), ("t10k-images-idx3-ubyte", (3, 28, 28)),
                        ("train-labels-idx1-ubyte", (6,)), ("t10k-labels-idx1-ubyte", (3,))]:
        write_idx(tmp_path / (stem + ".gz"), rng.integers(0, 10, shape, dtype=np.uint8), gz=True)
    ds = data.load_dir(tmp_path)
    assert ds.train_x.shape == (6, 28, 28) and ds.test_y.shape == (3,)


def test_truncated_idx_is_a_clear_error(tmp_path):
    p = tmp_path / "x-idx1-ubyte"
    p.write_bytes(struct.pack(">BBBBI", 0, 0, 8, 1, 10) + b"\0" * 3)
    with pytest.raises(data.DatasetError, match="truncated"):
        data.load_idx(p)
    with pytest.raises(data.DatasetError, match="missing train-images"):
        data.load_dir(tmp_path)


@pytest.fixture
def http_dir(tmp_path):
    srv_dir = tmp_path / "srv"
    srv_dir.mkdir()
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(srv_dir))
    handler.log_message = lambda *a: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield srv_dir, f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


def test_download_verifies_sha256_against_loopback_server(http_dir, tmp_path):
    srv, url = http_dir
    sums = {}
    for name in ("a.gz", "b.gz"):
        (srv / name).write_bytes(name.encode() * 100)
        sums[name] = hashlib.sha256((srv / name).read_bytes()).hexdigest()
    dest = data.download_mnist(tmp_path / "cache", base_url=url, checksums=sums)
    assert (dest / "a.gz").read_bytes() == b"a.gz" * 100
    (srv / "b.gz").write_bytes(b"tampered")
    (dest / "b.gz").unlink()
    with pytest.raises(data.DatasetError, match="does not match"):
        data.download_mnist(tmp_path / "cache", base_url=url, checksums=sums)
    assert not (dest / "b.gz").exists() and not list(dest.glob(".*"))   # no temporary file left either


def test_download_failure_is_explained(tmp_path, http_dir):
    _, url = http_dir
    with pytest.raises(data.DatasetError, match="download of missing.gz"):
        data.download_mnist(tmp_path / "c", base_url=url, checksums={"missing.gz": "0" * 64})


def test_partitions_cover_disjointly():
    y = np.repeat(np.arange(10), 50).astype(np.uint8)
    for scheme in ("iid", "by-label"):
        parts = data.partition(y, 10, scheme, seed=1)
        allidx = np.concatenate(parts)
        assert len(allidx) == len(y) and len(np.unique(allidx)) == len(y)
    by = data.partition(y, 10, "by-label", seed=1, labels_per_worker=2)
    assert max(len(np.unique(y[p])) for p in by) <= 2
    assert min(len(np.unique(y[p])) for p in data.partition(y, 10, "iid", seed=1)) >= 5
    with pytest.raises(data.DatasetError, match="workers but only"):
        data.partition(y[:5], 10, "iid", 0)
