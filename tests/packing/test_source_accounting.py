"""Everything in SRC is accounted for: what cannot be packed is listed as skipped with the reason; --strict fails."""

import errno
import json
import os
import shutil
from pathlib import Path

import pytest

from fastdata.cli import main
from fastdata.formats.manifest import Manifest
from fastdata.packing.packer import BadImageError, pack
from fastdata.packing.scan import scan_image_folder
from tests.images import make_image_folder


@pytest.fixture
def src(tmp_path):
    """A clean image folder (13 images in ant/bee/cat) of this test's own, to be damaged."""
    return make_image_folder(tmp_path / "src", with_bad=False)


def pack_and_strict(root, tmp_path):
    """Pack ``root`` (returns the manifest) and check that --strict refuses it and writes nothing."""
    manifest = pack(root, tmp_path / "out", format="lmdb", workers=0, progress=False)
    with pytest.raises(BadImageError, match="pack without --strict"):
        pack(root, tmp_path / "strict", format="lmdb", strict=True, workers=0, progress=False)
    assert not (tmp_path / "strict" / "manifest.json").exists()
    return manifest


def deny(monkeypatch, function_owner, name, target):
    """Make ``function_owner.name(path)`` raise PermissionError for ``target`` (chmod does not stop root)."""
    real = getattr(function_owner, name)

    def denied(path, *args, **kwargs):
        if os.fspath(path) == os.fspath(target):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(function_owner, name, denied)


def test_unreadable_folder_is_listed_as_skipped(src, tmp_path, monkeypatch):
    deny(monkeypatch, os, "scandir", src.root / "ant" / "nested")
    scan = scan_image_folder(src.root)
    assert [(s.path, s.reason) for s in scan.skipped] == [("ant/nested/", "unreadable folder (Permission denied)")]
    assert "ant/nested/deeper/c_444.jpeg" not in scan.paths and len(scan.paths) == len(src.good) - 1
    manifest = pack_and_strict(src.root, tmp_path)
    assert [(s.path, s.reason) for s in manifest.skipped] == [("ant/nested/", "unreadable folder (Permission denied)")]
    assert manifest.num_samples == len(src.good) - 1


def _as_nobody_if_root(work):
    """Run ``work()`` in a forked child, as user ``nobody`` when this is root (root reads any folder); its result."""
    import pickle

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            result = work()
        except BaseException as error:  # noqa: BLE001 - handed to the parent
            result = error
        with os.fdopen(write, "wb") as out:
            pickle.dump(result, out)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as got:
        result = pickle.load(got)
    assert os.waitpid(pid, 0)[1] == 0
    if isinstance(result, BaseException):
        raise result
    return result


def test_unreadable_folder_really_chmodded(tmp_path):
    """A real chmod 0 (not a simulated error); as root, the pack runs as ``nobody`` so the mode is obeyed."""
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="fastdata-chmod-"))  # outside root's private pytest folder
    try:
        work.chmod(0o777)
        info = make_image_folder(work / "src", with_bad=False)
        for folder, _, _ in os.walk(info.root):
            os.chmod(folder, 0o755)
        pack(info.root, work / "warm", format="lmdb", workers=0, progress=False)  # imports what nobody cannot read
        (info.root / "bee").chmod(0)
        manifest = _as_nobody_if_root(lambda: pack(info.root, work / "out", format="lmdb", workers=0, progress=False))
    finally:
        if (work / "src" / "bee").exists():
            (work / "src" / "bee").chmod(0o755)
        shutil.rmtree(work)
    assert ("bee/", "unreadable folder (Permission denied)") in [(s.path, s.reason) for s in manifest.skipped]
    assert manifest.num_samples == len([p for p, _ in info.good if not p.startswith("bee/")])


def test_unreadable_file_is_listed_as_skipped(src, tmp_path, monkeypatch):
    deny(monkeypatch, os, "open", src.root / "cat" / "c.bmp")  # the packer reads with os.open() (workers=0)
    manifest = pack_and_strict(src.root, tmp_path)
    assert [(s.path, s.reason) for s in manifest.skipped] == [("cat/c.bmp", "unreadable (Permission denied)")]
    assert manifest.num_samples == len(src.good) - 1


def test_non_utf8_names_are_listed_as_skipped_and_labels_kept(src, tmp_path, capsys):
    root = os.fsencode(src.root)
    shutil.copy(src.root / "bee" / "a_rgb.png", os.path.join(root, b"bee", b"caf\xe9.png"))
    os.mkdir(os.path.join(root, b"b\xffd"))  # a class folder whose name is not UTF-8: its label must stay
    shutil.copy(src.root / "cat" / "c.bmp", os.path.join(root, b"b\xffd", b"x.bmp"))
    manifest = pack_and_strict(src.root, tmp_path)
    reason = "file name is not valid UTF-8 (rename it, e.g. with convmv, to pack it)"
    assert [(s.path, s.reason) for s in manifest.skipped] == [("b\\xffd/x.bmp", reason), ("bee/caf\\xe9.png", reason)]
    assert manifest.classes == ["ant", "bee", "b\\xffd", "cat"]  # torchvision's classes, in its order (by str)
    assert manifest.num_samples == len(src.good)
    json.loads((tmp_path / "out" / "manifest.json").read_bytes().decode("utf-8"))  # valid UTF-8 JSON
    assert main(["inspect", str(tmp_path / "out")]) == 0
    assert "bee/caf\\xe9.png: file name is not valid UTF-8" in capsys.readouterr().out


def test_symlink_loop_is_listed_as_skipped_not_followed(src, tmp_path):
    (src.root / "ant" / "nested" / "again").symlink_to(src.root / "ant")  # leads back to its class folder
    (src.root / "bee" / "up").symlink_to("..")  # leads back to the image folder itself
    (src.root / "cat" / "elsewhere").symlink_to(src.root / "ant" / "nested" / "deeper")  # no loop: followed
    manifest = pack_and_strict(src.root, tmp_path)
    assert [(s.path, s.reason) for s in manifest.skipped] == [
        ("ant/nested/again/", "symlink loop: leads back to ant"),
        ("bee/up/", "symlink loop: leads back to the image folder itself"),
    ]
    scan = scan_image_folder(src.root)
    assert len(scan.paths) == len(set(scan.paths)) == len(src.good) + 1  # no image listed twice
    assert "cat/elsewhere/c_444.jpeg" in scan.paths  # as torchvision's os.walk(followlinks=True) lists it
    assert Manifest.load(tmp_path / "out").num_samples == len(src.good) + 1


def test_cli_lists_skipped_folders_and_strict_exits_2(src, tmp_path, capsys):
    (src.root / "cat" / "loop").symlink_to(src.root / "cat")
    assert main(["pack", str(src.root), str(tmp_path / "out"), "--format", "tfrecord", "--no-progress"]) == 0
    assert "cat/loop/: symlink loop: leads back to cat" in capsys.readouterr().out
    code = main(["pack", str(src.root), str(tmp_path / "strict"), "--format", "tfrecord", "--strict", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "cat/loop/: symlink loop" in err and err.count("\n") == 1
