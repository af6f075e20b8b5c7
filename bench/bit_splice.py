#!/usr/bin/env python
"""The bit-level splice against the restart-interval (DRI) splice: pixel identity, speed on one core, index size.

Issue 16, item 2 ("try the DRI splice and the bit-level splice; ship the faster and say why"). An experiment, not
package code. For every JPEG of an ImageNet-like set:

- ``dri``: ``jpegtran -optimize -copy none -restart 1B``, a restart marker every MCU (what fastdata's pack writes);
- ``nodri``: ``jpegtran -optimize -copy none``, no markers, plus an index made by one Huffman-decoding pass ("pack
  time"): at MCU columns 0, K, 2K, ... of every MCU row, the bit position and the DC predictors (K = 1, 2, 4).

A crop's MCU box becomes a sub-JPEG two ways, both in ``bench/bit_splice/bitsplice.c`` (compiled at run time, called
through ctypes): the DRI splice copies the intervals covering the box; the bit splice copies each row segment's bits
from the index position, re-encoding only the first DC difference of each component (see the C file). Either
sub-JPEG is decoded by fastdata's own kernel (``_jpegcrop.Decompressor.decode_region``, splice off) at the smallest
sufficient DCT scale and resized by cv2 exactly as ``fastdata.decode.native.decode_crop_into`` does.

Identity: 20 boxes per image (edges and corners, then torchvision ``RandomResizedCrop`` boxes): the decoded region
of the bit splice (K = 1, 2, 4) == the harness's DRI splice == PIL's decode of the original at the same DCT scale
(``draft``), and the 224x224 result == fastdata's shipped splice on the ``dri`` record; also 4:2:2, 4:4:4, 4:4:0,
4:1:1 and gray JPEGs made by ``cjpeg -sample``. Speed, one pinned core, one box per image, alternating rounds:

- ``shipped-dri``: fastdata's native DRI splice (``native.decode_crop_into`` on the ``dri`` record);
- ``harness-dri``: the same splice done by this harness (shows the harness itself costs nothing extra);
- ``bit-K1/2/4``: the bit splice, building the sub-stream included;
- ``region-nodri``: fastdata's kernel on the ``nodri`` record, decoding from the top (no splice possible);
- ``cv2``: ``cv2.imdecode`` + crop + ``cv2.resize`` of the original file (the baseline);
- ``whole-dri``, ``whole-nodri``: fastdata's kernel decoding the whole image into 224x224 (an eval-style decode),
  what the markers cost where nothing can be cut.

``bit-K1o``/``bit-K4o``: the index also holds, per entry, the bit offset of each component's first DC code inside
the MCU, so the splice decodes only the DC codes it re-encodes (no AC decoding); a bigger index.

Then the split (building the sub-JPEG vs decoding it, for the DRI and bit splices) and the index's size against
the RST markers' bytes. Needs jpegtran/cjpeg (apt-get install libjpeg-turbo-progs), a C compiler and libjpeg's
headers (libjpeg-dev).

Usage::

    python bench/bit_splice.py                          # 1,000 ImageNet-like images: identity, speed, sizes
    python bench/bit_splice.py --images 200 --repeats 3 --no-identity
"""

from __future__ import annotations

import argparse
import ctypes
import io
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

from fastdata.decode import _jpegcrop, native  # noqa: E402
from fastdata.decode.base import choose_scale, resize_into, scaled_box, scaled_size  # noqa: E402
from fastdata.transforms import RandomResizedCrop  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from interval_decode import load_jpegs  # noqa: E402  (the same image set as the interval benchmark)

SIZE = 224
CHUNK = 64
KS = (1, 2, 4)
VARIANTS = (*KS, "1o", "4o")  # "Ko": the index also holds each component's first-DC bit offset in the MCU
SOURCE = Path(__file__).resolve().parent / "bit_splice" / "bitsplice.c"
_i32p = ctypes.POINTER(ctypes.c_int32)


def build_library(out_dir: Path) -> ctypes.CDLL:
    """Compile bitsplice.c into ``out_dir`` and load it."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("no C compiler: apt-get install gcc libjpeg-dev")
    target = out_dir / "bitsplice.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", str(SOURCE), "-o", str(target), "-ljpeg"], check=True)
    lib = ctypes.CDLL(str(target))
    lib.bs_info.argtypes = [ctypes.c_char_p, ctypes.c_size_t, _i32p]
    lib.bs_index.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_void_p, ctypes.c_size_t]
    lib.bs_splice_dri.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, _i32p, ctypes.c_void_p,
                                  ctypes.c_size_t, _i32p]
    lib.bs_splice_dri.restype = ctypes.c_long
    lib.bs_splice_bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_void_p, ctypes.c_int, ctypes.c_int, _i32p, ctypes.c_void_p,
                                   ctypes.c_size_t, _i32p, ctypes.c_void_p]
    lib.bs_splice_bits.restype = ctypes.c_long
    lib.bs_appended_uses.restype = ctypes.c_longlong
    return lib


def jpegtran(data: bytes, restart: str | None) -> bytes:
    """Lossless re-code with optimized Huffman tables, no APPn/COM copied, restart markers if asked."""
    args = ["jpegtran", "-optimize", "-copy", "none"] + (["-restart", restart] if restart else [])
    return subprocess.run(args, input=data, capture_output=True, check=True).stdout


class Record:
    """One image: the original, its two transcodes and the bit-splice indexes."""

    def __init__(self, lib: ctypes.CDLL, original: bytes) -> None:
        self.original = original
        self.dri = jpegtran(original, "1B")
        self.nodri = jpegtran(original, None)
        info = (ctypes.c_int32 * 8)()
        if lib.bs_info(self.nodri, len(self.nodri), info):
            raise ValueError("bitsplice cannot parse the header")
        self.width, self.height, self.ncomp, self.per_row, self.mcu_rows = info[:5]
        self.index = {}
        for k in KS:
            entries = self.mcu_rows * -(-self.per_row // k) + 1
            pos, dc = np.empty(entries, np.uint64), np.empty((entries, self.ncomp), np.int16)
            offs = np.zeros((entries, self.ncomp), np.uint16)
            got = lib.bs_index(self.nodri, len(self.nodri), k, pos.ctypes.data, dc.ctypes.data, offs.ctypes.data,
                               entries)
            if got != entries:
                raise ValueError(f"bs_index returned {got}, expected {entries}")
            self.index[k] = (pos, dc, pos.ctypes.data, dc.ctypes.data)
            self.index[f"{k}o"] = (pos, dc, pos.ctypes.data, dc.ctypes.data, offs, offs.ctypes.data)


class Harness:
    """Builds a sub-JPEG with the C library and decodes it with fastdata's kernel, like decode_crop_into."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self.decoder = _jpegcrop.Decompressor(splice=False)
        self.buf = np.empty(1 << 24, np.uint8)
        self.buf_ptr, self.buf_view = self.buf.ctypes.data, memoryview(self.buf)
        self.box, self.shift = (ctypes.c_int32 * 4)(), (ctypes.c_int32 * 2)()
        self.stats = np.zeros(2, np.int64)
        self.fallbacks = 0
        self.scratch = np.empty(1 << 24, np.uint8)

    def plan(self, height: int, width: int, box, out_shape):
        scale = choose_scale(native.NATIVE_SCALES, box[2], box[3], *out_shape)
        return scale[1], scaled_box(box, scale, scaled_size(height, width, scale))

    def splice(self, method, record: Record, denom: int, region):
        """The sub-JPEG for the scaled region (bytes-like, its region) or None where it takes the whole file."""
        y0, y1, x0, x1 = region
        b = self.box
        b[0], b[1], b[2], b[3] = y0, y1, x0, x1
        if method == "dri":
            n = self.lib.bs_splice_dri(record.dri, len(record.dri), denom, b, self.buf_ptr, self.buf.size,
                                       self.shift)
        else:
            index = record.index[method]
            n = self.lib.bs_splice_bits(record.nodri, len(record.nodri), index[2], index[3],
                                        index[5] if len(index) > 4 else None, int(str(method).rstrip("o")), denom, b,
                                        self.buf_ptr, self.buf.size, self.shift, None)
        if n < 0:
            raise RuntimeError(f"splice {method} failed")
        if n == 0:
            return None
        dy, dx = self.shift[0], self.shift[1]
        return self.buf_view[:n], (y0 - dy, y1 - dy, x0 - dx, x1 - dx)

    def decode_region(self, method, record: Record, denom: int, region) -> np.ndarray:
        """The scaled region's pixels (a view of the scratch buffer)."""
        y0, y1, x0, x1 = region
        out = self.scratch[: (y1 - y0) * (x1 - x0) * 3].reshape(y1 - y0, x1 - x0, 3)
        spliced = self.splice(method, record, denom, region)
        if spliced is None:
            self.fallbacks += 1
            self.decoder.decode_region(record.dri if method == "dri" else record.nodri, denom, y0, y1, x0, x1, out)
        else:
            data, (y0, y1, x0, x1) = spliced
            self.decoder.decode_region(data, denom, y0, y1, x0, x1, out)
        return out

    def crop(self, method, record: Record, box, out: np.ndarray) -> None:
        denom, region = self.plan(record.height, record.width, box, out.shape[:2])
        resize_into(self.decode_region(method, record, denom, region), out, None)


def _cv2_crop(data: bytes, box, out: np.ndarray) -> None:
    top, left, height, width = box
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    resize_into(cv2.cvtColor(bgr[top:top + height, left:left + width], cv2.COLOR_BGR2RGB), out, None)


def _pil_full(data: bytes, denom: int) -> np.ndarray | None:
    """PIL's decode at DCT scale 1/denom (``draft``), or None where PIL does not give exactly that scale."""
    image = Image.open(io.BytesIO(data))
    width, height = image.size
    if denom > 1:
        image.draft("RGB", (max(1, width // denom), max(1, height // denom)))
    pixels = np.asarray(image.convert("RGB"))
    return pixels if pixels.shape[:2] == (-(-height // denom), -(-width // denom)) else None


def edge_boxes(rng: random.Random, height: int, width: int, n: int = 20) -> list[tuple[int, int, int, int]]:
    """``n`` (top, left, h, w) boxes: the whole image, each edge and corner, then RandomResizedCrop ones."""
    h2, w2 = max(1, height // 3), max(1, width // 3)
    boxes = [(0, 0, height, width), (0, w2 // 2, h2, width - w2), (height - h2, 0, h2, width),
             (0, 0, height, w2), (0, width - w2, height, w2), (0, 0, h2, w2), (height - h2, width - w2, h2, w2),
             (0, width - w2, h2, w2), (height - h2, 0, h2, w2)]
    generator = torch.Generator().manual_seed(rng.randrange(1 << 30))
    while len(boxes) < n:
        with torch.random.fork_rng():
            torch.manual_seed(int(torch.randint(1 << 30, (1,), generator=generator)))
            boxes.append(tuple(int(v) for v in RandomResizedCrop.get_params(height, width, (0.08, 1.0),
                                                                             (3 / 4, 4 / 3))))
    return boxes


def check_identity(harness: Harness, records: list[Record], boxes_per_image: int = 20, seed: int = 0) -> dict:
    """Every record, ``boxes_per_image`` boxes: max |difference| between the methods and PIL; counts."""
    rng = random.Random(seed)
    methods = ["dri", *VARIANTS]
    result = {"cases": 0, "max_diff": 0, "mismatches": [], "pil_unavailable": 0, "spliced": dict.fromkeys(methods, 0)}
    appended = harness.lib.bs_appended_uses()
    out_shipped, out_ref = np.empty((SIZE, SIZE, 3), np.uint8), np.empty((SIZE, SIZE, 3), np.uint8)
    for i, record in enumerate(records):
        pil_cache: dict[int, np.ndarray | None] = {}
        for box in edge_boxes(rng, record.height, record.width, boxes_per_image):
            denom, region = harness.plan(record.height, record.width, box, (SIZE, SIZE))
            if denom not in pil_cache:
                pil_cache[denom] = _pil_full(record.original, denom)
            full = pil_cache[denom]
            y0, y1, x0, x1 = region
            if full is None:  # PIL cannot give this scale: compare with the kernel's whole decode instead
                result["pil_unavailable"] += 1
                full = np.empty((*scaled_size(record.height, record.width, (1, denom)), 3), np.uint8)
                harness.decoder.decode_region(record.original, denom, 0, full.shape[0], 0, full.shape[1], full)
            reference = full[y0:y1, x0:x1]
            for method in methods:
                before = harness.fallbacks
                got = harness.decode_region(method, record, denom, region)
                result["spliced"][method] += harness.fallbacks == before
                diff = int(np.abs(got.astype(np.int16) - reference).max())
                result["max_diff"] = max(result["max_diff"], diff)
                if diff:
                    result["mismatches"].append((i, method, box, denom, diff))
            native.decode_crop_into(record.dri, box, out_shipped)  # the 224x224 result, shipped path
            resize_into(np.ascontiguousarray(reference), out_ref, None)
            diff = int(np.abs(out_shipped.astype(np.int16) - out_ref).max())
            result["max_diff"] = max(result["max_diff"], diff)
            if diff:
                result["mismatches"].append((i, "shipped", box, denom, diff))
            result["cases"] += 1
    result["dc_appended"] = harness.lib.bs_appended_uses() - appended
    return result


def sampling_records(lib: ctypes.CDLL, originals: list[bytes], count: int = 4) -> dict[str, list[Record]]:
    """4:2:2, 4:4:4, 4:4:0, 4:1:1 and gray JPEGs made by cjpeg from ``count`` of the images."""
    kinds = {"422": ["-sample", "2x1"], "444": ["-sample", "1x1"], "440": ["-sample", "1x2"],
             "411": ["-sample", "4x1"], "gray": ["-grayscale"]}
    made: dict[str, list[Record]] = {k: [] for k in kinds}
    for data in originals[:count]:
        ppm = io.BytesIO()
        Image.open(io.BytesIO(data)).convert("RGB").save(ppm, "PPM")
        for kind, args in kinds.items():
            jpeg = subprocess.run(["cjpeg", "-quality", "90", *args], input=ppm.getvalue(), capture_output=True,
                                  check=True).stdout
            made[kind].append(Record(lib, jpeg))
    return made


def _varint_len(values) -> int:
    total = 0
    for v in values:
        v = int(v)
        v = (v << 1) ^ (v >> 63)  # zigzag
        total += max(1, -(-v.bit_length() // 7))
    return total


def index_sizes(records: list[Record]) -> dict:
    """Mean bytes per image: the RST markers, and each index raw (u32 position + int16 DCs), zlib, delta-varint."""
    rst = statistics.mean(len(r.dri) - len(r.nodri) for r in records)
    sizes = {"rst_bytes": rst, "nodri_bytes": statistics.mean(len(r.nodri) for r in records)}
    for k in KS:
        raw, packed, varint = [], [], []
        for r in records:
            pos, dc = r.index[k][:2]
            blob = pos.astype(np.uint32).tobytes() + dc.tobytes()
            raw.append(len(blob))
            packed.append(len(zlib.compress(blob, 9)))
            varint.append(_varint_len(np.diff(pos.astype(np.int64), prepend=0))
                          + _varint_len(np.diff(dc.astype(np.int64), axis=0, prepend=0).ravel()))
        offs = [r.index[f"{k}o"][4][:, 1:] for r in records]  # component 0's first DC is at offset 0
        sizes[f"K{k}"] = {"raw": statistics.mean(raw), "zlib": statistics.mean(packed),
                          "varint": statistics.mean(varint),
                          "offs_raw": statistics.mean(o.nbytes for o in offs),
                          "offs_varint": statistics.mean(_varint_len(o.ravel()) for o in offs)}
    return sizes


def measure_speed(harness: Harness, records: list[Record], boxes, repeats: int, clock=time.thread_time) -> dict:
    """img/s per method, medians of alternating rounds, ratios, and the build/decode split."""
    out = np.empty((SIZE, SIZE, 3), np.uint8)

    def shipped(r, box):
        native.decode_crop_into(r.dri, box, out)

    def region_nodri(r, box):
        decompressor = native._decompressor()
        decompressor.splice = False
        try:
            native.decode_crop_into(r.nodri, box, out)
        finally:
            decompressor.splice = True

    methods = {"shipped-dri": shipped, "harness-dri": lambda r, box: harness.crop("dri", r, box, out),
               **{f"bit-K{k}": (lambda k: lambda r, box: harness.crop(k, r, box, out))(k) for k in VARIANTS},
               "region-nodri": region_nodri, "cv2": lambda r, box: _cv2_crop(r.original, box, out),
               # the whole image into 224x224 (what an eval Resize decodes): what the markers cost a full decode
               "whole-dri": lambda r, box: native.decode_crop_into(r.dri, None, out),
               "whole-nodri": lambda r, box: native.decode_crop_into(r.nodri, None, out)}
    plans = [harness.plan(r.height, r.width, box, (SIZE, SIZE)) for r, box in zip(records, boxes)]
    subs = {m: [] for m in ["dri", *VARIANTS]}

    def build(method):
        def run(r, plan):
            harness.splice(method, r, *plan)
        return run

    def decode(method):
        def run(r, plan_sub):
            (denom, region), (data, sub_region) = plan_sub
            y0, y1, x0, x1 = sub_region
            harness.decoder.decode_region(data, denom, y0, y1, x0, x1,
                                          harness.scratch[: (y1 - y0) * (x1 - x0) * 3])
        return run

    for m in subs:  # the sub-JPEGs, kept as bytes for the decode-only loops
        for r, plan in zip(records, plans):
            got = harness.splice(m, r, *plan)
            subs[m].append(None if got is None else (bytes(got[0]), got[1]))
    split = {}
    for m in subs:
        keep = [i for i, s in enumerate(subs[m]) if s is not None]
        split[f"build-{m}"] = (build(m), [records[i] for i in keep], [plans[i] for i in keep])
        split[f"decode-{m}"] = (decode(m), [None] * len(keep), [(plans[i], subs[m][i]) for i in keep])
    timed = {name: (fn, records, boxes) for name, fn in methods.items()} | split
    for name, (fn, rs, args) in timed.items():  # warm-up
        for r, a in zip(rs, args):
            fn(r, a)
    # Alternating in chunks of CHUNK images inside each round, and this thread's CPU time (time.thread_time), so
    # that other processes on a loaded machine neither shift one method's share nor count as its time.
    rates: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(repeats):
        spent = dict.fromkeys(timed, 0.0)
        for lo in range(0, len(records), CHUNK):
            for name, (fn, rs, args) in timed.items():
                start = clock()
                for r, a in zip(rs[lo:lo + CHUNK], args[lo:lo + CHUNK]):
                    fn(r, a)
                spent[name] += clock() - start
        for name, (fn, rs, args) in timed.items():
            rates[name].append(spent[name] / max(1, len(rs)) * 1e6)  # us per image
    med = {name: statistics.median(v) for name, v in rates.items()}
    ratios = {name: statistics.median(c / a for a, c in zip(rates[name], rates["cv2"])) for name in methods}
    vs_dri = {name: statistics.median(c / a for a, c in zip(rates[name], rates["shipped-dri"])) for name in methods}
    spliced = {m: sum(s is not None for s in subs[m]) for m in subs}
    return {"us": med, "range": {n: (min(v), max(v)) for n, v in rates.items()}, "x_cv2": ratios,
            "x_shipped": vs_dri, "spliced": spliced, "images": len(records), "repeats": repeats}


def _print_identity(label: str, r: dict) -> None:
    print(f"  {label:14s} {r['cases']:6d} boxes  max diff {r['max_diff']}  spliced "
          + " ".join(f"{'dri' if m == 'dri' else f'K{m}'}={n}" for m, n in r["spliced"].items())
          + f"  DC codes from appended categories {r['dc_appended']}"
          + (f"  (PIL scale missing: {r['pil_unavailable']})" if r["pil_unavailable"] else "")
          + (f"  MISMATCHES {len(r['mismatches'])}: {r['mismatches'][:3]}" if r["mismatches"] else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data", help="where the data set is (or is made)")
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--boxes", type=int, default=20, help="boxes per image for the identity check")
    parser.add_argument("--identity-images", type=int, default=150,
                        help="how many of the images the identity check covers (0: all: ~4 min under load)")
    parser.add_argument("--no-identity", action="store_true", help="skip the identity check")
    parser.add_argument("--core", type=int, default=None, help="the core to pin to (default: the last usable one)")
    args = parser.parse_args(argv)
    for tool in ("jpegtran", "cjpeg"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is missing: apt-get install libjpeg-turbo-progs")
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[-1] if args.core is None else args.core})
    cv2.setNumThreads(1)
    torch.set_num_threads(1)
    originals = load_jpegs(args.data_dir / f"imagenet-like-{args.images}", args.images)
    with tempfile.TemporaryDirectory() as tmp:
        lib = build_library(Path(tmp))
        start = time.perf_counter()
        records = [Record(lib, d) for d in originals]
        print(f"{len(records)} ImageNet-like JPEGs transcoded (jpegtran) and indexed in "
              f"{time.perf_counter() - start:.1f} s")
        for k in KS:
            start = time.perf_counter()
            for r in records:
                pos, dc, pos_ptr, dc_ptr = r.index[k]
                lib.bs_index(r.nodri, len(r.nodri), k, pos_ptr, dc_ptr, None, len(pos))
            print(f"  index pass (one Huffman decode of the no-DRI file), K={k}: "
                  f"{(time.perf_counter() - start) / len(records) * 1e3:.2f} ms per image")
        harness = Harness(lib)
        if not args.no_identity:
            print(f"Identity (bit splice K={'/'.join(map(str, VARIANTS))} == DRI splice == PIL at the same DCT scale, "
                  f"shipped 224x224 == resize of PIL's region), {args.boxes} boxes per image:")
            subset = records[: args.identity_images or None]
            _print_identity("imagenet-like", check_identity(harness, subset, args.boxes))
            for kind, recs in sampling_records(lib, originals).items():
                _print_identity(kind, check_identity(harness, recs, args.boxes, seed=1))
        torch.manual_seed(0)
        boxes = [RandomResizedCrop.get_params(r.height, r.width, (0.08, 1.0), (3 / 4, 4 / 3)) for r in records]
        s = measure_speed(harness, records, boxes, args.repeats)
        print(f"Speed: one core, one RandomResizedCrop({SIZE}) box per image, {s['repeats']} rounds alternating every "
              f"{CHUNK} images, median CPU us/image of this thread (range):")
        for name, us in s["us"].items():
            lo, hi = s["range"][name]
            extra = ""
            if name in s["x_cv2"]:
                extra = f"  {1e6 / us:6.0f} img/s  x{s['x_cv2'][name]:.2f} cv2  x{s['x_shipped'][name]:.2f} shipped"
            print(f"  {name:13s} {us:7.1f} ({lo:.1f}-{hi:.1f}){extra}")
        print("  sub-JPEGs built (others take the whole file): "
              + ", ".join(f"{'dri' if m == 'dri' else f'K{m}'} {n}" for m, n in s["spliced"].items()))
        z = index_sizes(records)
        print(f"Size per image (mean): no-DRI file {z['nodri_bytes']:.0f} B; RST markers (1B) cost "
              f"{z['rst_bytes']:.0f} B ({z['rst_bytes'] / z['nodri_bytes']:.1%})")
        for k in KS:
            e = z[f"K{k}"]
            print(f"  index K={k}: raw {e['raw']:.0f} B, zlib {e['zlib']:.0f} B, delta-varint {e['varint']:.0f} B "
                  f"({e['varint'] / z['nodri_bytes']:.1%} of the file); first-DC offsets ('o') add raw "
                  f"{e['offs_raw']:.0f} B, varint {e['offs_varint']:.0f} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
