"""The ``fastdata`` command line as reST, from its argparse parser (for ``.. fastdata-cli::`` and the tests).

Plain Python: ``tests/docs/test_reference.py`` imports it without Sphinx installed.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

USAGE_WIDTH = 100  # usage lines wrap here, whatever the terminal that builds the docs


def cli_commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """``{"fastdata": parser, "fastdata pack": ..., ...}``: the program and each sub-command's parser, in order."""
    found = {parser.prog: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.update(cli_commands(sub))
    return found


def cli_arguments(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """The parser's own arguments and options (not ``--help``, not the sub-command slot)."""
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        yield action


def option_names(action: argparse.Action) -> list[str]:
    """How ``.. option::`` names an argument: its flags, or a positional's metavar (``SRC``)."""
    if action.option_strings:
        return list(action.option_strings)
    return [action.metavar if isinstance(action.metavar, str) else action.dest.upper()]


def _rst_text(text: str) -> str:
    """Help text as reST: `code` spans become literals, every other markup character is escaped."""
    parts = re.split(r"`([^`]+)`", " ".join(text.split()))
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"``{part}``")
        else:
            out.append(re.sub(r"([\\*_|`\[\]<>:])", r"\\\1", part))
    return "".join(out)


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    return parser._get_formatter()._expand_help(action)  # %(default)s and friends, as --help prints them


def _flag_signature(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.option_strings:
        return option_names(action)[0]
    formatter = parser._get_formatter()
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    args = formatter._format_args(action, formatter._get_default_metavar_for_optional(action))
    return ", ".join(f"{flag} {args}" for flag in action.option_strings)


def cli_rst(parser: argparse.ArgumentParser) -> list[str]:
    """The reST of the whole command line: one section per command, one ``.. option::`` per argument."""
    lines: list[str] = []
    for prog, command in cli_commands(parser).items():
        title = f"``{prog}``"
        lines += [title, "-" * len(title), "", f".. program:: {prog}", ""]
        summary = _summaries(parser).get(prog)
        if summary:
            lines += [_rst_text(summary[0].upper() + summary[1:]) + ".", ""]
        if command.description:
            lines += [_rst_text(command.description), ""]
        formatter = command.formatter_class(prog, width=USAGE_WIDTH)
        formatter.add_usage(command.usage, command._actions, command._mutually_exclusive_groups)
        lines += [".. code-block:: text", ""]
        lines += ["   " + line for line in formatter.format_help().rstrip().splitlines()]
        lines += [""]
        for action in cli_arguments(command):
            lines += [f".. option:: {_flag_signature(command, action)}", ""]
            text = _help(command, action)
            if text:
                lines += ["   " + _rst_text(text), ""]
            if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
                choices = ", ".join(f"``{c}``" for c in action.choices)
                lines += [f"   Choices: {choices}.", ""]
        if command.epilog and command.epilog != parser.epilog:  # the exit status is listed once, at the end
            lines += [".. code-block:: text", ""] + ["   " + line for line in command.epilog.splitlines()] + [""]
    if parser.epilog:
        lines += ["Exit status", "-----------", "", ".. code-block:: text", ""]
        lines += ["   " + line for line in parser.epilog.splitlines()] + [""]
    return lines


def _summaries(parser: argparse.ArgumentParser) -> dict[str, str]:
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                out[f"{parser.prog} {choice.dest}"] = choice.help or ""
    return out
