"""Exceptions keep their type across DataLoader workers: ``except CorruptRecordError`` works with workers."""

from __future__ import annotations

import importlib
import pickle
import pkgutil
import shutil
import threading
import traceback

import pytest
import torch
from torch._utils import ExceptionWrapper

import fastdata
from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.decode import DecodeError
from fastdata.formats.base import CorruptRecordError, DatasetChangedError
from fastdata.formats.manifest import Manifest
from fastdata.loader.collate import fast_collate
from fastdata.loader.dataloader import DataLoaderX
from fastdata.transforms import RandomResizedCrop
from tests.packs import flip_bit


def fastdata_exceptions() -> list[type[BaseException]]:
    """Every exception class defined anywhere in the fastdata package (new ones are picked up too)."""
    found = {}
    for module in pkgutil.walk_packages(fastdata.__path__, "fastdata."):
        try:
            mod = importlib.import_module(module.name)
        except ImportError:  # an optional dependency (DALI, a plotting library) is absent
            continue
        for value in vars(mod).values():
            if isinstance(value, type) and issubclass(value, BaseException) and value.__module__.startswith("fastdata"):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return [found[name] for name in sorted(found)]


def test_the_known_exceptions_are_found():
    names = {cls.__name__ for cls in fastdata_exceptions()}
    assert {"CorruptRecordError", "DatasetChangedError", "DecodeError", "BadImageError"} <= names


@pytest.mark.parametrize("cls", fastdata_exceptions(), ids=lambda cls: cls.__name__)
def test_every_fastdata_exception_is_rebuilt_from_its_message_as_torch_does(cls):
    try:
        raise cls("damaged file /data/shard-00003.lmdb: something is wrong")
    except cls:
        wrapper = ExceptionWrapper(where="in DataLoader worker process 1")  # what a worker sends back
    with pytest.raises(cls, match="something is wrong"):
        wrapper.reraise()
    exc = pickle.loads(pickle.dumps(cls("one message")))
    assert type(exc) is cls and "one message" in str(exc)


def test_corrupt_record_error_keeps_its_attributes_where_it_can():
    exc = CorruptRecordError("/data/shard-00003.lmdb", 7, "image bytes CRC32C mismatch", hint="sample 42")
    clone = pickle.loads(pickle.dumps(exc))
    assert (clone.shard, clone.offset, clone.reason, clone.hint, str(clone)) == (
        exc.shard,
        7,
        exc.reason,
        "sample 42",
        str(exc),
    )
    try:
        raise exc
    except CorruptRecordError:
        wrapper = ExceptionWrapper(where="in DataLoader worker process 0")
    with pytest.raises(CorruptRecordError) as info:
        wrapper.reraise()
    assert info.value.shard == "/data/shard-00003.lmdb" and info.value.offset == 7  # read back from the message


@pytest.fixture
def flipped(packed, tmp_path):
    """A copy of a packed dataset with one bit flipped inside sample 7's image bytes."""
    root = tmp_path / "ds"
    shutil.copytree(packed[0], root)
    ds = ShardDataset(root)
    image = ds.read(7)[0]
    shard = root / Manifest.load(root).shards[1].path
    at = shard.read_bytes().find(image)
    assert at > 0
    flip_bit(shard, (at + len(image) // 2) * 8 + 3)
    return root


def test_corrupt_record_error_reaches_the_loop_as_itself_from_two_workers(flipped):
    loader = DataLoaderX(
        ShardDataset(flipped, transform=RandomResizedCrop(16)),
        batch_size=4,
        num_workers=2,
        collate_fn=fast_collate,
        pin_memory=False,
    )
    with pytest.raises(CorruptRecordError, match="sample 7") as info:
        for _ in loader:
            pass
    assert "fastdata verify" in str(info.value) and info.value.shard.endswith(
        "shard-00001." + Manifest.load(flipped).format
    )
    try:  # and as the ValueError it is
        for _ in loader:
            pass
    except ValueError as exc:
        assert isinstance(exc, CorruptRecordError)
    else:
        pytest.fail("no error")


def test_decode_and_dataset_changed_errors_reach_the_loop_as_themselves(tmp_path):
    from tests.packing.test_check import make_dataset

    make_dataset(tmp_path, "lmdb")  # record 1 passes its CRC but is not an image
    loader = DataLoaderX(ShardDataset(tmp_path), batch_size=1, num_workers=2, pin_memory=False)
    with pytest.raises(DecodeError):
        for _ in loader:
            pass
    (tmp_path / "manifest.json").write_bytes((tmp_path / "manifest.json").read_bytes())  # rewritten: a new mtime
    loader = DataLoaderX(loader.dataset, batch_size=1, num_workers=2, pin_memory=False)
    with pytest.raises(DatasetChangedError, match="re-packed"):
        for _ in loader:
            pass


class TwoArgumentError(Exception):
    def __init__(self, path, line):
        super().__init__(f"{path}:{line}: bad label")
        self.path, self.line = path, line


class KeywordOnlyError(ValueError):
    def __init__(self, message, *, code):
        super().__init__(message)
        self.code = code


class UnpicklableError(Exception):
    """Two arguments and an attribute that cannot be pickled: rebuilt from its message in the main process."""

    def __init__(self, path, line):
        super().__init__(f"{path}:{line}: bad label")
        self.lock = threading.Lock()


class UnbuildableError(Exception):
    def __init__(self, path, line):
        super().__init__(path, line)
        self.path, self.line, self.lock = path, line, threading.Lock()

    def __str__(self):
        return f"{self.path}:{self.line}"  # needs the attributes only __init__ sets


class _Raising(torch.utils.data.Dataset):
    def __init__(self, make):
        self.make = make

    def __len__(self):
        return 8

    def __getitem__(self, index):
        if index == 5:
            raise self.make()
        return torch.tensor([index])


def _two():
    return TwoArgumentError("labels.csv", 5)


def _keyword():
    return KeywordOnlyError("label 5 out of range", code=5)


def _unpicklable():
    return UnpicklableError("labels.csv", 5)


def _unbuildable():
    return UnbuildableError("labels.csv", 5)


def _raised(make, workers=2):
    loader = DataLoaderX(
        _Raising(make), batch_size=2, num_workers=workers, pin_memory=False, persistent_workers=workers > 0
    )
    caught = []
    for _ in range(2):  # the second pass reuses the persistent workers
        try:
            for _ in loader:
                pass
        except Exception as exc:  # noqa: BLE001 - what the training loop would see
            caught.append(exc)
    assert len(caught) == 2
    return caught


@pytest.mark.parametrize(
    "make, cls, attrs",
    [(_two, TwoArgumentError, {"path": "labels.csv", "line": 5}), (_keyword, KeywordOnlyError, {"code": 5})],
    ids=["two-arguments", "keyword-only"],
)
def test_user_exceptions_with_other_init_signatures_arrive_as_themselves_from_two_workers(make, cls, attrs):
    for exc in _raised(make):
        assert type(exc) is cls and str(exc) == str(make())
        assert {k: getattr(exc, k) for k in attrs} == attrs  # the very object, pickled in the worker
        text = "".join(traceback.format_exception(exc))
        assert "in DataLoader worker process" in text and "__getitem__" in text  # the worker's traceback


def test_an_unpicklable_exception_is_rebuilt_as_its_type_from_its_message():
    for exc in _raised(_unpicklable):
        assert type(exc) is UnpicklableError and "labels.csv:5: bad label" in str(exc)
        assert "worker process" in str(exc)


def test_an_exception_that_cannot_be_rebuilt_names_its_type():
    for exc in _raised(_unbuildable):
        assert type(exc) is RuntimeError and f"{__name__}.UnbuildableError" in str(exc).splitlines()[0]


@pytest.mark.parametrize("version", [(3, 10, 14), (3, 11, 0)])
def test_add_note_keeps_notes_on_every_supported_python(monkeypatch: pytest.MonkeyPatch, version: tuple) -> None:
    """Python 3.10 has no BaseException.add_note: the note goes to __notes__ (where 3.11+ keeps it)."""
    import types

    from fastdata.loader import worker_errors

    fake_sys = types.SimpleNamespace(version_info=version)
    monkeypatch.setattr(worker_errors, "sys", fake_sys)

    class NoAddNote(OSError):  # as on Python 3.10: calling add_note fails
        def add_note(self, note: str) -> None:
            raise AttributeError("add_note")

    error = NoAddNote(5, "disk gone") if version < (3, 11) else OSError(5, "disk gone")
    worker_errors.add_note(error, "first")
    worker_errors.add_note(error, "second")
    assert error.__notes__ == ["first", "second"]
    assert error.errno == 5 and str(error) == "[Errno 5] disk gone"
