"""The peers' part of ``fastdata bench --peers``: convert once (timed, bytes on disk), build loaders, the table.

The benchmark's runner measures the peers like its own pipelines (round-robin, a fresh process per run, the
same batch check); this module only knows how to get each peer ready and how to report it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastdata.bench.measure import run_isolated
from fastdata.bench.peers import PEERS, load_peer, unavailable
from fastdata.formats.manifest import Manifest

logger = logging.getLogger(__name__)

__all__ = [
    "BASELINE",
    "build",
    "check_names",
    "description",
    "format_peer_table",
    "inputs",
    "pack_stats",
    "prepare_peers",
]

#: The fastdata pipeline the peers are compared with (all of them yield uint8 batches).
BASELINE = "fastdata-uint8"
_STAMP = "stats.json"
_ORDER_SEED = 0  # every writer gets the images in the same shuffled order, as fastdata's packs


def check_names(peers: Sequence[str]) -> list[str]:
    """``peers`` as a list of distinct known peer names.

    Raises:
        ValueError: an unknown or repeated name.
    """
    names = list(peers)
    unknown = [n for n in names if n not in PEERS]
    if unknown or len(set(names)) != len(names):
        raise ValueError(f"peers must be distinct names from {list(PEERS)}, got {names!r}")
    return names


def _disk_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _convert(name: str, images: list[str], labels: list[int], out_dir: str) -> dict[str, Any]:
    """Run peer ``name``'s writer into an empty ``out_dir``; returns its notes and the seconds it took."""
    out = Path(out_dir)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    start = time.perf_counter()
    stats = dict(load_peer(name).convert(images, labels, out) or {})
    stats["convert_s"] = time.perf_counter() - start
    stats["bytes"] = int(stats.get("bytes", 0)) + _disk_bytes(out)
    return stats


def prepare_peers(
    images: Sequence[str],
    labels: Sequence[int],
    cache: Path,
    peers: Sequence[str],
    *,
    fingerprint: str,
    isolate: bool = True,
    say: Callable[[str], None] = logger.info,
) -> dict[str, dict[str, Any]]:
    """Convert the images with each peer's own writer into ``cache/peers/<name>`` (kept while the images are the same).

    Args:
        images: the image files (absolute paths).
        labels: one class index per image.
        cache: the benchmark's cache folder.
        peers: peer names.
        fingerprint: identifies the image set; a conversion made from another set is redone.
        isolate: convert in a fresh process (a crashing writer cannot take the benchmark down).
        say: where the one-line progress notes go.

    Returns:
        The benchmark's entry per peer: ``{"status": "ok" | "skipped" | "failed", "note" (why not ok),
        "description", "runs": [], "dir", "conversion": {"convert_s", "bytes", "note"}}``.
    """
    order = np.random.default_rng(_ORDER_SEED).permutation(len(images))
    images, labels = [str(images[i]) for i in order], [int(labels[i]) for i in order]
    out: dict[str, dict[str, Any]] = {}
    for name in check_names(peers):
        folder = Path(cache) / "peers" / name
        stamp = Path(cache) / "peers" / f"{name}.{_STAMP}"
        info: dict[str, Any] = {"status": "ok", "description": description(name), "runs": [], "dir": str(folder)}
        reason = unavailable(name)
        if reason:
            info.update(status="skipped", note=reason)
            say(f"{name}: {reason}")
            out[name] = info
            continue
        saved = json.loads(stamp.read_text()) if stamp.is_file() else {}
        if saved.get("fingerprint") == fingerprint and folder.is_dir():
            info["conversion"] = saved["conversion"]
        else:
            say(f"{name}: converting {len(images)} images with its own writer into {folder}")
            try:
                args = (name, images, labels, str(folder))
                info["conversion"] = run_isolated(_convert, *args) if isolate else _convert(*args)
            except Exception as exc:  # noqa: BLE001 - reported in the table, the other peers still run
                line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                info.update(status="failed", note=f"conversion failed: {line}")
                say(f"{name}: {info['note']}")
                out[name] = info
                continue
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text(json.dumps({"fingerprint": fingerprint, "conversion": info["conversion"]}))
        out[name] = info
    return out


def pack_stats(root: str | os.PathLike, stamp: str | os.PathLike) -> dict[str, Any]:
    """Fastdata's conversion for the peer table: the pack's seconds (when the benchmark packed it) and bytes."""
    saved = json.loads(Path(stamp).read_text()) if Path(stamp).is_file() else {}
    recoded = bool(Manifest.load(root).transcoded_count)  # 0 when pack kept the bytes (e.g. no C extension)
    note = (
        "TFRecord shards, JPEGs re-coded losslessly with restart intervals"
        if recoded
        else "TFRecord shards of the original bytes"
    )
    stats: dict[str, Any] = {"bytes": _disk_bytes(Path(root)), "note": note}
    if "pack_s" in saved:
        stats["convert_s"] = saved["pack_s"]
    return stats


def build(
    name: str, folder: str | os.PathLike, batch_size: int, workers: int, size: int
) -> tuple[Iterable, Callable[[], None]]:
    """Peer ``name``'s loader over its converted ``folder`` and its closer."""
    loader = load_peer(name).loader(Path(folder), batch_size, workers, size)
    return loader, getattr(loader, "close", lambda: None)


def inputs(folder: str | os.PathLike) -> list[Path]:
    """The files a peer reads: its folder's files, and the images its ``file_list.txt`` names (DALI, SPDL)."""
    folder = Path(folder)
    files = [p for p in folder.rglob("*") if p.is_file()]
    listing = folder / "file_list.txt"
    if listing.is_file():
        files += [Path(line.rsplit(None, 1)[0]) for line in listing.read_text().splitlines() if line.strip()]
    return files


def description(name: str) -> str:
    """The first line of peer ``name``'s module docstring."""
    return (load_peer(name).__doc__ or name).strip().splitlines()[0]


def format_peer_table(results: dict[str, Any]) -> str:
    """The peers against fastdata's uint8 loader: images/s, ratio, conversion time and bytes on disk."""
    pipelines, peers = results["pipelines"], results.get("peers", {}).get("names", [])
    base = pipelines.get(BASELINE, {}).get("images_per_s", {}).get("median")
    header = (
        f"{'loader':<16} {'images/s median [min-max]':<28} {'x ' + BASELINE:>17} {'convert s':>10} "
        f"{'MB on disk':>11}  note"
    )
    lines = [header, "-" * len(header)]
    best: tuple[float, str] | None = None
    for name in [BASELINE, *peers]:
        entry = pipelines.get(name)
        if entry is None:
            continue
        conv = entry.get("conversion") or {}
        convert_s = f"{conv['convert_s']:.1f}" if "convert_s" in conv else "-"
        disk = f"{conv['bytes'] / 1e6:.1f}" if "bytes" in conv else "-"
        if entry["status"] != "ok" or "images_per_s" not in entry:
            lines.append(f"{name:<16} {entry['status'].upper() + ': ' + entry.get('note', '')}")
            continue
        ips = entry["images_per_s"]
        ratio = f"{ips['median'] / base:.2f}x" if base else "-"
        if name != BASELINE and (best is None or ips["median"] > best[0]):
            best = (ips["median"], name)
        output = "" if entry.get("output", {}).get("ok", True) else "OUTPUT MISMATCH; "
        lines.append(
            f"{name:<16} {ips['median']:8.1f} [{ips['min']:.1f}-{ips['max']:.1f}]".ljust(45)
            + f" {ratio:>17} {convert_s:>10} {disk:>11}  {output}{conv.get('note', '')}"
        )
    if base and best:
        lines.append(f"best peer: {best[1]}; {BASELINE} / best peer = {base / best[0]:.2f}x")
    return "\n".join(lines)
