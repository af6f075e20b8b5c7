#!/usr/bin/env python
"""The crop resample against torchvision's: pixels and sharpness per shrink band and DCT scale, and the cost.

The reference is torchvision's ``RandomResizedCrop`` on the PIL-decoded image: the crop, then PIL's antialiased
bilinear (``img.crop(box).resize(size, BILINEAR)``). fastdata decodes the same box (torchvision's
``get_params``, torch seed 0) with ``resample="antialias"`` (the default) and ``resample="fast"`` (0.2.0's OpenCV
resample). Per shrink band (``sqrt(crop area / output area)``: enlarge, 1-1.5x, 1.5-2x, 2-4x, >4x) and per DCT
scale the kernel picks: crops, % of pixel values within one level of the reference, within two, and the median
ratio of mean |Laplacian| (sharpness) to the reference's.

Images: the ImageNet-like set (``tools/make_imagenet_like.py``, as ``bench/kernel.py per-sample`` packs it, under
``--data-dir``), and real photographs: scikit-image's sample photographs (``skimage/data``: astronaut, chelsea,
coffee, rocket, motorcycle_left/right, hubble_deep_field, retina; ``pip install scikit-image``, read as files,
re-encoded as JPEG quality 90), each cropped at ``--photo-crops`` boxes. ``--sizes`` adds smaller outputs, so that
the larger shrinks (reduced DCT scales) occur on ImageNet-sized images too.

Speed, side by side in one run, pinned to one core, CPU time, modes alternating per round: the kernel
(``decode_crop_into`` of every record's box into one slot) and the loader's worker path (``ShardDataset`` batches
of 64 through ``__getitems__``, the batch decode, ``RandomResizedCrop(224, resample=...)``).

Usage::

    python bench/kernel.py resample --images 50 --photo-crops 10 --rounds 1      # a quick check
    python bench/kernel.py resample --images 2000 --photo-crops 200 --rounds 5 --json bench/results/resample.json
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from kernel_per_sample import _prepare  # noqa: E402 (its neighbour in bench/_lib, on sys.path)
from PIL import Image  # noqa: E402

from fastdata._util.cpus import pin_to_one_core  # noqa: E402
from fastdata.datasets.shard_dataset import ShardDataset  # noqa: E402
from fastdata.decode import native  # noqa: E402
from fastdata.decode.scaling import headroom, plan_region  # noqa: E402
from fastdata.transforms import RandomResizedCrop  # noqa: E402

MODES = ("antialias", "fast")
BANDS = (("enlarge", 0.0, 1.0), ("1-1.5x", 1.0, 1.5), ("1.5-2x", 1.5, 2.0), ("2-4x", 2.0, 4.0), (">4x", 4.0, 1e9))
PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png", "motorcycle_right.png")
PHOTOS += ("hubble_deep_field.jpg", "retina.jpg")
BATCH = 64


def photographs() -> list[bytes]:
    """scikit-image's sample photographs as JPEG (quality 90); [] when scikit-image is not installed."""
    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        print("scikit-image is not installed (pip install scikit-image): real photographs skipped")
        return []
    folder = Path(spec.submodule_search_locations[0]) / "data"
    out = []
    for name in PHOTOS:
        if (folder / name).is_file():
            buf = io.BytesIO()
            Image.open(folder / name).convert("RGB").save(buf, format="JPEG", quality=90)
            out.append(buf.getvalue())
    return out


def _sharpness(image: np.ndarray) -> float:
    return float(np.abs(cv2.Laplacian(image.astype(np.float32).mean(axis=2), cv2.CV_32F)).mean())


def _band(shrink: float) -> str:
    return next(name for name, low, high in BANDS if low < shrink <= high or (low == 0.0 and shrink <= high))


def accuracy(records: list[bytes], sizes: list[int], crops_per_image: int) -> dict:
    """Per (mode, band) and (mode, scale): crops, values, within 1, within 2, sharpness ratios."""
    table: dict = {}
    torch.manual_seed(0)
    for data in records:
        try:
            height, width = native.read_header(data)[:2]
        except Exception:  # noqa: BLE001 - PNG records: not what this measures
            continue
        pil = Image.open(io.BytesIO(data)).convert("RGB")
        for size in sizes:
            crop = RandomResizedCrop(size)
            for _ in range(crops_per_image):
                top, left, h, w = crop._params(height, width, None)
                reference = np.asarray(pil.crop((left, top, left + w, top + h)).resize((size, size), Image.BILINEAR))
                ref_sharp = max(_sharpness(reference), 1e-6)
                band = _band((h * w / size / size) ** 0.5)
                for mode in MODES:
                    out = np.empty((size, size, 3), np.uint8)
                    native.decode_crop_into(data, (top, left, h, w), out, resample=mode)
                    room = headroom(mode)
                    scale = plan_region(
                        (top, left, h, w), height, width, size * room, size * room, native.NATIVE_SCALES
                    )
                    diff = np.abs(out.astype(np.int16) - reference)
                    for key in ((mode, "band", band), (mode, "scale", f"{scale[0][0]}/{scale[0][1]}")):
                        row = table.setdefault(key, {"crops": 0, "values": 0, "within1": 0, "within2": 0, "sharp": []})
                        row["crops"] += 1
                        row["values"] += diff.size
                        row["within1"] += int((diff <= 1).sum())
                        row["within2"] += int((diff <= 2).sum())
                        row["sharp"].append(_sharpness(out) / ref_sharp)
    return table


def print_table(title: str, table: dict) -> dict:
    """Print the table; return it in JSON form."""
    print(f"\n{title}: crops, % within 1 level, % within 2, median sharpness ratio (mean |Laplacian| / reference)")
    result = {}
    for kind in ("band", "scale"):
        print(f"  per {'shrink band' if kind == 'band' else 'DCT scale'}:")
        names = [b[0] for b in BANDS]
        keys = sorted(
            {k[2] for k in table if k[1] == kind},
            key=lambda k: names.index(k) if kind == "band" else int(k.split("/")[0]) / int(k.split("/")[1]),
        )
        for key in keys:
            cells = []
            for mode in MODES:
                row = table.get((mode, kind, key))
                if row is None:
                    cells.append(f"{mode:9s} -")
                    continue
                w1, w2 = 100 * row["within1"] / row["values"], 100 * row["within2"] / row["values"]
                sharp = statistics.median(row["sharp"])
                cells.append(f"{mode:9s} {row['crops']:5d} {w1:6.2f}% {w2:6.2f}% {sharp:6.3f}")
                result[f"{mode}/{kind}/{key}"] = {
                    "crops": row["crops"],
                    "within1": w1,
                    "within2": w2,
                    "sharpness": sharp,
                }
            print(f"    {key:8s} " + "   |   ".join(cells))
    return result


def _plan(data: bytes, box: tuple[int, int, int, int], mode: str) -> tuple:
    """The region ``decode_crop_into`` decodes for ``box`` in ``mode``: scale, bounds and a buffer for it."""
    height, width = native.read_header(data)[:2]
    room = headroom(mode)
    scale, y0, y1, x0, x1 = plan_region(box, height, width, 224 * room, 224 * room, native.NATIVE_SCALES)
    return scale, y0, y1, x0, x1, np.empty((y1 - y0, x1 - x0, 3), np.uint8)


def speed(root: Path, rounds: int) -> dict:
    """img/s of CPU time per mode: the kernel (decode_crop_into) and the loader's batch path (__getitems__)."""
    datasets = {
        mode: ShardDataset(root, transform=RandomResizedCrop(224, resample=mode), decode_threads=1) for mode in MODES
    }
    reader = datasets[MODES[0]]
    datas, boxes = [], []
    torch.manual_seed(0)
    crop = RandomResizedCrop(224)
    for i in range(len(reader)):
        data = reader.read(i)[0]
        try:
            height, width = native.read_header(data)[:2]
        except Exception:  # noqa: BLE001 - PNG records
            continue
        datas.append(data)
        boxes.append(crop._params(height, width, None))
    out = np.empty((224, 224, 3), np.uint8)
    plans = {mode: [_plan(data, box, mode) for data, box in zip(datas, boxes, strict=True)] for mode in MODES}
    rates: dict = {f"{what}/{mode}": [] for what in ("kernel", "loader", "decode") for mode in MODES}
    # Modes interleaved batch by batch (64 images), in alternating order: a drift of the machine's speed over a round
    # (frequency, a neighbour) reaches both modes alike. Each round sums each mode's CPU time over every image.
    for round_ in range(rounds):
        spent = dict.fromkeys(rates, 0.0)
        for start in range(0, len(datas), BATCH):
            chunk = range(start, min(start + BATCH, len(datas)))
            order = MODES if (round_ + start // BATCH) % 2 == 0 else MODES[::-1]
            for mode in order:
                began = time.process_time()
                for i in chunk:
                    native.decode_crop_into(datas[i], boxes[i], out, resample=mode)
                spent[f"kernel/{mode}"] += time.process_time() - began
                began = time.process_time()  # the same regions decoded at the mode's DCT scale, not resized
                for i in chunk:
                    scale, y0, y1, x0, x1, region = plans[mode][i]
                    native._region(datas[i], scale, y0, y1, x0, x1, region)
                spent[f"decode/{mode}"] += time.process_time() - began
                began = time.process_time()
                datasets[mode].__getitems__(list(range(start, min(start + BATCH, len(datasets[mode])))))
                spent[f"loader/{mode}"] += time.process_time() - began
        for key, seconds in spent.items():
            rates[key].append(len(datas) / seconds)
    print(f"\nspeed, one core, CPU time, {rounds} rounds, img/s median (range):")
    for mode in MODES:  # the kernel's time per image split into the region's decode and the rest (the resize)
        kernel_us = 1e6 / statistics.median(rates[f"kernel/{mode}"])
        decode_us = 1e6 / statistics.median(rates[f"decode/{mode}"])
        print(
            f"  {mode:9s} per image {kernel_us:6.0f} us = decode {decode_us:6.0f} + resize {kernel_us - decode_us:6.0f}"
        )
    for what in ("kernel", "loader"):
        cells = []
        for mode in MODES:
            r = rates[f"{what}/{mode}"]
            cells.append(f"{mode} {statistics.median(r):7.0f} ({min(r):.0f}-{max(r):.0f})")
        ratio = statistics.median(a / b for a, b in zip(rates[f"{what}/antialias"], rates[f"{what}/fast"], strict=True))
        print(f"  {what:6s}  " + "   ".join(cells) + f"   antialias / fast: {ratio:.3f}")
    return rates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data", help="where the data set is (or is made)")
    parser.add_argument("--images", type=int, default=1000, help="ImageNet-like images (packed once)")
    parser.add_argument("--crops", type=int, default=1, help="boxes per ImageNet-like image and size")
    parser.add_argument("--photo-crops", type=int, default=100, help="boxes per photograph and size")
    parser.add_argument("--sizes", default="224,96", help="output sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=5, help="speed rounds (0: no speed measurement)")
    parser.add_argument("--core", type=int, default=None, help="the core to pin to (default: the last usable one)")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--speed-only", action="store_true", help="no pixel comparison, only the speed")
    args = parser.parse_args(argv)
    if not native.available():
        sys.exit("the native kernel is not built (python setup.py build_ext --inplace)")
    pin_to_one_core(args.core)
    sizes = [int(s) for s in args.sizes.split(",")]
    root = _prepare(args.data_dir, args.images)
    if args.speed_only:
        result: dict = {"speed": speed(root, args.rounds)}
        if args.json:
            args.json.write_text(json.dumps(result, indent=2) + "\n")
        return 0
    records = [ShardDataset(root).read(i)[0] for i in range(len(ShardDataset(root)))]
    result = {
        "sizes": sizes,
        "imagenet_like": print_table(
            f"ImageNet-like ({args.images} images, outputs {sizes})", accuracy(records, sizes, args.crops)
        ),
    }
    photos = photographs()
    if photos:
        result["photographs"] = print_table(
            f"photographs ({len(photos)} from scikit-image, outputs {sizes})", accuracy(photos, sizes, args.photo_crops)
        )
    if args.rounds:
        result["speed"] = speed(root, args.rounds)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
