"""``python -m lmswitch`` (or ``lmswitch``): info, train, generate, sweep, svd, highlight, measure, eval, build-pretrained, transfer, demo.

:mod:`~lmswitch.cli.parser` holds the argparse tree, :mod:`~lmswitch.cli.preflight` the
checks made before a model loads (and ``info --switch``, which needs none), :mod:`~lmswitch.cli.commands` one function
per subcommand, :mod:`~lmswitch.cli.evaluate` the ``eval`` subcommand.

>>> main(["info", "--switch", "sentiment", "--json"])   # doctest: +SKIP
0
"""

from __future__ import annotations

import argparse
import sys
import warnings

from lmswitch.cli.parser import build_parser, unknown_options_first, values_after_options

__all__ = ["build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) and run it; returns the exit code: 0, 2 for bad input, 130 when interrupted."""
    argv = sys.argv[1:] if argv is None else argv
    parser, given = build_parser(), values_after_options(argv)
    unknown_options_first(parser, given)
    args = parser.parse_args(given)
    args.argv = list(argv)  # what a report records as its command (main may be called from a script, not the shell)
    try:
        return _run(args)
    except (ValueError, FileNotFoundError) as err:  # SwitchFileError is a ValueError
        from lmswitch.cli.preflight import flag_named

        print(f"error: {flag_named(str(err), args)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `lmswitch info --switch sentiment | head -3`: the reader left, nothing to report
        sys.stdout = None  # no flush of the closed pipe at exit
        return 0
    except OSError as err:  # a file or folder the system refused (permissions, a full disk, a path through a file)
        print(f"error: {err.strerror or err}" + (f": {err.filename}" if err.filename else ""), file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    """Check ``args``, then run the command. The model libraries (transformers: seconds) are imported only by a command
    that loads a model, so a bad combination of options and ``info --switch`` answer without them."""
    warnings.simplefilter("ignore", FutureWarning)
    from lmswitch.cli.preflight import checked_before_loading, cmd_switch_card

    checked_before_loading(args)
    if args.command == "info" and args.switch:
        cmd_switch_card(args)
        return 0
    from transformers.utils import logging as hf_logging

    from lmswitch.cli.commands import run

    hf_logging.disable_progress_bar()  # "Loading weights" bars are noise on a command line
    run(args)
    return 0
