"""``source: download``: the standard archives fetched from a local file:// URL or a loopback HTTP
server started here (nothing else is reached), verified, cached; a wrong digest keeps nothing."""
import hashlib
import http.server
import tarfile
import threading
from functools import partial

import numpy as np
import pytest

from edgebed.data import DatasetError, load_dir
from edgebed.data.cifar import load_cifar
from edgebed.data.download import STANDARD, download

from tests.unit.data.on_disk import write_cifar10

pytestmark = pytest.mark.timeout(60)


def md5(p):
    return hashlib.md5(p.read_bytes()).hexdigest()


@pytest.fixture
def cifar_tarball(tmp_path):
    write_cifar10(tmp_path / "src")
    serve = tmp_path / "serve"
    serve.mkdir(exist_ok=True)
    tgz = serve / "cifar-10-python.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(tmp_path / "src" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    return tgz


@pytest.fixture
def loopback(tmp_path):
    """An HTTP server on 127.0.0.1 (port 0) serving tmp_path/serve."""
    (tmp_path / "serve").mkdir(exist_ok=True)
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "serve"))
    handler.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/"
    srv.shutdown()
    srv.server_close()
    t.join()


def test_cifar10_download_from_a_file_url_then_loads(tmp_path, cifar_tarball):
    cache = tmp_path / "cache"
    out = download("cifar10", cache, base_url=cifar_tarball.parent.as_uri(),
                   digests={cifar_tarball.name: md5(cifar_tarball)})
    assert load_cifar(out / "cifar-10-python.tar.gz", "cifar10", "test").x.shape == (4, 3, 32, 32)
    mtime = (cache / cifar_tarball.name).stat().st_mtime_ns
    cifar_tarball.unlink()                     # a cached, verified file is not fetched again
    download("cifar10", cache, base_url=cifar_tarball.parent.as_uri(), digests={cifar_tarball.name: md5(cache / cifar_tarball.name)})
    assert (cache / cifar_tarball.name).stat().st_mtime_ns == mtime


def test_fashion_mnist_over_loopback_http(tmp_path, loopback):
    import gzip
    import struct
    rng = np.random.default_rng(0)
    digests = {}
    for url, _, _ in STANDARD["fashion-mnist"]:
        name = url.rsplit("/", 1)[1]
        shape = (5, 28, 28) if "images" in name else (5,)
        arr = rng.integers(0, 10, shape, dtype=np.uint8)
        raw = struct.pack(">BBBB", 0, 0, 8, arr.ndim) + struct.pack(f">{arr.ndim}I", *shape) + arr.tobytes()
        (tmp_path / "serve" / name).write_bytes(gzip.compress(raw))
        digests[name] = md5(tmp_path / "serve" / name)
    out = download("fashion-mnist", tmp_path / "cache", base_url=loopback, digests=digests)
    assert load_dir(out).train_x.shape == (5, 28, 28)


def test_a_wrong_digest_keeps_nothing(tmp_path, loopback, cifar_tarball):
    with pytest.raises(DatasetError, match="md5 .* does not match the expected 0+; .*nothing was kept"):
        download("cifar10", tmp_path / "cache", base_url=loopback, digests={cifar_tarball.name: "0" * 32})
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_missing_file_and_an_unknown_set_say_what_to_do(tmp_path, loopback):
    with pytest.raises(DatasetError, match=r"download of http://127\.0\.0\.1:\d+/cifar-100-python.tar.gz failed.*"
                                           r"dataset.source: path"):
        download("cifar100", tmp_path / "cache", base_url=loopback)
    with pytest.raises(DatasetError, match=r"no standard download; use one of \['cifar10', 'cifar100', 'fashion-mnist'\]"):
        download("imagenet", tmp_path / "cache")


def test_standard_urls_carry_the_published_digests():
    assert STANDARD["cifar10"] == [("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz", "md5",
                                    "c58f30108f718f92721af3b95e74349a")]
    assert all(len(d) == 32 for entries in STANDARD.values() for _, _, d in entries)


def test_a_load_spec_with_source_download_fetches_then_reads(tmp_path, cifar_tarball):
    from edgebed.data import formats
    spec = formats.LoadSpec("cifar10", str(tmp_path / "cache"), split="test", source="download",
                            options={"url": cifar_tarball.parent.as_uri(),
                                     "digests": {cifar_tarball.name: md5(cifar_tarball)}})
    ds = formats.load(spec)
    assert ds.x.shape == (4, 3, 32, 32) and (tmp_path / "cache" / cifar_tarball.name).exists()
