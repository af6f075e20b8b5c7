"""README.md stays a front page (issue 37): at most 12,000 characters, its headline numbers are the ones the newest
headline benchmark recorded, and every file it links to exists. Its Python blocks run in test_code_blocks.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_CHARACTERS = 12_000
#: The results file the README's "Measured" paragraph quotes, and the pipelines it names.
HEADLINE = ROOT / "bench" / "results" / "headline.json"
QUOTED = (("fastdata-tfrecord", "torch-pil"), ("fastdata-uint8", "torch-cv2"))


def readme() -> str:
    return README.read_text(encoding="utf-8")


def test_the_readme_is_at_most_12000_characters():
    length = len(readme())
    assert length <= MAX_CHARACTERS, (
        f"README.md is {length} characters (at most {MAX_CHARACTERS}): move the detail to a page under docs/"
    )


def relative_links(text: str) -> list[str]:
    """The targets of the Markdown links that point into the repository (no URL scheme, no in-page anchor)."""
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    return [t.split("#", 1)[0] for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_every_file_the_readme_links_to_exists():
    links = relative_links(readme())
    assert len(links) > 10
    missing = [t for t in links if not (ROOT / t).exists()]
    assert missing == [], f"README.md links to files that do not exist: {missing}"


def test_links_are_found():
    text = "[a](docs/a.md), [b](https://x.org/b.md), [c](#section), [d](examples/d.py#L3), [e](mailto:x@y)"
    assert relative_links(text) == ["docs/a.md", "examples/d.py"]


def measured_paragraph() -> str:
    match = re.search(r"^\*\*Measured\*\*.*?(?=\n\n)", readme(), re.S | re.M)
    assert match is not None, 'README.md has no paragraph starting with "**Measured**"'
    return " ".join(match.group(0).split())


def test_the_headline_quotes_the_recorded_benchmark():
    """Each quoted pair (images/s of fastdata and of the baseline, and their ratio) is the results file's medians."""
    results = json.loads(HEADLINE.read_text(encoding="utf-8"))
    paragraph = measured_paragraph()
    machine = results["machine"]
    assert f"{machine['logical_cores']}-core" in paragraph and str(machine["ram_gb"]) in paragraph
    assert "bench/loaders.py headline" in paragraph and "docs/benchmarks.md" in paragraph
    for ours, theirs in QUOTED:
        a = results["pipelines"][ours]["images_per_s"]["median"]
        b = results["pipelines"][theirs]["images_per_s"]["median"]
        shown = f"{round(a):,} images/s against {round(b):,}" if ours == QUOTED[0][0] else f"{round(a):,} against"
        assert shown in paragraph, f"{ours}: expected {shown!r} in the README's headline ({HEADLINE.name})"
        assert f"{round(b):,}" in paragraph and f"({a / b:.2f}×)" in paragraph, f"{ours} / {theirs}: {a / b:.2f}×"
