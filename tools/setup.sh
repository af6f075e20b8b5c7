#!/usr/bin/env bash
# Set up fastdata on a fresh Debian/Ubuntu machine: the system libturbojpeg, PyTorch, and the package.
# Usage: bash tools/setup.sh [EXTRAS]     e.g. bash tools/setup.sh test,dali  (docs: what tools/docs.sh builds with)
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
PY="${PYTHON:-python3}"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# 1. System packages: libjpeg-turbo's TurboJPEG library (PyTurboJPEG loads it), and a C compiler with libjpeg-turbo's
#    headers (libjpeg-dev is libjpeg-turbo's on Debian/Ubuntu) for fastdata's native crop-region JPEG kernel. Without
#    them fastdata still works: it falls back to PyTurboJPEG/OpenCV and says so.
need=()
ldconfig -p 2>/dev/null | grep -q 'libturbojpeg\.so' || need+=(libturbojpeg0)
[ -f /usr/include/jpeglib.h ] || [ -f "/usr/include/$(uname -m)-linux-gnu/jpeglib.h" ] || need+=(libjpeg-dev)
command -v cc >/dev/null 2>&1 || need+=(gcc)
# The tests make odd JPEGs (arithmetic-coded, 4:1:1, restart markers) with libjpeg-turbo's cjpeg and jpegtran.
case ",$extras," in *,test,*) command -v cjpeg >/dev/null 2>&1 && command -v jpegtran >/dev/null 2>&1 \
  || need+=(libjpeg-turbo-progs) ;; esac
command -v taskset >/dev/null 2>&1 || need+=(util-linux)  # taskset: the CPU-budget tests pin a process
# The `peers` extra (`fastdata bench --peers`): FFCV builds against OpenCV and libturbojpeg (pkg-config finds
# them), SPDL loads FFmpeg's libraries.
if [[ ",$extras," == *",peers,"* ]]; then
  need+=(libopencv-dev libturbojpeg0-dev pkg-config libavdevice59 libavfilter8)
fi
if [ "${#need[@]}" -gt 0 ]; then
  echo "==> installing ${need[*]} (apt-get)"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# 2. PyTorch. On this project's machines `torch==2.13.0` is a local CPU wheel; any other spec pulls GBs of CUDA
#    packages. The package itself accepts torch>=2.1, so an existing (e.g. CUDA) install is kept as it is.
if ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "==> installing torch==2.13.0"
  "$PY" -m pip install -q --disable-pip-version-check torch==2.13.0
fi

# 3. fastdata itself (editable), with the requested extras.
spec="."
[ -n "$extras" ] && spec=".[$extras]"
echo "==> installing fastdata ${spec}"
# Keep the installed torch: extras (Lightning, Accelerate) must not make pip replace it with another build.
keep_torch="$(mktemp)"
trap 'rm -f "$keep_torch"' EXIT
"$PY" -c 'import torch; print(f"torch=={torch.__version__}")' >"$keep_torch"
"$PY" -m pip install -q --disable-pip-version-check -c "$keep_torch" -e "$spec"
# 4. With the test extra: torchvision and timm, the references the batched policies are tested against. Both pin an
#    exact torch, so they go in --no-deps beside the installed one: torchvision's release matching torch's minor
#    (torch 2.x -> torchvision 0.(x+15)).
if [[ ",$extras," == *",test,"* ]]; then
  tv="$("$PY" -c 'import torch; major, minor = torch.__version__.split(".")[:2]; print(f"0.{int(minor) + 15}.0" if major == "2" else "")')"
  if [ -n "$tv" ]; then
    echo "==> installing torchvision==${tv} and timm (--no-deps, keeping torch $("$PY" -c 'import torch; print(torch.__version__)'))"
    "$PY" -m pip install -q --disable-pip-version-check --no-deps "torchvision==${tv}" timm
  fi
fi
# 5. A torchvision wheel built for another torch (the one above, or one litdata/mosaicml-streaming pulled in with the
#    peers extra) cannot load its compiled ops, and then `import torchvision` (so `import lightning`) fails with
#    "operator torchvision::nms does not exist". tools/torchvision_ops.py installs a start-up hook next to it in
#    site-packages (a .pth file and one module; it imports nothing until torchvision is imported) that declares those
#    op schemas exactly when the compiled ops do not load: torchvision's Python code (transforms) and Lightning import.
if "$PY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torchvision") is None)'; then
  "$PY" tools/torchvision_ops.py
  if ! "$PY" -c 'import torchvision' >/dev/null 2>&1; then
    if [[ ",$extras," == *",test,"* ]]; then  # the tests compare against it: say why it does not import
      echo "ERROR: torchvision does not import with torch $("$PY" -c 'import torch; print(torch.__version__)'):" >&2
      "$PY" -c 'import torchvision' 2>&1 | tail -n 1 >&2
      exit 1
    fi
    # the peers do not need it for the benchmark (fastdata.bench.peers steps around it): remove the broken one
    echo "==> removing torchvision (it does not import with this torch, even with its op schemas declared)"
    "$PY" -m pip uninstall -y -q torchvision
  fi
fi
"$PY" - <<'PYEOF'
import torch, fastdata
import warnings
from fastdata._util.optional import has_turbojpeg, has_dali
from fastdata.decode import native
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    decoder = fastdata.get_decoder("auto")
print(f"==> fastdata {fastdata.__version__}, torch {torch.__version__}, "
      f"libturbojpeg {'yes' if has_turbojpeg() else 'NO (OpenCV fallback)'}, DALI {'yes' if has_dali() else 'no'}")
print(f"==> JPEG decoder: {decoder.name}" + ("" if native.available() else f" (native kernel NOT built: {native.BUILD_HINT})"))
PYEOF
