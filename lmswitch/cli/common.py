"""What every subcommand shares: reading inputs, finding switches by path or name, printing text or JSON."""

from __future__ import annotations

import argparse
import json
import sys

from lmswitch.core.parallel import is_main
from lmswitch.io.documents import read_document, read_lines


def read_examples(path: str, document: bool) -> str | list[str]:
    """One example per non-empty line, or the whole file as one document string, as ``train_switch`` takes one (.txt,
    .md, .html, .pdf, .docx)."""
    return read_document(path) if document else read_lines(path)


def text_arg(args: argparse.Namespace) -> str:
    """The text of ``--text``, or of the document named by ``--file``."""
    return read_document(args.file) if args.file else args.text


def log(msg: str) -> None:
    print(msg, file=sys.stderr)


def emit(args: argparse.Namespace, data: object, text: str) -> None:
    """Print ``data`` as JSON with ``--json``, else the human-readable ``text`` (under ``accelerate launch``: the main process)."""
    if is_main():
        print(json.dumps(data, indent=2, ensure_ascii=False) if args.json else text)

