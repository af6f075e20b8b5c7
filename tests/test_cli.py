"""The command line: pack, inspect, verify, and one-line errors for bad input."""

import pytest

from fastdata.cli import main, parse_size
from fastdata.formats.manifest import Manifest


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_pack_inspect_verify(capsys, image_folder, tmp_path):
    for fmt in ("tfrecord", "lmdb"):
        out = tmp_path / fmt
        code, text, err = run(
            capsys,
            "pack",
            str(image_folder.root),
            str(out),
            "--format",
            fmt,
            "--samples-per-shard",
            "4",
            "--no-progress",
        )
        assert code == 0, err
        assert f"packed {len(image_folder.good)} images of 3 classes into 4 {fmt} shard(s)" in text
        assert "skipped 3 bad file(s)" in text and "bee/z_truncated.jpg" in text
        code, text, _ = run(capsys, "inspect", str(out))
        assert code == 0 and f"samples   {len(image_folder.good)}" in text and "skipped   3" in text
        assert "shard-00003" in text and " cat " in text
        code, text, _ = run(capsys, "verify", str(out))
        assert code == 0 and f"OK: {len(image_folder.good)} records" in text


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_verify_catches_a_flipped_byte(capsys, image_folder, tmp_path, fmt):
    out = tmp_path / fmt
    assert (
        run(
            capsys,
            "pack",
            str(image_folder.root),
            str(out),
            "--format",
            fmt,
            "--samples-per-shard",
            "4",
            "--no-progress",
        )[0]
        == 0
    )
    shard = Manifest.load(out).shards[1]
    path = out / shard.path
    data = bytearray(path.read_bytes())
    image = (image_folder.root / image_folder.good[5][0]).read_bytes()  # sample 5 = record 1 of shard 1
    at = bytes(data).find(image) + len(image) // 2
    assert at > len(image) // 2
    data[at] ^= 0x10
    path.write_bytes(bytes(data))
    code, text, err = run(capsys, "verify", str(out))
    assert code == 1
    assert f"DAMAGED {shard.path}" in text and "record 1" in text
    assert "problem" in err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["pack", "{missing}", "{out}", "--format", "lmdb"], "does not exist"),
        (["pack", "{empty}", "{out}", "--format", "lmdb"], "no class folders"),
        (["pack", "{src}", "{file}", "--format", "lmdb"], "is a file"),
        (
            ["pack", "{file}", "{out}", "--format", "lmdb"],
            "pass a .csv, .jsonl or .parquet file list, a WebDataset .tar",
        ),
        (["pack", "{src}", "{out}", "--format", "lmdb", "--shuffle-seed", "-1"], "shuffle_seed must be a non-negative"),
        (["inspect", "{empty}"], "not a finished fastdata pack"),
        (["verify", "{empty}"], "not a finished fastdata pack"),
    ],
)
def test_bad_input_is_one_line_error(capsys, image_folder, tmp_path, argv, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    names = {
        "missing": tmp_path / "nope",
        "empty": tmp_path / "empty",
        "out": tmp_path / "out",
        "src": image_folder.root,
        "file": tmp_path / "file",
    }
    code, out, err = run(capsys, *[a.format(**names) for a in argv])
    assert code == 2
    assert message in err and err.startswith("fastdata: error:") and err.count("\n") == 1
    assert "Traceback" not in err


def test_existing_dataset_refused(capsys, image_folder, tmp_path):
    args = ["pack", str(image_folder.root), str(tmp_path), "--format", "lmdb", "--no-progress"]
    assert run(capsys, *args)[0] == 0
    code, _, err = run(capsys, *args)
    assert code == 2 and "already holds a dataset" in err and "--overwrite" in err and "--append" in err
    assert run(capsys, *args, "--overwrite")[0] == 0


def test_unknown_format_is_a_usage_error(capsys, image_folder, tmp_path):
    with pytest.raises(SystemExit) as info:
        main(["pack", str(image_folder.root), str(tmp_path), "--format", "zip"])
    assert info.value.code == 2
    assert "invalid choice: 'zip'" in capsys.readouterr().err


def test_parse_size():
    assert parse_size("256MB") == 256_000_000 and parse_size("1GiB") == 2**30 and parse_size("4096") == 4096
    with pytest.raises(Exception, match="invalid size"):
        parse_size("lots")


def test_inspect_and_verify_of_a_missing_folder_name_it(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for command in ("inspect", "verify"):
        code, _, err = run(capsys, command, "nope")
        assert code == 2 and err == "fastdata: error: 'nope' does not exist: pass a folder written by `fastdata pack`\n"


def test_names_are_printed_escaped(capsys, caplog, tmp_path):
    """Class and file names with an escape sequence or a newline reach the terminal escaped, one line each."""
    import numpy as np

    from tests.images import encode, natural_image

    src = tmp_path / "src"
    rng = np.random.default_rng(0)
    red, broken = "\x1b[31mred", "new\nline"
    for name in (red, broken):
        (src / name).mkdir(parents=True)
        for i in range(2):
            (src / name / f"im{i}.jpg").write_bytes(encode(natural_image(rng, 8, 8), "JPEG"))
    (src / broken / "bad\x1b[2J\nfile.jpg").write_bytes(b"not a jpeg")
    out = tmp_path / "out"
    caplog.set_level("INFO")
    code, text, err = run(capsys, "--verbose", "pack", str(src), str(out), "--format", "lmdb", "--no-progress")
    assert code == 0, err
    code, shown, _ = run(capsys, "inspect", str(out))
    assert code == 0
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for output in (text, shown, logged):
        assert "\x1b" not in output
        assert "bad\\x1b[2J\\nfile.jpg" in output
    assert "\x1b" not in err
    lines = shown.splitlines()
    assert any(line.split()[1:] == ["\\x1b[31mred", "2"] for line in lines if line.startswith("      0"))
    assert any(line.split()[1:] == ["new\\nline", "2"] for line in lines if line.startswith("      1"))
    assert not any(line.strip() == "line" or line.startswith("line") for line in lines)


def test_a_refused_shuffle_seed_leaves_nothing_behind(capsys, image_folder, tmp_path):
    out = tmp_path / "out"
    args = ["pack", str(image_folder.root), str(out), "--format", "lmdb", "--no-progress"]
    assert run(capsys, *args, "--shuffle-seed", "-1")[0] == 2
    assert not out.exists() or not any(out.iterdir())
    code, _, err = run(capsys, *args, "--shuffle-seed", "1")  # the corrected command is not refused
    assert code == 0, err


@pytest.mark.parametrize("argv", [["inspect", "{out}"], ["verify", "{out}"], ["--help"], ["pack", "--help"]])
def test_output_into_a_closed_pipe_ends_quietly(capsys, image_folder, tmp_path, argv):
    """`fastdata inspect DATA | head`: the reader goes away; no "Broken pipe", no traceback, coreutils' status."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import fastdata

    out = tmp_path / "out"
    assert run(capsys, "pack", str(image_folder.root), str(out), "--format", "tfrecord", "--no-progress")[0] == 0
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line is written
    env = dict(os.environ, PYTHONPATH=str(Path(fastdata.__file__).resolve().parents[1]))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "fastdata.cli", *[a.format(out=out) for a in argv]],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)
    assert done.stderr == "" and done.returncode == 141


def test_top_level_help_names_what_pack_and_bench_take(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "CSV/JSONL/Parquet list" in text and "WebDataset tars" in text
    assert "--peers" in text


def test_verify_names_a_shard_that_is_a_folder(capsys, image_folder, tmp_path):
    out = tmp_path / "out"
    assert run(capsys, "pack", str(image_folder.root), str(out), "--format", "lmdb", "--no-progress")[0] == 0
    shard = Manifest.load(out).shards[0].path
    (out / shard).unlink()
    (out / shard).mkdir()
    code, text, _ = run(capsys, "verify", str(out))
    assert code == 1 and f"DAMAGED {shard}: is not a regular file" in text and "missing" not in text


def test_a_missing_index_file_is_named(capsys, image_folder, tmp_path):
    from fastdata import ShardDataset

    out = tmp_path / "out"
    assert run(capsys, "pack", str(image_folder.root), str(out), "--format", "tfrecord", "--no-progress")[0] == 0
    index = Manifest.load(out).shards[0].index
    (out / index).unlink()
    ds = ShardDataset(out)  # the open reads no index: the first read of its shard names it
    with pytest.raises(FileNotFoundError, match=f"{index}.*missing.*fastdata verify"):
        ds.read(0)


def test_version_prints_the_package_version(capsys):
    from fastdata import __version__

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"fastdata {__version__}"


def test_the_installed_metadata_and_the_package_agree_on_the_version():
    """pyproject.toml reads the version from fastdata/_util/version.py; the installed distribution must say the same."""
    from importlib.metadata import version

    from fastdata import __version__

    assert version("fastdata") == __version__, "the installed fastdata is stale: run bash tools/setup.sh again"
