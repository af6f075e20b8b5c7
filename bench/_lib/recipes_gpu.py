#!/usr/bin/env python
"""Per-image augmentation policies on a batch: fastdata's batched transforms against a per-image loop.

For each policy, a ``B x 3 x 224 x 224`` uint8 batch (float, normalized, for RandomErasing and MixupCutmix, as in
training) goes through:

- ``fastdata``: the batched ``fastdata.gpu_transforms`` policy, on the CPU (and on CUDA when a GPU is present);
- ``per-image``: the same policy, doing the same work, from its reference called on each image of the batch in a
  Python loop on the same CPU threads: torchvision ``transforms.v2`` (``RandAugment(2, 9)``, TrivialAugmentWide,
  AutoAugment, RandomErasing) on tensors; timm's ``rand_augment_transform`` and DeiT III's 3-Augment (PIL's
  GaussianBlur) on PIL images, as their pipelines run them; timm's ``Mixup(mode="elem")`` for MixupCutmix, which
  loops over the images itself. That is what a training loop does without fastdata (or what the CPU workers pay
  per image).

Each timing is the median of ``--repeats`` runs after one warm-up run; the table shows ms per batch and the
ratio per-image / fastdata on the CPU. Needs torchvision and timm (``bash tools/setup.sh test`` installs them).

Usage::

    python bench/recipes.py gpu                       # 256 images, all policies, all torch threads
    python bench/recipes.py gpu --batch 64 --threads 1 --policies rand,trivial
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import tests.torchvision_shim  # noqa: E402,F401 - lets torchvision import beside a torch it was not built for
from fastdata import gpu_transforms as G  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def policies(seed: int) -> dict:
    """name -> (fastdata transform, per-image reference callable, input kind); each pair does the same work."""
    import random

    from PIL import ImageFilter
    from timm.data.auto_augment import rand_augment_transform
    from timm.data.mixup import Mixup
    from torchvision.transforms import v2

    g = torch.Generator().manual_seed(seed)
    random.seed(seed)

    def deit3_blur(img):  # DeiT III's GaussianBlur: PIL's, radius uniform in [0.1, 2]
        return img.filter(ImageFilter.GaussianBlur(radius=random.uniform(0.1, 2.0)))

    # DeiT III's 3-Augment on PIL images, as its data pipeline runs it
    three_ref = v2.Compose(
        [v2.RandomChoice([v2.Grayscale(3), v2.RandomSolarize(128, p=1.0), deit3_blur]), v2.ColorJitter(0.3, 0.3, 0.3)]
    )
    _posterize_zero_bits()  # before the ops are built: they keep the function
    timm_ra = rand_augment_transform("rand-m9-mstd0.5-inc1", {"translate_pct": 0.45, "img_mean": (124, 116, 104)})
    timm_mix = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, mode="elem", label_smoothing=0.1, num_classes=1000)
    return {
        "rand-augment-2-9": (G.RandAugment(2, 9, generator=g), v2.RandAugment(2, 9), "uint8"),
        "rand-m9-mstd0.5-inc1": (G.RandAugment.from_config("rand-m9-mstd0.5-inc1", generator=g), timm_ra, "pil"),
        "trivial-augment-wide": (G.TrivialAugmentWide(generator=g), v2.TrivialAugmentWide(), "uint8"),
        "auto-augment-imagenet": (G.AutoAugment(generator=g), v2.AutoAugment(), "uint8"),
        "three-augment": (G.ThreeAugment(0.3, generator=g), three_ref, "pil"),
        "random-erasing-0.25": (
            G.RandomErasing(0.25, mode="pixel", generator=g),
            v2.RandomErasing(0.25, value="random"),
            "float",
        ),
        "mixup-cutmix-elem": (
            G.MixupCutmix(0.8, 1.0, mode="elem", num_classes=1000, generator=g),
            lambda x, y: timm_mix(x, y),
            "float-batch",
        ),
    }


def _posterize_zero_bits() -> None:
    """timm's PosterizeIncreasing reaches 0 bits at magnitude 10 (mstd noise), which Pillow >= 12 refuses: 0 bits
    is a black image (what fastdata's posterize gives)."""
    import timm.data.auto_augment as timm_aa
    from PIL import Image

    posterize = timm_aa.posterize
    if getattr(posterize, "zero_bits", False):
        return

    def patched(img, bits_to_keep, **kwargs):
        return Image.new(img.mode, img.size) if bits_to_keep <= 0 else posterize(img, bits_to_keep, **kwargs)

    patched.zero_bits = True
    timm_aa.posterize = patched
    for name, fn in list(timm_aa.NAME_TO_OP.items()):
        if fn is posterize:
            timm_aa.NAME_TO_OP[name] = patched


def make_batch(batch: int, size: int, kind: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    base = torch.linspace(0, 255, size * size).view(1, 1, size, size) * torch.rand(batch, 3, 1, 1, generator=g)
    x = (base + 60 * torch.rand(batch, 3, size, size, generator=g)).clamp(0, 255).to(torch.uint8)
    if kind == "uint8":
        return x
    mean, std = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
    return (x.float() / 255 - mean) / std


def timed(fn, repeats: int, sync=None) -> float:
    fn()
    if sync:
        sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--policies", default="all", help="comma-separated name prefixes, or all")
    parser.add_argument("--out", type=Path, default=None, help="also write the results as JSON here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    labels = torch.randint(0, 1000, (args.batch,))
    rows = []
    for name, (ours, ref, kind) in policies(0).items():
        if args.policies != "all" and not any(name.startswith(p) for p in args.policies.split(",")):
            continue
        x = make_batch(args.batch, args.size, "uint8" if kind == "pil" else kind.split("-")[0])
        fast = timed(lambda: ours(x, labels), args.repeats)  # noqa: B023 (called within this iteration)
        if kind == "float-batch":
            loop = timed(lambda: ref(x.clone(), labels), args.repeats)  # noqa: B023 (called within this iteration)
        elif kind == "pil":  # timm's and DeiT III's pipelines augment PIL images: converted before the clock starts
            from PIL import Image

            pil = [Image.fromarray(img.permute(1, 2, 0).numpy()) for img in x]
            loop = timed(lambda: [ref(img) for img in pil], args.repeats)  # noqa: B023 (called within this iteration)
        else:
            loop = timed(lambda: torch.stack([ref(img) for img in x]), args.repeats)  # noqa: B023 (called within this iteration)
        cuda = None
        if torch.cuda.is_available():
            xc, lc = x.cuda(), labels.cuda()
            cuda = timed(lambda: ours(xc, lc), max(args.repeats, 10), torch.cuda.synchronize)  # noqa: B023 (called within this iteration)
        rows.append(
            {
                "policy": name,
                "fastdata_cpu_ms": fast,
                "per_image_cpu_ms": loop,
                "ratio": loop / fast,
                "fastdata_cuda_ms": cuda,
            }
        )
        print(
            f"{name:24s} fastdata {fast:8.1f} ms   per-image {loop:8.1f} ms   x{loop / fast:5.2f}   "
            f"cuda {'-' if cuda is None else f'{cuda:.2f} ms'}",
            flush=True,
        )
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    print(f"\nbatch {args.batch}x3x{args.size}x{args.size}, {torch.get_num_threads()} CPU threads, GPU: {device}")
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "batch": args.batch,
                    "size": args.size,
                    "threads": torch.get_num_threads(),
                    "gpu": device,
                    "rows": rows,
                },
                indent=2,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
