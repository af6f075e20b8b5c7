"""Apply a per-image plan of ops to a batch: the engine under the augmentation policies.

A plan is two CPU tensors ``[slots, n]``: ``op`` (an index into :data:`OP_NAMES`, ``-1`` for none) and ``arg``
(the op's argument in torchvision's units: degrees counter-clockwise for ``rotate``, the shear factor (PIL's, the
tangent of the angle), pixels for the translations, a factor for the enhance ops, bits for ``posterize``, a
threshold / an amount in uint8 units (0..255) for ``solarize`` / ``solarize_add``, sigma for ``gaussian_blur``
(torchvision's) and ``pil_gaussian_blur`` (PIL's ``GaussianBlur`` radius)).
The slots run in order. :class:`PlanPolicy` is the base of the policies that draw such a plan.
In a slot, every image with a geometric op goes through one affine ``grid_sample`` (its own matrix), and each
other op runs once on the images that drew it (grouped with ``index_select`` / ``index_copy_``; the groups are
known on the host because the plan is drawn there, so nothing waits on the device).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from typing_extensions import override

from fastdata.gpu_transforms import ops
from fastdata.gpu_transforms.base import BatchTransform, Labels, check_generator, check_images, to_device

__all__ = ["GEOMETRIC", "OP_NAMES", "PlanPolicy", "apply_plan", "op_index"]

OP_NAMES: tuple[str, ...] = (
    "identity",
    "rotate",
    "shear_x",
    "shear_y",
    "translate_x",
    "translate_y",
    "brightness",
    "color",
    "contrast",
    "sharpness",
    "posterize",
    "solarize",
    "solarize_add",
    "equalize",
    "autocontrast",
    "invert",
    "grayscale",
    "pil_grayscale",
    "gaussian_blur",
    "pil_gaussian_blur",
)
#: On the CPU an op runs on this many images at a time: their float temporaries stay in the cache (a whole
#: batch's would stream through memory once per elementary step, several times slower than torchvision per image).
CPU_CHUNK = 4
GEOMETRIC = frozenset({"rotate", "shear_x", "shear_y", "translate_x", "translate_y"})
_GEOMETRIC_IDS = torch.tensor([OP_NAMES.index(name) for name in sorted(GEOMETRIC)])


def op_index(name: str) -> int:
    """The index of op ``name`` in :data:`OP_NAMES`."""
    try:
        return OP_NAMES.index(name)
    except ValueError:
        raise ValueError(f"unknown op {name!r}; ops are {', '.join(OP_NAMES)}") from None


def _affine_matrices(op: torch.Tensor, arg: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The inverse matrix of each image's geometric op (rotate about the centre, shear about the top-left)."""

    def where(name: str, value: torch.Tensor) -> torch.Tensor:
        return torch.where(op == OP_NAMES.index(name), value, torch.zeros_like(value))

    arg = arg.double()
    shear_deg = torch.rad2deg(torch.atan(arg))
    is_shear = (op == OP_NAMES.index("shear_x")) | (op == OP_NAMES.index("shear_y"))
    zero = torch.zeros_like(arg)
    return ops.affine_matrix(
        angle=where("rotate", -arg),
        translate_x=where("translate_x", arg),
        translate_y=where("translate_y", arg),
        shear_x=where("shear_x", shear_deg),
        shear_y=where("shear_y", shear_deg),
        center_x=torch.where(is_shear, zero - width / 2, zero),
        center_y=torch.where(is_shear, zero - height / 2, zero),
    )


def _run_op(name: str, x: torch.Tensor, arg: torch.Tensor, blur_kernel: int) -> torch.Tensor:
    unit = 1.0 if x.dtype == torch.uint8 else 1.0 / 255.0
    if name == "brightness":
        return ops.adjust_brightness(x, arg)
    if name == "color":
        return ops.adjust_saturation(x, arg)
    if name == "contrast":
        return ops.adjust_contrast(x, arg)
    if name == "sharpness":
        return ops.adjust_sharpness(x, arg)
    if name == "posterize":
        return ops.posterize(x, arg.round().long())
    if name == "solarize":
        return ops.solarize(x, arg * unit)
    if name == "solarize_add":
        return ops.solarize_add(x, arg * unit, 128.0 * unit)
    if name == "gaussian_blur":
        return ops.gaussian_blur(x, arg, blur_kernel)
    if name == "pil_gaussian_blur":
        return ops.pil_gaussian_blur(x, arg)
    return getattr(ops, name)(x)  # equalize, autocontrast, invert, grayscale, pil_grayscale


def _run_group(out: torch.Tensor, idx: torch.Tensor, fn, per_image: torch.Tensor) -> None:
    """``out[idx] = fn(out[idx], per_image)``; on the CPU in chunks of :data:`CPU_CHUNK` images (a fixed size)."""
    step = CPU_CHUNK if out.device.type == "cpu" else len(idx)
    for i in range(0, len(idx), step):
        part = to_device(idx[i : i + step], out.device)
        out.index_copy_(0, part, fn(out.index_select(0, part), per_image[i : i + step]))


def apply_plan(
    images: torch.Tensor,
    op: torch.Tensor,
    arg: torch.Tensor,
    *,
    fill: torch.Tensor | None,
    interpolation: str,
    blur_kernel: int = 9,
) -> torch.Tensor:
    """Run the plan ``(op, arg)`` (CPU tensors ``[slots, n]``) on ``images``; return a new batch.

    Args:
        images: ``[n, C, H, W]`` uint8 or float batch on any device.
        op: int64 op indices into :data:`OP_NAMES` (-1: nothing).
        arg: float64 arguments (see the module docstring).
        fill: ``[C]`` fill colour for the geometric ops in uint8 units (None: black, as torchvision).
        interpolation: ``"nearest"`` or ``"bilinear"`` for the geometric ops.
        blur_kernel: Odd kernel size of ``gaussian_blur``.
    """
    n, _, height, width = images.shape
    out = images.clone()
    device = images.device
    unit = 1.0 if images.dtype == torch.uint8 else 1.0 / 255.0
    fill_t = None if fill is None else fill.double() * unit
    for slot_op, slot_arg in zip(op, arg, strict=False):
        geometric = torch.isin(slot_op, _GEOMETRIC_IDS)
        if bool(geometric.any()):  # CPU tensors: no device sync
            idx = geometric.nonzero().flatten()
            matrix = _affine_matrices(slot_op[idx], slot_arg[idx], height, width)
            _run_group(out, idx, lambda v, m: ops.warp_affine(v, m, fill_t, interpolation), matrix)
        present = torch.bincount(slot_op[~geometric & (slot_op > 0)], minlength=len(OP_NAMES))
        for k in present.nonzero().flatten().tolist():
            idx = (slot_op == k).nonzero().flatten()
            # PIL's blur derives its integer box weights from the radius on the host: it gets the CPU values
            args = slot_arg[idx] if OP_NAMES[k] == "pil_gaussian_blur" else to_device(slot_arg[idx], device)
            _run_group(out, idx, lambda v, a, name=OP_NAMES[k]: _run_op(name, v, a, blur_kernel), args)
    return out


class PlanPolicy(BatchTransform):
    """Base of the policies: the fill colour, the interpolation and the generator; ``get_plan`` draws the plan."""

    def __init__(
        self, fill: Sequence[float] | float | None, interpolation: object, generator: torch.Generator | None
    ) -> None:
        interpolation = getattr(interpolation, "value", interpolation)  # torchvision's InterpolationMode too
        if interpolation not in ("nearest", "bilinear"):
            raise ValueError(f"interpolation must be 'nearest' or 'bilinear', got {interpolation!r}")
        self.interpolation = interpolation
        self.fill = None if fill is None else tuple(float(f) for f in (fill if isinstance(fill, Sequence) else [fill]))
        self.generator = check_generator(generator)

    def get_plan(self, batch_size: int, height: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw CPU tensors ``(op, arg)`` ``[slots, batch_size]`` (see the module docstring)."""
        raise NotImplementedError

    @override
    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, Labels]:
        check_images(images)
        n, c, h, w = images.shape
        op, arg = self.get_plan(n, h, w)
        fill = None
        if self.fill is not None:
            fill = torch.tensor(self.fill * c if len(self.fill) == 1 else self.fill, dtype=torch.float64)
            if fill.numel() != c:
                raise ValueError(f"fill has {fill.numel()} values but images have {c} channels; pass one per channel")
        return apply_plan(images, op, arg, fill=fill, interpolation=self.interpolation), labels

    def _rand(self, *shape: int) -> torch.Tensor:
        return torch.rand(*shape, dtype=torch.float64, generator=self.generator)


def signed(magnitude: torch.Tensor, negate: torch.Tensor) -> torch.Tensor:
    """``-magnitude`` where ``negate`` holds, else ``magnitude``."""
    return torch.where(negate, -magnitude, magnitude)
