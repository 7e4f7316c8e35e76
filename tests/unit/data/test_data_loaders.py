"""Every data-set loader on small files written here in that format, and its errors for malformed ones."""
import json
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from edgebed.data import DatasetError
from edgebed.data import formats, safe_pickle
from edgebed.data.arrayset import ArraySet, channel_stats, normalise, random_crop, shard
from edgebed.data.cifar import load_cifar
from edgebed.data.factory import load_factory
from edgebed.data.imagefolder import load_imagefolder
from edgebed.data.leaf import SHAKESPEARE_VOCAB, load_leaf
from edgebed.data.npz import load_npz
from edgebed.data.tabular import TableReader
from tests.unit.data.on_disk import write_cifar10

pytestmark = pytest.mark.timeout(60)


def test_cifar10_pickles_load_as_uint8_images_with_names(tmp_path):
    d = write_cifar10(tmp_path)
    train = load_cifar(tmp_path, "cifar10", "train")
    assert train.x.shape == (20, 3, 32, 32) and train.x.dtype == np.uint8
    assert train.classes[0] == "airplane" and train.num_classes == 10
    # the first image's red plane is the first 1024 bytes of its row, as CIFAR documents
    raw = pickle.loads((d / "data_batch_1").read_bytes(), encoding="bytes")[b"data"][0]
    np.testing.assert_array_equal(train.x[0, 0].ravel(), raw[:1024])
    assert len(load_cifar(d, "cifar10", "test")) == 4


def test_cifar10_reads_the_tarball_in_place(tmp_path):
    import tarfile
    write_cifar10(tmp_path / "src")
    tgz = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(tmp_path / "src" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    assert load_cifar(tgz, "cifar10", "train").x.shape == (20, 3, 32, 32)


def test_cifar100_fine_and_coarse_labels(tmp_path):
    d = tmp_path / "cifar-100-python"
    d.mkdir()
    rng = np.random.default_rng(1)
    meta = {b"fine_label_names": [f"f{i}".encode() for i in range(100)],
            b"coarse_label_names": [f"c{i}".encode() for i in range(20)]}
    (d / "meta").write_bytes(pickle.dumps(meta, protocol=2))
    for split, n in (("train", 6), ("test", 2)):
        batch = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                 b"fine_labels": [99, 0, 5, 7, 1, 2][:n], b"coarse_labels": [19, 0, 1, 1, 0, 2][:n]}
        (d / split).write_bytes(pickle.dumps(batch, protocol=2))
    fine = load_cifar(tmp_path, "cifar100", "train")
    coarse = load_cifar(tmp_path, "cifar100", "train", label="coarse")
    assert fine.num_classes == 100 and fine.y.tolist() == [99, 0, 5, 7, 1, 2]
    assert coarse.num_classes == 20 and coarse.y.max() == 19


def test_a_pickle_that_names_another_object_is_refused_before_it_runs(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))
    p = tmp_path / "data_batch_1"
    p.write_bytes(pickle.dumps({b"data": Evil()}, protocol=2))
    with pytest.raises(DatasetError, match=r"print, which a data-set file never needs; refusing"):
        safe_pickle.load(p)


def test_cifar_errors_say_what_where_and_what_to_do(tmp_path):
    d = write_cifar10(tmp_path)
    (d / "data_batch_3").unlink()
    with pytest.raises(DatasetError, match=r"missing data_batch_3.*cifar-10-python.tar.gz"):
        load_cifar(d, "cifar10")
    (d / "data_batch_3").write_bytes(b"not a pickle at all")
    with pytest.raises(DatasetError, match=r"data_batch_3: not a readable pickle.*re-download"):
        load_cifar(d, "cifar10")
    (d / "data_batch_3").write_bytes(pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}, protocol=2))
    with pytest.raises(DatasetError, match=r"data_batch_3: data is uint8 \(2, 100\), not uint8 \(N, 3072\)"):
        load_cifar(d, "cifar10")


def write_png(path, arr):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)


def test_imagefolder_classes_are_sorted_subdirectories(tmp_path):
    rng = np.random.default_rng(0)
    for cls, n in (("zebra", 2), ("cat", 3)):
        for i in range(n):
            write_png(tmp_path / cls / f"{i}.png", rng.integers(0, 256, (5, 7, 3), dtype=np.uint8))
    (tmp_path / "cat" / "README.txt").write_text("not an image, ignored")
    ds = load_imagefolder(tmp_path)
    assert ds.classes == ["cat", "zebra"] and ds.y.tolist() == [0, 0, 0, 1, 1]
    assert ds.x.shape == (5, 3, 5, 7) and ds.x.dtype == np.uint8
    first = np.asarray(Image.open(tmp_path / "cat" / "0.png")).transpose(2, 0, 1)
    np.testing.assert_array_equal(ds.x[0], first)
    grey = load_imagefolder(tmp_path, channels=1, size=(4, 4))
    assert grey.input_shape == (1, 4, 4)


def test_imagefolder_errors(tmp_path):
    with pytest.raises(DatasetError, match="no class subdirectories"):
        load_imagefolder(tmp_path)
    write_png(tmp_path / "a" / "0.png", np.zeros((4, 4), np.uint8))
    write_png(tmp_path / "a" / "1.png", np.zeros((5, 4), np.uint8))
    with pytest.raises(DatasetError, match=r"1\.png: image is 4×5.*dataset\.size"):
        load_imagefolder(tmp_path)
    (tmp_path / "a" / "1.png").write_bytes(b"garbage")
    with pytest.raises(DatasetError, match=r"1\.png: not a readable image"):
        load_imagefolder(tmp_path)


def test_npz_is_memory_mapped_and_a_shard_reads_only_its_rows(tmp_path):
    x = np.arange(40 * 3 * 2 * 2, dtype=np.float32).reshape(40, 3, 2, 2)
    y = np.arange(40) % 4
    p = tmp_path / "set.npz"
    np.savez(p, images=x, targets=y, writer=np.repeat(["w1", "w2"], 20))
    ds = load_npz(p, "images", "targets", users_key="writer")
    assert isinstance(ds.x, np.memmap) and ds.num_classes == 4
    part = shard(ds, [3, 17, 39])
    assert not isinstance(part.x, np.memmap)
    np.testing.assert_array_equal(part.x, x[[3, 17, 39]])
    assert part.y.tolist() == [3, 1, 3] and ds.user_names == ["w1", "w2"] and part.users.tolist() == [0, 0, 1]
    pc = tmp_path / "c.npz"
    np.savez_compressed(pc, x=x, y=y)
    cds = load_npz(pc)
    assert not isinstance(cds.x, np.memmap)
    np.testing.assert_array_equal(cds.x, x)


def test_npz_errors(tmp_path):
    p = tmp_path / "set.npz"
    np.savez(p, a=np.zeros((2, 3)), y=np.array([0, 1]))
    with pytest.raises(DatasetError, match=r"no array named 'x' \(has \['a', 'y'\]\); set dataset.x_key"):
        load_npz(p)
    np.savez(p, x=np.zeros((2, 3)), y=np.array([0.5, 1]))
    with pytest.raises(DatasetError, match="labels must be integers"):
        load_npz(p)
    np.savez(p, x=np.zeros((3, 3)), y=np.array([0, 1]))
    with pytest.raises(DatasetError, match="3 samples but 2 labels"):
        load_npz(p)
    (tmp_path / "bad.npz").write_bytes(b"nope")
    with pytest.raises(DatasetError, match="not a readable .npz"):
        load_npz(tmp_path / "bad.npz")


def png_bytes(arr):
    import io
    b = io.BytesIO()
    Image.fromarray(arr).save(b, format="PNG")
    return b.getvalue()


def test_parquet_in_hugging_face_layout_reads_only_the_rows_asked(tmp_path):
    rng = np.random.default_rng(0)
    imgs = [rng.integers(0, 256, (6, 6), dtype=np.uint8) for _ in range(10)]
    labels = [i % 3 for i in range(10)]
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({"image": pa.array([{"bytes": png_bytes(a), "path": None} for a in imgs], image_type),
                      "label": labels, "writer": [f"u{i // 4}" for i in range(10)]})
    hf = {"info": {"features": {"label": {"names": ["a", "b", "c"], "_type": "ClassLabel"}}}}
    table = table.replace_schema_metadata({"huggingface": json.dumps(hf)})
    p = tmp_path / "train.parquet"
    pq.write_table(table, p, row_group_size=3)
    r = TableReader(p, user_column="writer")
    assert r.labels().tolist() == labels and r._classes == ["a", "b", "c"]
    part = r.take([9, 1, 4])
    assert part.x.shape == (3, 1, 6, 6)
    np.testing.assert_array_equal(part.x[0, 0], imgs[9])
    np.testing.assert_array_equal(part.x[1, 0], imgs[1])
    assert part.y.tolist() == [0, 1, 1] and part.users.tolist() == [2, 0, 1]
    spec = formats.LoadSpec("parquet", str(p), options={"user_column": "writer"})
    y, k, users = formats.labels(spec)
    assert k == 3 and users.tolist() == [0] * 4 + [1] * 4 + [2] * 2


def test_arrow_stream_with_nested_pixel_lists_and_string_labels(tmp_path):
    x = np.arange(4 * 12, dtype=np.float32).reshape(4, 12)
    table = pa.table({"pixels": pa.array(x.tolist(), pa.list_(pa.float32())), "label": ["dog", "cat", "dog", "emu"]})
    p = tmp_path / "data-00000-of-00001.arrow"
    with pa.OSFile(str(p), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    ds = formats.load(formats.LoadSpec("arrow", str(p), options={"image_column": "pixels", "shape": [3, 2, 2]}))
    assert ds.classes == ["cat", "dog", "emu"] and ds.y.tolist() == [1, 0, 1, 2]
    np.testing.assert_array_equal(ds.x, x.reshape(4, 3, 2, 2))


def test_table_errors_name_the_columns(tmp_path):
    p = tmp_path / "t.parquet"
    pq.write_table(pa.table({"img": [b"x"], "label": [0]}), p)
    with pytest.raises(DatasetError, match=r"no image column 'image' \(columns: \['img', 'label'\]\); set dataset.image_column"):
        TableReader(p)
    with pytest.raises(DatasetError, match=r"row 0: not a readable image"):
        TableReader(p, image_column="img").read()
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 nope")
    with pytest.raises(DatasetError, match="not a readable Parquet file"):
        TableReader(tmp_path / "bad.parquet")


def leaf_doc(users, per_user, make_x, make_y):
    return {"users": users, "num_samples": [per_user] * len(users),
            "user_data": {u: {"x": [make_x(u, i) for i in range(per_user)], "y": [make_y(u, i) for i in range(per_user)]}
                          for u in users}}


def test_leaf_femnist_keeps_each_writer(tmp_path):
    d = tmp_path / "train"
    d.mkdir()
    (d / "all_data_0.json").write_text(json.dumps(leaf_doc(["f_01", "f_02"], 3, lambda u, i: [i / 10] * 784, lambda u, i: 61 if u == "f_02" else i)))
    (d / "all_data_1.json").write_text(json.dumps(leaf_doc(["f_03"], 2, lambda u, i: [0.0] * 784, lambda u, i: 10)))
    ds = load_leaf(d)
    assert ds.x.shape == (8, 1, 28, 28) and ds.x.dtype == np.float32
    assert ds.num_classes == 62 and ds.classes[10] == "A" and ds.classes[61] == "z"
    assert ds.user_names == ["f_01", "f_02", "f_03"] and ds.users.tolist() == [0, 0, 0, 1, 1, 1, 2, 2]
    assert ds.x[1, 0, 5, 5] == pytest.approx(0.1)


def test_leaf_shakespeare_becomes_token_sequences(tmp_path):
    line = "To be, or not to be, that is the question: Whether 'tis nobler in the mind to su"
    assert len(line) == 80
    doc = {"users": ["HAMLET"], "num_samples": [2],
           "user_data": {"HAMLET": {"x": [line, line[1:] + "f"], "y": ["f", "f"]}}}
    p = tmp_path / "s.json"
    p.write_text(json.dumps(doc))
    ds = load_leaf(p)
    assert ds.is_sequence and ds.x.shape == (2, 80) and ds.x.dtype == np.int64
    assert ds.vocab == SHAKESPEARE_VOCAB and ds.num_classes == 80
    assert "".join(ds.vocab[i] for i in ds.x[0]) == line and ds.classes[ds.y[0]] == "f"
    doc["user_data"]["HAMLET"]["x"][0] = "é" + line[1:]
    p.write_text(json.dumps(doc))
    with pytest.raises(DatasetError, match="character 'é' is not in the vocabulary; give dataset.vocab"):
        load_leaf(p)


def test_leaf_errors(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"users": ["a"], "num_samples": [3], "user_data": {"a": {"x": [[0.0]], "y": [1]}}}')
    with pytest.raises(DatasetError, match=r"num_samples says user 'a' has 3 samples, user_data holds 1"):
        load_leaf(p)
    p.write_text('{"x": 1}')
    with pytest.raises(DatasetError, match="not LEAF JSON: needs keys 'users' and 'user_data'"):
        load_leaf(p)
    p.write_text("{")
    with pytest.raises(DatasetError, match="not readable JSON"):
        load_leaf(p)


def test_python_factory_by_import_path(tmp_path, monkeypatch):
    (tmp_path / "mydata.py").write_text(
        "import numpy as np\n"
        "def arrays(n=5):\n    return np.zeros((n, 2), np.float32), np.arange(n) % 2\n"
        "class Pairs:\n    classes = ['no', 'yes']\n"
        "    def __len__(self): return 3\n"
        "    def __getitem__(self, i): return np.full((1, 2, 2), i, np.float32), i % 2\n"
        "def torchish():\n    return Pairs()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ds = load_factory("mydata:arrays", {"n": 7})
    assert len(ds) == 7 and ds.num_classes == 2
    pairs = formats.load(formats.LoadSpec("python", options={"factory": "mydata:torchish"}))
    assert pairs.classes == ["no", "yes"] and pairs.x[2, 0, 0, 0] == 2 and pairs.y.tolist() == [0, 1, 0]
    with pytest.raises(DatasetError, match="has no attribute 'nope'"):
        load_factory("mydata:nope")
    with pytest.raises(DatasetError, match="can't import no_such_module_xyz"):
        load_factory("no_such_module_xyz:f")
    with pytest.raises(DatasetError, match="write it as 'package.module:function'"):
        load_factory("mydata")


def test_idx_format_keeps_the_mnist_reader():
    from edgebed import data
    d = data.BUNDLED_DIR
    # the bundled files use other names; the idx format reads a standard-layout directory
    with pytest.raises(DatasetError, match="missing train-images-idx3-ubyte"):
        formats.load(formats.LoadSpec("idx", str(d)))
    with pytest.raises(DatasetError, match="unknown dataset.format 'csv'; use one of arrow, cifar10"):
        formats.load(formats.LoadSpec("csv", "x"))


def test_normalisation_and_transforms():
    x = np.stack([np.full((2, 3, 3), 51, np.uint8), np.full((2, 3, 3), 153, np.uint8)])   # 0.2 and 0.6
    mean, std = channel_stats(x.astype(np.float32) / 255, chunk=1)
    assert mean == pytest.approx((0.4, 0.4)) and std == pytest.approx((0.2, 0.2))
    z = normalise(x, mean, std)
    assert z.dtype == np.float32 and z[0, 0, 0, 0] == pytest.approx(-1.0) and z[1, 1, 2, 2] == pytest.approx(1.0)
    with pytest.raises(DatasetError, match="1 means and 1 stds for 2 channels"):
        normalise(x, [0.5], [0.5])
    crop = random_crop(np.ones((4, 1, 5, 5), np.float32), 2, np.random.default_rng(0))
    assert crop.shape == (4, 1, 5, 5)


def test_arrayset_refuses_labels_outside_its_classes():
    with pytest.raises(DatasetError, match=r"labels span 0\.\.5 but the data set names 3 classes"):
        ArraySet(np.zeros((2, 1)), np.array([0, 5]), ["a", "b", "c"])


def test_load_shard_reads_only_the_rows_of_an_npz_in_the_order_given(tmp_path):
    from edgebed.data.npz import read_rows
    x = np.arange(30 * 2 * 3, dtype=np.int16).reshape(30, 2, 3)
    p = tmp_path / "s.npz"
    np.savez(p, x=x, y=np.arange(30) % 3, u=np.arange(30) // 10)
    for rows in ([0, 1, 2, 7, 8, 29], [29, 3, 4, 0], []):
        np.testing.assert_array_equal(read_rows(p, "x", rows), x[rows])
    part = formats.load_shard(formats.LoadSpec("npz", str(p), options={"users_key": "u"}), [12, 5, 6])
    np.testing.assert_array_equal(part.x, x[[12, 5, 6]])
    assert part.y.tolist() == [0, 2, 0] and part.users.tolist() == [1, 0, 0]
    np.savez_compressed(p, x=x, y=np.arange(30) % 3)     # compressed: read whole, same rows
    np.testing.assert_array_equal(read_rows(p, "x", [4, 2]), x[[4, 2]])
    with pytest.raises(DatasetError, match=r"rows 0\.\.30 asked, it has 30"):
        formats.load_shard(formats.LoadSpec("npz", str(p)), [0, 30])


def test_parquet_nested_lists_any_depth_and_ragged_rows_refused(tmp_path):
    x = np.arange(6 * 2 * 3, dtype=np.uint8).reshape(6, 2, 3)
    p = tmp_path / "n.parquet"
    pq.write_table(pa.table({"image": pa.array(x.tolist(), pa.list_(pa.list_(pa.uint8()))), "label": [0, 1] * 3}),
                   p, row_group_size=2)
    r = TableReader(p, shape=[1, 2, 3])
    part = r.take([5, 0, 3])
    assert part.x.dtype == np.uint8
    np.testing.assert_array_equal(part.x[:, 0], x[[5, 0, 3]])
    pq.write_table(pa.table({"image": [[1, 2], [3]], "label": [0, 1]}), p)
    with pytest.raises(DatasetError, match=r"rows hold lists of different lengths \(1\.\.2\)"):
        TableReader(p).read()


FASHION = "/usr/share/datasets/fashion-mnist"


@pytest.mark.skipif(not (__import__("pathlib").Path(FASHION) / "train-labels-idx1-ubyte.gz").exists(),
                    reason="Fashion-MNIST is not installed (make provision installs dataset-fashion-mnist)")
def test_fashion_mnist_through_the_idx_format_with_a_dirichlet_partition():
    from edgebed.data.partitions import make_partition
    spec = formats.LoadSpec("idx", FASHION)
    ds = formats.load(spec)
    assert ds.x.shape == (60_000, 1, 28, 28) and ds.num_classes == 10
    assert np.bincount(ds.y).tolist() == [6000] * 10
    shards, summary = make_partition("dirichlet", ds.y, 10, 0, 10, alpha=0.5)
    assert sum(summary.samples) == 60_000
    assert len(formats.load(formats.LoadSpec("idx", FASHION, split="test"))) == 10_000


def test_pickles_naming_numpy_core_as_the_real_cifar_files_do_still_load(tmp_path):
    """Krizhevsky's files were pickled by numpy 1.x, whose arrays name numpy.core.multiarray."""
    raw = pickle.dumps({b"data": np.arange(6, dtype=np.uint8).reshape(2, 3), b"labels": [1, 2]}, protocol=2)
    assert b"numpy._core.multiarray" in raw
    p = tmp_path / "old"
    p.write_bytes(raw.replace(b"numpy._core.multiarray", b"numpy.core.multiarray"))
    got = safe_pickle.load(p)
    assert got[b"labels"] == [1, 2] and got[b"data"].tolist() == [[0, 1, 2], [3, 4, 5]]
