"""Read uploaded documents (.txt, .md, .html, .pdf, .docx) as plain text, with actionable errors."""

from __future__ import annotations

import codecs
import logging
import re
import unicodedata
import zipfile
from pathlib import Path

from lmswitch.core.options import MAX_TEXT_CHARS

MAX_DOCUMENT_BYTES = 20 * 1024 * 1024
SUPPORTED = (".txt", ".md", ".markdown", ".html", ".htm", ".pdf", ".docx")
MAX_UNZIPPED_BYTES = 256 * 1024 * 1024  # a .docx whose parts unpack to more than this is refused (zip bomb)
_MB = 1024 * 1024
INSTEAD = "save its text as a .txt file (in the app, paste it) instead"  # what to do with a file that cannot be read
AS_UTF8 = "re-save it as UTF-8 (or, in the app, paste its text)"  # what to do with a text file in another encoding
_NOT_TEXT = {"Cc", "Cs", "Co", "Cn"}  # control, surrogate, private-use and unassigned characters: not in a text
_DROP_TAGS = ["script", "style", "noscript", "template"]
_BLOCK_TAGS = ["address", "article", "aside", "blockquote", "dd", "div", "dl", "dt", "figcaption", "figure", "footer",
               "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav", "ol", "p", "pre",
               "section", "table", "tr", "ul", "title", "caption"]


class DocumentError(ValueError):
    """A document that cannot be read as text; the message names the file and what to do."""


class TextTooLong(DocumentError):
    """A document with more text than its reader takes (``max_chars``), which a caller may word its own way."""


def _utf16_without_bom(raw: bytes) -> str | None:
    """Text saved as UTF-16 without a byte-order mark (Windows tools write it): in mostly Latin text the high byte of
    most characters is NUL, and few low bytes are; it must then decode to characters a text holds (no controls but
    whitespace, no surrogates, private-use or unassigned ones); else None (a binary file has NULs anywhere)."""
    if len(raw) % 2 or not raw:
        return None
    for codec, high, low in (("utf-16-le", raw[1::2], raw[0::2]), ("utf-16-be", raw[0::2], raw[1::2])):
        if high.count(0) >= len(high) / 2 and low.count(0) <= len(low) / 10:
            try:
                text = raw.decode(codec)
            except UnicodeDecodeError:
                return None
            return text if not any(unicodedata.category(ch) in _NOT_TEXT and ch not in "\t\n\r\f\v" for ch in text) else None
    return None


def _plain_text(raw: bytes, name: str) -> str:
    # UTF-32's little-endian mark begins with UTF-16's: it is looked for first
    for codec, marks in (("utf-32", (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)), ("utf-16", (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))):
        if raw.startswith(marks):
            try:
                return raw.decode(codec)
            except UnicodeDecodeError as err:
                raise DocumentError(f"{name} has a {codec.upper()} byte-order mark but is not valid {codec.upper()} "
                                    f"({err.reason} at byte {err.start}); {AS_UTF8}") from None
    if b"\x00" in raw:
        if (text := _utf16_without_bom(raw)) is not None:
            return text
        raise DocumentError(f"{name} looks binary (it contains NUL bytes); give a UTF-8 text file (if it is UTF-16 or UTF-32 "
                            f"text, {AS_UTF8})")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise DocumentError(f"{name} is not UTF-8 text ({err.reason} at byte {err.start}); "
                            f"{AS_UTF8}") from None


def _html_text(raw: bytes) -> str:
    from bs4 import BeautifulSoup, NavigableString

    soup = BeautifulSoup(raw, "html.parser")
    for tag in soup.find_all(_DROP_TAGS):
        tag.decompose()
    for s in soup.find_all(string=True):  # source line breaks are spaces in HTML, except in <pre>
        if type(s) is NavigableString and not s.find_parent("pre"):
            s.replace_with(re.sub(r"\s+", " ", s))
    for tag in soup.find_all("br"):
        tag.replace_with("\n")
    for tag in soup.find_all(["td", "th"]):
        tag.insert_after(" ")
    for tag in soup.find_all(_BLOCK_TAGS):
        tag.insert_before("\n")
        tag.insert_after("\n")
    lines = (line.strip() for line in soup.get_text().split("\n"))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines))


# what a file that is no PDF starts with, for its refusal (a PNG renamed .pdf was refused quoting the parser's
# "PdfStreamError: Stream has ended unexpectedly")
OTHER_KINDS = ((b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
               (b"PK\x03\x04", "a ZIP archive (a .docx is one)"), (b"{\\rtf", "an RTF document"))
PDF_HEADER_WITHIN = 1024  # bytes: a PDF's "%PDF-" may follow some junk, as readers allow


def _not_a_pdf(path: Path, name: str) -> str | None:
    """Why ``path`` is no PDF at all (no "%PDF-" near its start), naming what it looks like; None when it may be one."""
    with open(path, "rb") as f:
        head = f.read(PDF_HEADER_WITHIN)
    if b"%PDF-" in head:
        return None
    kind = next((what for magic, what in OTHER_KINDS if head.startswith(magic)), None)
    looks = f"it looks like {kind}" if kind else "it does not begin as PDF files do (%PDF-)"
    return f"{name} is not a PDF: {looks}. Give the document itself, or {INSTEAD}"


def _pdf_text(path: Path, name: str, max_chars: int) -> str:
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError

    if (why := _not_a_pdf(path, name)) is not None:
        raise DocumentError(why)
    pages: list[str] = []
    total = 0
    quiet, level = logging.getLogger("pypdf"), logging.getLogger("pypdf").level  # its warnings on a broken file are noise:
    quiet.setLevel(logging.ERROR)  # the file is read, or refused with the reason below
    try:
        reader = PdfReader(path)
        if reader.is_encrypted and not reader.decrypt(""):  # an owner-only password still opens with ""
            raise FileNotDecryptedError("a password is needed")
        for page in reader.pages:
            pages.append(page.extract_text() or "")
            total += len(pages[-1])
            if total > max_chars:  # refused below: no need to extract the rest
                break
    except (FileNotDecryptedError, DependencyError):  # DependencyError: AES without the cryptography package
        raise DocumentError(f"{name} is encrypted (password-protected); remove the protection, or {INSTEAD}") from None
    except Exception as err:  # a parser on untrusted bytes: any failure means a broken or unsupported file
        raise DocumentError(f"{name} could not be read as a PDF ({type(err).__name__}: {err}); "
                            f"is it corrupted? {INSTEAD[0].upper()}{INSTEAD[1:]}") from None
    finally:
        quiet.setLevel(level)
    text = "\n\n".join(p.strip("\n") for p in pages).replace("\x00", "")
    if not text.strip():
        raise DocumentError(f"{name} has no extractable text (is it a scanned image?); {INSTEAD}")
    return text


def _docx_text(path: Path, name: str) -> str:
    import docx
    from docx.table import Table

    def blocks(container) -> list[str]:
        out: list[str] = []
        for item in container.iter_inner_content():
            if isinstance(item, Table):
                for row in item.rows:
                    cells = list(dict.fromkeys(row.cells))  # merged cells repeat; keep each once, in order
                    out.append("\t".join(" ".join(blocks(c)).strip() for c in cells))
            else:
                out.append(item.text)
        return out

    bad = f"{name} is not a valid .docx (Word) file; re-save it as .docx, or {INSTEAD}"
    if not zipfile.is_zipfile(path):
        raise DocumentError(bad)
    try:
        with zipfile.ZipFile(path) as archive:
            if sum(info.file_size for info in archive.infolist()) > MAX_UNZIPPED_BYTES:
                raise DocumentError(f"{name} unpacks to more than {MAX_UNZIPPED_BYTES // _MB} MB; {INSTEAD}")
        return "\n".join(blocks(docx.Document(str(path))))
    except DocumentError:
        raise
    except Exception as err:  # a parser on untrusted bytes: any failure means a broken or unsupported file
        raise DocumentError(f"{bad} ({type(err).__name__}: {err})") from None


def read_document(path: str | Path, *, max_bytes: int = MAX_DOCUMENT_BYTES, name: str | None = None,
                  max_chars: int = MAX_TEXT_CHARS) -> str:
    """The text of a document; ``name`` (default: the path's name) is shown in errors and decides the format; a text
    longer than ``max_chars`` (the caller's limit) is refused."""
    p = Path(path).expanduser()
    shown = Path(name).name if name else p.name
    if not p.exists():
        raise DocumentError(f"file not found: {path}")
    if not p.is_file():
        raise DocumentError(f"{shown} is not a file (is it a folder?)")
    size = p.stat().st_size
    if size > max_bytes:
        raise DocumentError(f"{shown} is {size / _MB:.1f} MB; the limit is {max_bytes / _MB:g} MB; "
                            "split it, or keep the part you need")
    ext = Path(shown).suffix.lower()
    if ext not in SUPPORTED:
        kind = f"type {ext}" if ext else "type (no extension)"
        raise DocumentError(f"{shown}: unsupported file {kind}; supported: {', '.join(SUPPORTED)}")
    if ext == ".pdf":
        text = _pdf_text(p, shown, max_chars)
    elif ext == ".docx":
        text = _docx_text(p, shown)
    elif ext in (".html", ".htm"):
        text = _html_text(p.read_bytes())
    else:
        text = _plain_text(p.read_bytes(), shown)
    text = "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")).strip("\n")
    if not text.strip():
        raise DocumentError(f"{shown} is empty (no text found); give a file with some text")
    if len(text) > max_chars:
        raise TextTooLong(f"{shown} has more than {max_chars:,} characters of text; split it into parts, or keep the part "
                          "you need")
    return text


def split_lines(text: str) -> list[str]:
    """The non-empty lines of a text, stripped (one example per line)."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def read_lines(path: str | Path, **kw) -> list[str]:
    """The non-empty lines of a document, stripped (one example per line)."""
    return split_lines(read_document(path, **kw))
