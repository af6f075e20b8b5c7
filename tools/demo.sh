#!/usr/bin/env bash
# Set everything up, then run the main job on a small generated sample: make an image folder,
# pack it into TFRecord and LMDB shards, check them, and read them back through the loader.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
python3 tools/demo.py "$@"
