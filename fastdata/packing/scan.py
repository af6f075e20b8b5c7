"""ImageFolder discovery with torchvision's exact semantics.

Classes are the sorted names of the root's immediate subfolders, a sample's label is its
class's index in that order, and images are found recursively inside each class folder,
in the order of ``sorted(os.walk(...))`` then sorted file names, by case-insensitive extension.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

IMG_EXTENSIONS: tuple[str, ...] = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


@dataclass(frozen=True)
class ImageFolderScan:
    """The result of scanning an image folder.

    Attributes:
        root: the scanned folder.
        classes: sorted class names.
        paths: image paths relative to ``root`` (POSIX separators), in ImageFolder order.
        labels: the label of each path, parallel to ``paths``.
    """

    root: Path
    classes: list[str]
    paths: list[str]
    labels: list[int]

    @property
    def class_to_idx(self) -> dict[str, int]:
        """Class name → label."""
        return {name: i for i, name in enumerate(self.classes)}


def find_classes(root: str | os.PathLike) -> list[str]:
    """Sorted names of the immediate subfolders of ``root``.

    Raises:
        FileNotFoundError: ``root`` does not exist or has no class folder.
        NotADirectoryError: ``root`` is a file.
    """
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"image folder {str(root)!r} does not exist: pass the folder that holds one subfolder per class")
    if not root.is_dir():
        raise NotADirectoryError(f"{str(root)!r} is a file, not an image folder: pass the folder that holds one subfolder per class")
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    if not classes:
        raise FileNotFoundError(
            f"no class folders in {str(root)!r}: expected ImageFolder layout, one subfolder per class "
            f"(e.g. {root}/cat/001.jpg, {root}/dog/002.jpg)"
        )
    return classes


def is_image_file(name: str) -> bool:
    """True when ``name`` has one of :data:`IMG_EXTENSIONS` (case-insensitive)."""
    return name.lower().endswith(IMG_EXTENSIONS)


def scan_image_folder(root: str | os.PathLike) -> ImageFolderScan:
    """Scan ``root`` the way ``torchvision.datasets.ImageFolder`` does.

    Args:
        root: folder with one subfolder per class.

    Returns:
        The classes and the (path, label) list in ImageFolder order.

    Raises:
        FileNotFoundError: missing root, no class folder, or no image in any class folder.
    """
    root = Path(root)
    classes = find_classes(root)
    paths: list[str] = []
    labels: list[int] = []
    for label, name in enumerate(classes):
        class_dir = root / name
        for dirpath, _, filenames in sorted(os.walk(class_dir, followlinks=True)):
            for filename in sorted(filenames):
                if is_image_file(filename):
                    paths.append(Path(dirpath, filename).relative_to(root).as_posix())
                    labels.append(label)
    if not paths:
        raise FileNotFoundError(
            f"no images in the class folders of {str(root)!r}: supported extensions are {', '.join(IMG_EXTENSIONS)}"
        )
    return ImageFolderScan(root=root, classes=classes, paths=paths, labels=labels)
