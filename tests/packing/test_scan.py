from pathlib import Path

import pytest

from fastdata.packing.scan import IMG_EXTENSIONS, find_classes, is_image_file, scan_image_folder


def test_scan_matches_torchvision_imagefolder_order(image_folder):
    scan = scan_image_folder(image_folder.root)
    assert scan.classes == image_folder.classes
    assert scan.class_to_idx == {"ant": 0, "bee": 1, "cat": 2}
    expected = [rel for rel, _ in image_folder.good] + image_folder.bad
    # files in a class folder come before its subfolders' files (sorted os.walk), bad files are still listed
    assert sorted(scan.paths) == sorted(expected)
    assert scan.paths.index("ant/zz_top.jpg") < scan.paths.index("ant/nested/deeper/c_444.jpeg")
    assert [p for p in scan.paths if p.startswith("ant/")] == [
        "ant/a_baseline.jpg",
        "ant/b_progressive.JPG",
        "ant/d_gray.jpg",
        "ant/zz_top.jpg",
        "ant/nested/deeper/c_444.jpeg",
    ]
    assert scan.labels == [scan.class_to_idx[p.split("/")[0]] for p in scan.paths]
    assert "ant/README.txt" not in scan.paths and "stray_file_at_top.jpg" not in scan.paths


def test_extensions_case_insensitive():
    assert set(IMG_EXTENSIONS) == {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"}
    assert (
        is_image_file("A.JPEG") and is_image_file("b.TiF") and not is_image_file("c.gif") and not is_image_file("jpg")
    )


def test_missing_root(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        find_classes(tmp_path / "nope")


def test_root_without_class_folders(tmp_path):
    (tmp_path / "x.jpg").write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match="no class folders"):
        scan_image_folder(tmp_path)


def test_class_folders_without_images(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "notes.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match="no images"):
        scan_image_folder(tmp_path)


def test_root_is_a_file(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(NotADirectoryError):
        scan_image_folder(Path(f))
