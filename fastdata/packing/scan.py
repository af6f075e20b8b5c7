r"""ImageFolder discovery with torchvision's semantics, and an account of everything left out.

Classes are the sorted names of the root's immediate subfolders, a sample's label is its
class's index in that order, and images are found recursively inside each class folder
(symlinks followed), in the order of ``sorted(os.walk(...))`` then sorted file names, by
case-insensitive extension.

Where torchvision would fail, loop or drop files without a word, the scan lists them in
:attr:`ImageFolderScan.skipped` with the reason instead:

- a folder that cannot be listed (``unreadable folder (Permission denied)``);
- a symlink that leads back to a folder it is inside (``symlink loop``), which ``os.walk``
  would follow until the path is too long, listing the same images dozens of times;
- an image whose path is not valid UTF-8 (it could not be stored in a record or the
  manifest). Such names are shown with the undecodable bytes as ``\xNN`` escapes
  (:func:`printable_name`); the same escapes stand in for a class folder's name in
  :attr:`ImageFolderScan.classes`, so labels stay torchvision's.

Files that are listed but cannot be read are reported by the packer when it reads them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from fastdata.formats.manifest_entries import SkippedFile

IMG_EXTENSIONS: tuple[str, ...] = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
NOT_UTF8 = "file name is not valid UTF-8 (rename it, e.g. with convmv, to pack it)"


@dataclass(frozen=True)
class ImageFolderScan:
    r"""The result of scanning an image folder.

    Attributes:
        root: the scanned folder.
        classes: sorted class names (undecodable bytes as ``\xNN`` escapes).
        paths: image paths relative to ``root`` (POSIX separators), in ImageFolder order.
        labels: the label of each path, parallel to ``paths``.
        skipped: folders and files left out before reading (unreadable folders, symlink
            loops, names that are not UTF-8), sorted by path; folders end with ``/``.
    """

    root: Path
    classes: list[str]
    paths: list[str]
    labels: list[int]
    skipped: list[SkippedFile] = field(default_factory=list)

    @property
    def class_to_idx(self) -> dict[str, int]:
        """Class name → label."""
        return {name: i for i, name in enumerate(self.classes)}


def find_classes(root: str | os.PathLike) -> list[str]:
    """Sorted names of the immediate subfolders of ``root`` (as the file system spells them).

    Raises:
        FileNotFoundError: ``root`` does not exist or has no class folder.
        NotADirectoryError: ``root`` is a file.
        PermissionError: ``root`` cannot be listed.
    """
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(
            f"image folder {str(root)!r} does not exist: pass the folder that holds one subfolder per class"
        )
    if not root.is_dir():
        raise NotADirectoryError(
            f"{str(root)!r} is a file, not an image folder: pass the folder that holds one subfolder per class"
        )
    try:
        with os.scandir(root) as entries:
            classes = sorted(entry.name for entry in entries if _is_dir(entry))
    except PermissionError as exc:
        raise PermissionError(f"cannot list image folder {str(root)!r} ({exc.strerror}): fix its permissions") from None
    if not classes:
        raise FileNotFoundError(
            f"no class folders in {str(root)!r}: expected ImageFolder layout, one subfolder per class "
            f"(e.g. {root}/cat/001.jpg, {root}/dog/002.jpg)"
        )
    return classes


def is_image_file(name: str) -> bool:
    """True when ``name`` has one of :data:`IMG_EXTENSIONS` (case-insensitive)."""
    return name.lower().endswith(IMG_EXTENSIONS)


def printable_name(name: str) -> str:
    r"""``name`` as valid UTF-8 text: bytes that are not UTF-8 become ``\xNN`` escapes.

    File names come from the file system as ``str`` with undecodable bytes held as lone
    surrogates (``os.fsdecode``); those cannot be written as UTF-8. Valid names are returned
    unchanged.
    """
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")
    return name


def scan_image_folder(root: str | os.PathLike) -> ImageFolderScan:
    """Scan ``root`` the way ``torchvision.datasets.ImageFolder`` does, accounting for what is left out.

    Args:
        root: folder with one subfolder per class.

    Returns:
        The classes, the (path, label) list in ImageFolder order, and the skipped folders and files.

    Raises:
        FileNotFoundError: missing root, no class folder, or no image in any class folder.
        PermissionError: ``root`` itself cannot be listed.
    """
    root = Path(root)
    classes = find_classes(root)
    paths: list[str] = []
    labels: list[int] = []
    skipped: list[SkippedFile] = []
    for label, name in enumerate(classes):
        for dirpath, filenames in sorted(_walk(root, root / name, skipped)):
            for filename in sorted(filenames):
                if not is_image_file(filename):
                    continue
                rel = Path(dirpath, filename).relative_to(root).as_posix()
                if printable_name(rel) != rel:
                    skipped.append(SkippedFile(printable_name(rel), NOT_UTF8))
                    continue
                paths.append(rel)
                labels.append(label)
    if not paths:
        raise FileNotFoundError(
            f"no images in the class folders of {str(root)!r}: supported extensions are {', '.join(IMG_EXTENSIONS)}"
            + (f" ({len(skipped)} skipped, e.g. {skipped[0].path}: {skipped[0].reason})" if skipped else "")
        )
    skipped.sort(key=lambda s: s.path)
    return ImageFolderScan(root, [printable_name(c) for c in classes], paths, labels, skipped)


def _walk(root: Path, top: Path, skipped: list[SkippedFile]) -> list[tuple[str, list[str]]]:
    """``(dirpath, filenames)`` of ``top`` and every folder below it, like ``os.walk(top, followlinks=True)``.

    Unlike ``os.walk``, a folder that cannot be listed and a symlink back into one of its own
    parent folders (or the root) are recorded in ``skipped`` instead of being ignored or followed.
    """
    found: list[tuple[str, list[str]]] = []
    stack = [(str(top), _ancestors(root, skipped))]
    while stack:
        folder, ancestors = stack.pop()
        key = _identity(folder, root, skipped)
        if key is None:
            continue
        if key in ancestors:
            loop = _relative(ancestors[key], root) or "the image folder itself"
            skipped.append(SkippedFile(_relative(folder, root) + "/", f"symlink loop: leads back to {loop}"))
            continue
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError as exc:
            skipped.append(SkippedFile(_relative(folder, root) + "/", f"unreadable folder ({exc.strerror or exc})"))
            continue
        inner = {**ancestors, key: folder}
        found.append((folder, [e.name for e in entries if not _is_dir(e)]))
        stack += [(os.path.join(folder, e.name), inner) for e in entries if _is_dir(e)]
    return found


def _ancestors(root: Path, skipped: list[SkippedFile]) -> dict[tuple[int, int], str]:
    key = _identity(str(root), root, skipped)
    return {} if key is None else {key: str(root)}


def _identity(folder: str, root: Path, skipped: list[SkippedFile]) -> tuple[int, int] | None:
    """(device, inode) of ``folder`` after symlinks, or None (recorded as skipped) when it cannot be examined."""
    try:
        st = os.stat(folder)
    except OSError as exc:
        skipped.append(SkippedFile(_relative(folder, root) + "/", f"unreadable folder ({exc.strerror or exc})"))
        return None
    return st.st_dev, st.st_ino


def _relative(path: str, root: Path) -> str:
    rel = Path(path).relative_to(root).as_posix()
    return "" if rel == "." else printable_name(rel)


def _is_dir(entry: os.DirEntry) -> bool:
    """``entry.is_dir()`` (symlinks followed), False where the entry cannot be examined, as ``os.walk`` does."""
    try:
        return entry.is_dir()
    except OSError:
        return False
