"""Free-threaded Python: every C extension says it is safe without the GIL, and a pass leaves the GIL off.

On a free-threaded interpreter (3.13t, 3.14t) importing an extension that does not declare ``Py_MOD_GIL_NOT_USED``
turns the GIL back on for the whole process, so one forgotten module would make the thread mode serial again.
The second test runs a thread-mode pass in a fresh interpreter: on a free-threaded build it checks that the GIL is
still off afterwards; on a build with the GIL (this project's CI today: no free-threaded torch is installed) the
same run only checks that the pass works and that the interpreter reports its GIL as on, as it must.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "fastdata"
REPO = PACKAGE.parent


def test_every_c_extension_declares_it_does_not_need_the_gil():
    sources = [p for p in PACKAGE.rglob("*.c") if "PyModuleDef" in p.read_text()]
    assert len(sources) >= 5
    for source in sources:
        text = source.read_text()
        guarded = re.search(
            r"#ifdef Py_GIL_DISABLED\s*\n(?:\s*if \(\w+ != NULL\)\s*\n)?\s*PyUnstable_Module_SetGIL\(\w+, "
            r"Py_MOD_GIL_NOT_USED\);",
            text,
        )
        assert guarded, f"{source.name}: declare Py_MOD_GIL_NOT_USED (inside #ifdef Py_GIL_DISABLED) in its init"


def test_a_thread_mode_pass_leaves_the_gil_as_the_build_has_it(tmp_path):
    script = textwrap.dedent(
        """
        import sys, sysconfig
        from tests.packs import make_distinct_folder, pack_quietly
        import fastdata
        from fastdata import DataLoaderX, ShardDataset, fast_collate
        from fastdata.transforms import RandomResizedCrop
        make_distinct_folder(ROOT / "src", per_class=4)
        pack_quietly(ROOT / "src", ROOT / "packed", "tfrecord")
        dataset = ShardDataset(ROOT / "packed", transform=RandomResizedCrop(16))
        loader = DataLoaderX(dataset, batch_size=2, num_workers=2, worker_mode="thread", collate_fn=fast_collate,
                             pin_memory=False)
        images = sum(len(labels) for _, labels in loader)
        gil = getattr(sys, "_is_gil_enabled", lambda: True)()
        print(images, bool(sysconfig.get_config_var("Py_GIL_DISABLED")), gil)
        """
    ).replace("ROOT", f"__import__('pathlib').Path({str(tmp_path)!r})")
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    images, free_threaded, gil = done.stdout.split()
    assert images == "8"
    assert gil == str(free_threaded != "True")  # a free-threaded build must still run without its GIL
