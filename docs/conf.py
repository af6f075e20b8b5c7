"""Sphinx configuration of fastdata's documentation site (built by ``bash tools/docs.sh``).

Offline by design: no intersphinx inventory is fetched, so third-party types (torch, numpy, PIL, ...) are not
linked and are listed one module at a time in ``nitpick_ignore_regex``; every name of fastdata itself must resolve
(``docs/_ext/fastdata_docs.py`` resolves internal module paths to the public names they are documented under).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # the fastdata of this checkout, not an installed one
sys.path.insert(0, str(DOCS / "_ext"))

import fastdata  # noqa: E402

project = "fastdata"
author = "the fastdata authors"
copyright = "the fastdata authors"  # noqa: A001 - Sphinx's name
release = fastdata.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.doctest",
    "sphinx.ext.viewcode",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
    "fastdata_docs",  # docs/_ext: CLI reference, raised messages, environment variables, public-name resolution
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "reference/_backrefs"]
templates_path: list[str] = []

# -- cross-references: warnings are errors (tools/docs.sh passes -W -n) -----------------------------------------
nitpicky = True
# Third-party names cannot be resolved offline (no intersphinx fetch): the modules whose types fastdata's signatures
# and docstrings name, one by one (Python's builtins resolve without help). Never one of our own.
_THIRD_PARTY = ["torch", "numpy", "PIL", "typing_extensions", "collections.abc", "os", "pathlib"]
nitpick_ignore_regex = [("py:.*", rf"{re.escape(module)}(\..+)?") for module in _THIRD_PARTY]

# -- autodoc and napoleon (Google style) ------------------------------------------------------------------------
autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
autodoc_inherit_docstrings = False  # torch's DataLoader docstrings are not ours to render
autoclass_content = "class"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = False  # Attributes: sections become attribute entries, so :attr: references find them
python_use_unqualified_type_names = True

# -- docstring examples: `>>>` blocks run under `sphinx-build -b doctest` (tools/docs.sh) ------------------------
doctest_test_doctest_blocks = "default"
trim_doctest_flags = True
doctest_global_setup = """
from doctest_fixtures import *  # docs/_ext/doctest_fixtures.py: images/ and packed/ in a temporary folder
enter_workspace()
"""

# -- MyST ---------------------------------------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist", "fieldlist"]
myst_heading_anchors = 3

# -- sphinx-gallery: examples/tutorial_*.py, executed at every build --------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": str(DOCS / "tutorials"),
    "filename_pattern": r"tutorial_",
    "ignore_pattern": r"^(?!tutorial_)",  # only the tutorials are gallery pages
    "doc_module": ("fastdata",),
    "backreferences_dir": str(DOCS / "reference" / "_backrefs"),
    "reference_url": {"fastdata": None},  # links into this site
    "prefer_full_module": set(),
    "download_all_examples": False,
    "plot_gallery": "True",
    "abort_on_example_error": True,
    "only_warn_on_example_error": False,
    "remove_config_comments": True,
    "show_memory": False,
    "min_reported_time": 10**9,  # no per-example timings on the pages
    "write_computation_times": False,  # nor pages of them (this machine's seconds are not a measurement)
    "default_thumb_file": str(DOCS / "_static" / "thumb.png"),
    "matplotlib_animations": False,
    "image_scrapers": ("matplotlib",),
}

# -- HTML ---------------------------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"fastdata {release}"
html_static_path = ["_static"]
html_css_files = ["fastdata.css"]
html_show_sourcelink = False
html_theme_options = {"navigation_with_keys": True}

# -- fastdata_docs (docs/_ext) ----------------------------------------------------------------------------------
# Pages a branch may lack while they are being written (its toctree line and card are then left out, a {doc} link
# to it is plain text). Empty: every page exists, so a missing page or link is an error.
fastdata_other_pages: list[str] = []
# Modules documented with their public names on their room's page; the module map lists every other one.
fastdata_automodules = [
    "fastdata",
    "fastdata.transforms",
    "fastdata.gpu_transforms",
    "fastdata.dali",
    "fastdata.integrations.timm",
]
