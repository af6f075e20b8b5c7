"""Build the optional native kernels; everything else is configured in pyproject.toml.

``fastdata.decode._jpegcrop`` (crop-region JPEG decoding with libjpeg-turbo) and
``fastdata.loader._floatbatch`` (uint8 batches to normalized float in one pass) and
``fastdata.packing._jpegtranscode`` (pack's lossless JPEG transcoding to restart intervals) and
``fastdata.transforms._affine`` (PIL's affine bicubic warp for the decode-time rotate and shear) and
``fastdata.transforms._lut`` (lookup tables applied in place, 64 bytes at a time with AVX-512 VBMI) and
``fastdata.formats._records`` (a batch of records read and checked with the GIL released) are optional:
when there is no C compiler or no ``jpeglib.h``, the build prints one warning per kernel and the
install goes on without it (fastdata then decodes through PyTurboJPEG/OpenCV, normalizes with torch, pack stores
JPEG bytes unchanged, bicubic rotate and shear use OpenCV's cubic kernel, and lookup tables cv2.LUT).
``FASTDATA_REQUIRE_NATIVE=1`` (tools/build_wheel.sh) makes a kernel that does not build an error instead.
"""

import os
import re
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

#: Set by tools/build_wheel.sh: a release wheel without its kernels would be slow without saying so, so there a kernel
#: that does not build fails the build instead of warning.
_REQUIRED = os.environ.get("FASTDATA_REQUIRE_NATIVE", "") not in ("", "0")

_HINT = (
    "install a C compiler and libjpeg-dev (Debian/Ubuntu: apt-get install gcc libjpeg-dev), "
    "then reinstall: pip install -e ."
)


class OptionalBuildExt(build_ext):
    """``build_ext`` that turns a failed compile or link into a warning."""

    _warned = False

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 (no compiler: DistutilsPlatformError, CCompilerError, ...)
            if not self._warned:  # else: the editable install's copy of the unbuilt library failed
                self._warn("fastdata's native kernels", exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001 (missing jpeglib.h: CompileError; no -ljpeg: LinkError)
            self._warn(ext.name, exc)

    def _warn(self, what: str, exc: BaseException) -> None:
        if _REQUIRED:
            raise SystemExit(
                f"ERROR: fastdata: {what} not built ({type(exc).__name__}: {exc}); FASTDATA_REQUIRE_NATIVE is set"
            )
        self._warned = True
        text = " ".join(str(exc).split())
        failed = re.search(r"Command '\['([^']+)'.*exit status (\d+)", text)  # the compiler ran and failed
        if failed:
            reason = f"{type(exc).__name__}: {failed[1]} exited with status {failed[2]}, its message is above"
        else:  # e.g. no compiler at all
            reason = f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__
        print(f"WARNING: fastdata: {what} not built ({reason}); {_HINT}", file=sys.stderr, flush=True)


setup(
    ext_modules=[
        Extension(
            "fastdata.decode._jpegcrop",
            ["fastdata/decode/_jpegcrop.c"],
            libraries=["jpeg"],
            extra_compile_args=["-O3"],
        ),
        Extension(
            "fastdata.packing._jpegtranscode",
            ["fastdata/packing/_jpegtranscode.c"],
            libraries=["jpeg"],
            extra_compile_args=["-O2"],
        ),
        Extension("fastdata.loader._floatbatch", ["fastdata/loader/_floatbatch.c"], extra_compile_args=["-O3"]),
        # no contraction into fused multiply-adds: each sample point is PIL's own double arithmetic, bit for bit;
        # no floating-point traps (never enabled by Python): gcc may then vectorize the loops with selects
        Extension(
            "fastdata.transforms._affine",
            ["fastdata/transforms/_affine.c"],
            extra_compile_args=["-O3", "-ffp-contract=off", "-fno-trapping-math"],
        ),
        Extension("fastdata.formats._records", ["fastdata/formats/_records.c"], extra_compile_args=["-O3"]),
        Extension("fastdata.transforms._lut", ["fastdata/transforms/_lut.c"], extra_compile_args=["-O3"]),
        # PIL's coefficients in double precision, bit for bit: no fused multiply-adds there either
        Extension(
            "fastdata.decode._bilinear",
            ["fastdata/decode/_bilinear.c"],
            extra_compile_args=["-O3", "-ffp-contract=off"],
        ),
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
