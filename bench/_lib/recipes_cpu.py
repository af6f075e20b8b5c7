#!/usr/bin/env python
"""Augmentation recipes on the CPU: fastdata's decode-time policies against timm's PIL ops and torchvision v2's
tensor ops, per 224x224 image on one core; and the whole training loader on 2 cores against timm's own.

Part 1, ``ops`` (pinned to one core): ImageNet-like images are cut to 224x224 crops (``RandomResizedCrop``), then
each policy runs on every crop through

- ``fastdata``: the decode-time policy of :mod:`fastdata.transforms` on the uint8 crop (copied into a slot first,
  as the loader's batch slot: the copy is counted);
- ``PIL``: timm's (``rand_augment_transform``, ``RandomErasing`` on the normalized tensor) or, for torchvision's
  policies, torchvision v2's transform on the PIL image, as timm's and torchvision's PIL pipelines run it;
- ``tensor``: torchvision v2's transform on the uint8 ``(3, H, W)`` tensor.

The methods alternate (the order rotating each round) over ``--repeats`` rounds of all crops; the table gives the
median (and range) over the rounds of the mean µs per image (the process's CPU time by default, which a busy
machine disturbs less than wall time; ``--clock wall`` for wall time), and the ratios. Goals: fastdata >= 5x PIL
and >= 10x tensor for ``rand-m9-mstd0.5-inc1``.

Part 2, ``loader`` (2 cores, 2 workers): one pass over ``--images`` images per round, the pipelines alternating:

- ``fastdata-recipe``: ``ShardDataset(pack, DecodeCompose([RandomResizedCrop(224), RandomHorizontalFlip(),
  RandAugment.from_config("rand-m9-mstd0.5-inc1"), RandomErasing(0.25)]))`` + ``DataLoaderX`` +
  ``NormalizeCollate`` (normalized float batches made in the workers);
- ``fastdata-plain``: ``RandomResizedCrop(224)`` + ``NormalizeCollate(hflip_p=0.5)`` (the recipe's baseline);
- ``timm``: ``timm.data.create_loader`` over the image folder (PIL, its RandAugment and RandomErasing in the
  workers, ``use_prefetcher=False``, ``interpolation="random"`` as ``train.py``).

Goals: fastdata-recipe >= 3x timm, and >= 70% of fastdata-plain.

Part 3, ``agreement``: each op at magnitudes 0..10 (timm's level maps, both signs, timm's interpolations) on the
crops, fastdata's uint8 op against timm's PIL op: the share of pixels within one level inside the image and the
largest difference there, and the share of border pixels (whose sample point lies within 2.5 pixels of the image's
edge, or outside it) that differ by more than one level. Needs timm and torchvision (``bash tools/setup.sh
test``). timm's ``PosterizeIncreasing`` at magnitude 10 raises on Pillow >= 10 (``bits`` must be 1..8); the
benchmark patches it to return black, as older Pillow did, so timm's loader survives a pass.

Usage::

    python bench/recipes.py cpu --images 1000                    # both parts, data made under data/ if missing
    python bench/recipes.py cpu --part ops --images 200 --repeats 3
    python bench/recipes.py cpu --part loader --folder data/imagenet-like-3000 --pack data/imagenet-like-3000-pack
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tests.torchvision_shim  # noqa: E402,F401 - lets torchvision import beside a torch it was not built for
from fastdata import transforms as T  # noqa: E402
from fastdata._util.cpus import pin_to_one_core  # noqa: E402

CONFIG = "rand-m9-mstd0.5-inc1"
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def patch_timm_posterize() -> None:
    """timm's posterize with 0 bits gives black (Pillow >= 10 refuses 0 bits; older Pillow gave black)."""
    import timm.data.auto_augment as aa

    original = aa.posterize

    def posterize(img, bits_to_keep, **kwargs):
        if bits_to_keep <= 0:
            return img.point(lambda _: 0)
        return original(img, bits_to_keep, **kwargs)

    aa.posterize = posterize
    for name in ("Posterize", "PosterizeIncreasing", "PosterizeOriginal"):
        aa.NAME_TO_OP[name] = posterize


def prepare(data_dir: Path, images: int, folder: Path | None, packed: Path | None) -> tuple[Path, Path]:
    """The image folder and its fastdata pack (made if missing)."""
    from fastdata.packing.packer import pack

    folder = folder or data_dir / f"imagenet-like-{images}"
    if not (folder.is_dir() and any(folder.iterdir())):
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "tools" / "make_imagenet_like.py"),
                str(folder),
                "--num-images",
                str(images),
                "--num-classes",
                "100",
                "--quiet",
            ],
            check=True,
        )
    packed = packed or Path(f"{folder}-pack")
    if not (packed / "manifest.json").is_file():
        pack(folder, packed, format="tfrecord", progress=False, overwrite=True)
    return folder, packed


def crops(packed: Path, count: int) -> list[np.ndarray]:
    """``count`` 224x224 uint8 crops of the pack's images (RandomResizedCrop, seeded)."""
    from fastdata.datasets.shard_dataset import ShardDataset

    dataset = ShardDataset(packed, transform=T.RandomResizedCrop(224))
    rng = np.random.default_rng(0)
    return [dataset.transform(dataset.read(i % len(dataset))[0], rng=rng) for i in range(count)]


def policies() -> dict[str, tuple]:
    """name -> (fastdata ImageAugment, PIL callable, tensor callable or None, PIL input kind)."""
    import PIL.ImageFilter
    import PIL.ImageOps
    from timm.data.auto_augment import rand_augment_transform
    from timm.data.random_erasing import RandomErasing as TimmErasing
    from torchvision.transforms import v2

    patch_timm_posterize()
    timm_ra = rand_augment_transform(CONFIG, dict(translate_const=100, img_mean=(124, 116, 104)))
    deit_three = v2.Compose(
        [
            v2.RandomChoice(
                [
                    v2.Grayscale(3),
                    lambda im: PIL.ImageOps.solarize(im),
                    lambda im: im.filter(PIL.ImageFilter.GaussianBlur(radius=float(np.random.uniform(0.1, 2.0)))),
                ]
            ),
            v2.ColorJitter(0.3, 0.3, 0.3),
        ]
    )
    three_tensor = v2.Compose(
        [
            v2.RandomChoice([v2.Grayscale(3), v2.RandomSolarize(128, p=1.0), v2.GaussianBlur(9, (0.1, 2.0))]),
            v2.ColorJitter(0.3, 0.3, 0.3),
        ]
    )
    timm_erase = TimmErasing(0.25, mode="const", device="cpu")
    mean, std = torch.tensor(MEAN).view(3, 1, 1), torch.tensor(STD).view(3, 1, 1)
    return {
        CONFIG: (T.RandAugment.from_config(CONFIG), timm_ra, v2.RandAugment(2, 9), "pil"),
        "RandAugment(2, 9)": (T.RandAugment(2, 9), v2.RandAugment(2, 9), v2.RandAugment(2, 9), "pil"),
        "TrivialAugmentWide": (T.TrivialAugmentWide(), v2.TrivialAugmentWide(), v2.TrivialAugmentWide(), "pil"),
        "AutoAugment(imagenet)": (T.AutoAugment(), v2.AutoAugment(), v2.AutoAugment(), "pil"),
        "ThreeAugment(0.3)": (T.ThreeAugment(0.3), deit_three, three_tensor, "pil"),
        "ColorJitter(0.4, 0.4, 0.4)": (
            T.ColorJitter(0.4, 0.4, 0.4),
            v2.ColorJitter(0.4, 0.4, 0.4),
            v2.ColorJitter(0.4, 0.4, 0.4),
            "pil",
        ),
        "RandomHorizontalFlip": (T.RandomHorizontalFlip(), v2.RandomHorizontalFlip(), v2.RandomHorizontalFlip(), "pil"),
        "RandomErasing(0.25)": (T.RandomErasing(0.25), timm_erase, v2.RandomErasing(0.25), "normalized"),
        "_mean_std": (mean, std),
    }


def measure_ops(
    images: list[np.ndarray], repeats: int, only: list[str] | None, clock=time.process_time
) -> dict[str, dict[str, list[float]]]:
    """µs per image of each method, per round (rounds alternate the methods, order rotating)."""
    from PIL import Image

    table = policies()
    mean, std = table.pop("_mean_std")
    pil = [Image.fromarray(im) for im in images]
    tensors = [torch.from_numpy(im).permute(2, 0, 1).contiguous() for im in images]
    normalized = [(t.float() / 255 - mean) / std for t in tensors]
    slot = np.empty_like(images[0])
    rng = np.random.Generator(np.random.Philox(key=0))
    results: dict[str, dict[str, list[float]]] = {}
    for name, (ours, pil_fn, tensor_fn, kind) in table.items():
        if only and name not in only:
            continue

        def fastdata() -> None:
            for im in images:
                np.copyto(slot, im)
                ours.apply(slot, rng)  # noqa: B023 (called within this iteration)

        def pil_path() -> None:
            for x in pil if kind == "pil" else normalized:  # noqa: B023 (called within this iteration)
                pil_fn(x.clone() if kind == "normalized" else x)  # noqa: B023 (called within this iteration)

        def tensor_path() -> None:
            for t in tensors:
                tensor_fn(t)  # noqa: B023 (called within this iteration)

        methods = {"fastdata": fastdata, "PIL": pil_path, "tensor": tensor_path}
        for fn in methods.values():  # warm-up
            fn()
        rates: dict[str, list[float]] = {m: [] for m in methods}
        names = list(methods)
        for round_ in range(repeats):
            for k in range(len(names)):
                method = names[(round_ + k) % len(names)]
                began = clock()
                methods[method]()
                rates[method].append((clock() - began) / len(images) * 1e6)
        results[name] = rates
    return results


def print_ops(results: dict[str, dict[str, list[float]]], count: int, repeats: int, clock: str) -> None:
    print(
        f"\nPer image, one core, {count} 224x224 crops x {repeats} rounds (methods alternating), {clock} time: "
        "median µs [range]"
    )
    print(f"{'policy':28s} {'fastdata':>18s} {'PIL':>20s} {'tensor':>20s} {'x PIL':>7s} {'x tensor':>9s}")
    for name, rates in results.items():
        cells = {m: f"{statistics.median(r):7.0f} [{min(r):.0f}-{max(r):.0f}]" for m, r in rates.items()}
        ours = statistics.median(rates["fastdata"])
        print(
            f"{name:28s} {cells['fastdata']:>18s} {cells['PIL']:>20s} {cells['tensor']:>20s} "
            f"{statistics.median(rates['PIL']) / ours:6.1f}x {statistics.median(rates['tensor']) / ours:8.1f}x"
        )
    print(
        "PIL: timm's ops (rand-..., RandomErasing on the normalized tensor), DeiT III's PIL 3-Augment, else "
        "torchvision v2 on the PIL image; tensor: torchvision v2 on the uint8 tensor (for rand-m9-mstd0.5-inc1: "
        "v2.RandAugment(2, 9))."
    )


def agreement(images: list[np.ndarray]) -> None:
    """fastdata's uint8 ops against timm's PIL ops, interior and border (see the module docstring, part 3)."""
    import random

    import timm.data.auto_augment as aa
    from PIL import Image

    from fastdata.transforms.policy_tables import GEOMETRIC, TIMM_OPS, apply_op

    patch_timm_posterize()
    fill, hparams = (124, 116, 104), {"translate_const": 100, "translate_pct": 0.45}
    resamples = {"nearest": Image.NEAREST, "bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}
    print(
        f"\nAgreement with timm's PIL ops, {len(images)} crops, magnitudes 0..10, both signs: interior pixels "
        "within 1 level, largest interior difference, border pixels off by more than 1"
    )
    for name in [n for n in TIMM_OPS if n != "GaussianBlurRand"]:
        op, level = TIMM_OPS[name]
        for interpolation in ("nearest", "bilinear", "bicubic") if op in GEOMETRIC else ("-",):
            inside, worst, border = [], 0, []
            for magnitude in range(11):
                for negate in (False, True):
                    random.random = (lambda v: lambda: v)(0.9 if negate else 0.1)  # timm's sign coin
                    args = () if aa.LEVEL_TO_ARG[name] is None else aa.LEVEL_TO_ARG[name](magnitude, hparams)
                    arg = 0.0 if level is None else float(level(magnitude, hparams, negate))
                    for image in images:
                        h, w = image.shape[:2]
                        arg_px = arg * (w if name == "TranslateXRel" else h if name == "TranslateYRel" else 1)
                        ref = np.asarray(
                            aa.NAME_TO_OP[name](
                                Image.fromarray(image),
                                *args,
                                fillcolor=fill,
                                resample=resamples.get(interpolation, Image.BILINEAR),
                            )
                        )
                        ours = apply_op(
                            image.copy(),
                            op,
                            arg_px,
                            flavour="pil",
                            interpolation=interpolation if op in GEOMETRIC else "nearest",
                            fill=fill,
                        )
                        d = np.abs(ours.astype(np.int16) - ref).max(axis=2)
                        edge = _edge_mask(op, arg_px, h, w)
                        inside.append(d[~edge] <= 1)
                        worst = max(worst, int(d[~edge].max()) if (~edge).any() else 0)
                        border.append(d[edge] > 1)
            random.random = random.Random().random
            share_in = np.concatenate(inside).mean()
            share_border = np.concatenate(border).mean() if sum(b.size for b in border) else 0.0
            label = f"{name} ({interpolation})" if op in GEOMETRIC else name
            print(
                f"  {label:32s} interior within 1: {100 * share_in:7.3f}%  max {worst:3d}   "
                f"border > 1: {100 * share_border:6.2f}%"
            )


def _edge_mask(op: str, arg: float, height: int, width: int) -> np.ndarray:
    """Pixels whose sample point is within 2.5 pixels of the image's edge or outside it (geometric ops)."""
    import math

    if op not in ("shear_x", "shear_y", "translate_x", "translate_y", "rotate"):
        return np.zeros((height, width), bool)
    yy, xx = np.mgrid[0:height, 0:width] + 0.5
    if op == "rotate":
        angle = -math.radians(arg)
        a, b = math.cos(angle), math.sin(angle)
        x = a * (xx - width / 2) + b * (yy - height / 2) + width / 2
        y = -b * (xx - width / 2) + a * (yy - height / 2) + height / 2
    else:
        x = xx + (arg * yy if op == "shear_x" else arg if op == "translate_x" else 0)
        y = yy + (arg * xx if op == "shear_y" else arg if op == "translate_y" else 0)
    return (x < 2.5) | (x > width - 2.5) | (y < 2.5) | (y > height - 2.5)


def loaders(folder: Path, packed: Path, batch: int, workers: int) -> dict:
    """name -> a function making a fresh loader."""
    from timm.data import create_dataset, create_loader

    from fastdata.datasets.shard_dataset import ShardDataset
    from fastdata.loader import DataLoaderX, NormalizeCollate

    patch_timm_posterize()
    recipe = T.DecodeCompose(
        [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.RandAugment.from_config(CONFIG), T.RandomErasing(0.25)]
    )

    def fastdata(transform, hflip: float):
        dataset = ShardDataset(packed, transform=transform)
        return DataLoaderX(
            dataset,
            batch_size=batch,
            shuffle=True,
            num_workers=workers,
            drop_last=True,
            collate_fn=NormalizeCollate(MEAN, STD, hflip_p=hflip),
            persistent_workers=False,
        )

    def timm_loader():
        dataset = create_dataset("", root=str(folder), is_training=True)
        return create_loader(
            dataset,
            input_size=(3, 224, 224),
            batch_size=batch,
            is_training=True,
            use_prefetcher=False,
            auto_augment=CONFIG,
            re_prob=0.25,
            interpolation="random",
            num_workers=workers,
            device=torch.device("cpu"),
            persistent_workers=False,
        )

    return {
        "fastdata-recipe": lambda: fastdata(recipe, 0.0),
        "fastdata-plain": lambda: fastdata(T.RandomResizedCrop(224), 0.5),
        "timm": timm_loader,
    }


def measure_loaders(folder: Path, packed: Path, repeats: int, batch: int, workers: int) -> dict[str, list[float]]:
    """images/s of one pass per pipeline and round (first 2 batches of each pass not counted: worker start-up)."""
    makers = loaders(folder, packed, batch, workers)
    names = list(makers)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        for k in range(len(names)):
            name = names[(round_ + k) % len(names)]
            torch.manual_seed(round_)
            count, began = 0, None
            for b, (images, _) in enumerate(makers[name]()):
                if b == 1:
                    began = time.perf_counter()
                elif b > 1:
                    count += images.shape[0]
            rates[name].append(count / (time.perf_counter() - began) if began and count else float("nan"))
    return rates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("ops", "loader", "both", "agreement"), default="both")
    parser.add_argument("--images", type=int, default=1000, help="images (made if missing) and crops per round")
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data", help="where the data is (or is made)")
    parser.add_argument("--folder", type=Path, default=None, help="an image folder (default DATA_DIR/imagenet-like-N)")
    parser.add_argument("--pack", type=Path, default=None, help="its fastdata pack (default FOLDER-pack; made)")
    parser.add_argument("--repeats", type=int, default=5, help="rounds (methods alternate within each)")
    parser.add_argument("--policies", nargs="*", default=None, help="only these policies (part 1)")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--core", type=int, default=None, help="part 1's core (default: the last usable one)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="part 1: process CPU time or wall")
    args = parser.parse_args(argv)
    folder, packed = prepare(args.data_dir, args.images, args.folder, args.pack)
    cores = sorted(os.sched_getaffinity(0))
    if args.part in ("ops", "both"):
        pin_to_one_core(args.core)
        images = crops(packed, args.images)
        clock = time.process_time if args.clock == "cpu" else time.perf_counter
        print_ops(measure_ops(images, args.repeats, args.policies, clock), len(images), args.repeats, args.clock)
        os.sched_setaffinity(0, set(cores))
    if args.part == "agreement":
        agreement(crops(packed, min(args.images, 50)))
    if args.part in ("loader", "both"):
        os.sched_setaffinity(0, set(cores[:2]))
        rates = measure_loaders(folder, packed, args.repeats, args.batch, workers=2)
        print(
            f"\nLoader, 2 workers on {len(cores[:2])} cores, batch {args.batch}, {args.repeats} passes each "
            "(alternating): images/s median [range]"
        )
        for name, r in rates.items():
            print(f"  {name:16s} {statistics.median(r):7.0f} [{min(r):.0f}-{max(r):.0f}]")
        recipe = statistics.median(rates["fastdata-recipe"])
        print(f"  fastdata-recipe / timm: {recipe / statistics.median(rates['timm']):.2f}x (goal >= 3)")
        print(
            f"  fastdata-recipe / fastdata-plain: {recipe / statistics.median(rates['fastdata-plain']):.2f} "
            "(goal >= 0.70)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
