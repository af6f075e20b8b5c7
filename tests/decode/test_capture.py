"""codec_messages: what C libraries print and Python warnings, collected per image instead of shown."""

from __future__ import annotations

import multiprocessing
import os
import warnings

import pytest

from fastdata.decode.capture import codec_messages


def test_collects_native_lines_and_warnings_and_shows_nothing(capfd):
    with codec_messages() as messages:
        os.write(2, b"TIFFReadDirectory: Warning, unknown field\n\nsecond line\n")
        warnings.warn("a Python warning", stacklevel=2)
        os.write(2, b"second line\n")
        assert messages == []
    assert messages == ["a Python warning", "TIFFReadDirectory: Warning, unknown field", "second line"]
    with codec_messages() as again:
        os.write(2, b"only this\n")
    assert again == ["only this"]  # nothing left over from the previous block
    out, err = capfd.readouterr()
    assert out == err == ""
    os.write(2, b"visible\n")
    assert capfd.readouterr().err == "visible\n"  # stderr is restored


def test_restores_stderr_when_the_block_raises(capfd):
    with pytest.raises(KeyError), codec_messages() as messages:
        os.write(2, b"before the error\n")
        raise KeyError("x")
    assert messages == ["before the error"]
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


def _in_child(queue) -> None:
    with codec_messages() as messages:
        os.write(2, b"from the child\n")
    queue.put(messages)


def test_a_forked_process_gets_its_own_scratch_file():
    with codec_messages():
        pass  # the parent's scratch file exists before the fork
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_in_child, args=(queue,))
    child.start()
    assert queue.get(timeout=30) == ["from the child"]
    child.join(timeout=30)
    with codec_messages() as messages:
        os.write(2, b"parent\n")
    assert messages == ["parent"]
