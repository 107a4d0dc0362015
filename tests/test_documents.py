"""Reading uploaded documents: each format round trip, and clear refusals of bad files (no network)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from lmswitch.io import documents
from lmswitch.io.documents import MAX_DOCUMENT_BYTES, SUPPORTED, DocumentError, read_document, read_lines

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
PDF_HTML = """<html><body><h1>Quarterly notes</h1><p>The kind and warm one smiled.</p>
<p style="page-break-before: always">Second page: naïve café, “quoted”.</p></body></html>"""


@pytest.fixture(scope="module")
def pdfs(tmp_path_factory) -> dict[str, Path]:
    """Two PDFs printed by Debian's chromium: one with text over two pages, one with an empty body."""
    from playwright.sync_api import sync_playwright

    folder = tmp_path_factory.mktemp("pdf")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.set_content(PDF_HTML)
            page.pdf(path=folder / "notes.pdf")
            page.set_content("<html><body></body></html>")
            page.pdf(path=folder / "blank.pdf")
        finally:
            browser.close()
    return {"text": folder / "notes.pdf", "blank": folder / "blank.pdf"}


def _write(path: Path, data: str | bytes) -> Path:
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8", newline="")
    else:
        path.write_bytes(data)
    return path


def _refusal(path: Path, **kw) -> str:
    with pytest.raises(DocumentError) as err:
        read_document(path, **kw)
    return str(err.value)


# ---- round trips -------------------------------------------------------------------------------------------


def test_txt_normalises_newlines_bom_and_trailing_space(tmp_path):
    path = _write(tmp_path / "notes.txt", "\ufefffirst line  \r\nsecond line\rthird\n\n\n")
    assert read_document(path) == "first line\nsecond line\nthird"
    assert read_lines(path) == ["first line", "second line", "third"]


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be", "utf-32", "utf-32-be"])
def test_txt_accepts_utf16_and_utf32_with_bom(tmp_path, codec):
    """UTF-32's little-endian mark begins with UTF-16's: such a file was read as UTF-16 full of NULs, then refused."""
    raw = "naïve café\nzweite Zeile".encode(codec)
    if codec.endswith("-be"):  # the codec writes no mark of its own
        raw = "\ufeff".encode(codec) + raw
    assert read_document(_write(tmp_path / "u.txt", raw)) == "naïve café\nzweite Zeile"
    message = _refusal(_write(tmp_path / "cut.txt", raw[:-1]))
    assert "cut.txt" in message and f"{codec[:6].upper()} byte-order mark" in message and "UTF-8" in message


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
def test_txt_accepts_utf16_without_bom_and_binary_stays_refused(tmp_path, codec):
    """Without a byte-order mark (as some Windows tools save) it was called binary for its NUL bytes; no-break spaces,
    a soft hyphen and a CJK character (whose low byte is NUL) are text too."""
    text = "naïve café\r\nzweite Zeile, — und 42 € mehr.\tEnde. Prix\xa0: 3\u202f€, Zei\xadle, hello 一 world"
    assert read_document(_write(tmp_path / "u16.txt", text.encode(codec))) == text.replace("\r\n", "\n")
    for raw in (b"ab\x00\x01" * 8, b"\x00a\x00\x01" * 4, bytes(range(1, 9)) + b"\x00\x00"):  # NULs that are not UTF-16 text
        assert "binary" in _refusal(_write(tmp_path / "data.txt", raw))


def test_markdown_is_read_as_text(tmp_path):
    for ext in (".md", ".markdown"):
        path = _write(tmp_path / f"readme{ext}", "# Title\n\nSome *kind* words.\n- item\n")
        assert read_document(path) == "# Title\n\nSome *kind* words.\n- item"


def test_html_keeps_blocks_and_drops_scripts(tmp_path):
    html = """<!doctype html><html><head><title>Page</title><style>p { color: red }</style>
    <script>var secret = "do not show";</script></head><body><!-- a comment -->
    <h1>Warm   words</h1><p>The kind one
    was <b>happy</b>.</p><ul><li>first</li><li>second</li></ul>
    <table><tr><td>cell a</td><td>cell b</td></tr></table><noscript>enable js</noscript>
    <template>hidden</template>line one<br>line&nbsp;two</body></html>"""
    for ext in (".html", ".htm"):
        text = read_document(_write(tmp_path / f"page{ext}", html))
        for gone in ("secret", "do not show", "color", "a comment", "enable js", "hidden", "<"):
            assert gone not in text
        lines = read_lines(tmp_path / f"page{ext}")
        assert lines == ["Page", "Warm words", "The kind one was happy.", "first", "second", "cell a cell b", "line one", "line two"]
        assert "\n\n\n" not in text


def test_docx_paragraphs_and_table(tmp_path):
    import docx

    d = docx.Document()
    d.add_heading("Meeting notes", level=1)
    d.add_paragraph("The kind and warm one smiled.")
    table = d.add_table(rows=2, cols=2)
    for r, row in enumerate([["name", "mood"], ["Ada", "happy"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    d.add_paragraph("After the table.")
    d.save(tmp_path / "notes.docx")
    assert read_lines(tmp_path / "notes.docx") == ["Meeting notes", "The kind and warm one smiled.", "name\tmood", "Ada\thappy",
                                                   "After the table."]


@pytest.mark.browser  # the PDFs are printed by chromium
def test_pdf_printed_by_chromium(pdfs):
    text = read_document(pdfs["text"])
    assert "Quarterly notes" in text and "The kind and warm one smiled." in text
    assert "Second page: naïve café, “quoted”." in text
    assert "\n\n" in text.split("smiled.")[1]  # pages are joined by a blank line
    assert "\r" not in text and text == text.strip()


@pytest.mark.browser  # the PDFs are printed by chromium
def test_name_decides_the_format_of_an_extensionless_upload(tmp_path, pdfs):
    upload = _write(tmp_path / "tmpab12cd", pdfs["text"].read_bytes())
    assert "Quarterly notes" in read_document(upload, name="report.pdf")
    html = _write(tmp_path / "tmpxyz", "<p>hello <script>x()</script>world</p>")
    assert read_document(html, name="C:/uploads/page.HTML") == "hello world"
    message = _refusal(upload)
    assert "tmpab12cd" in message and "no extension" in message
    # the display name, not the temp path, is what the messages talk about
    assert _refusal(_write(tmp_path / "tmp999", b""), name="empty.txt").startswith("empty.txt is empty")


# ---- refusals ----------------------------------------------------------------------------------------------


def test_missing_file_and_folder(tmp_path):
    assert "not found" in _refusal(tmp_path / "nope.txt") and "nope.txt" in _refusal(tmp_path / "nope.txt")
    (tmp_path / "folder.txt").mkdir()
    assert "not a file" in _refusal(tmp_path / "folder.txt")


@pytest.mark.parametrize("content", [b"", b"   \n\t\r\n  ", b"\xef\xbb\xbf\n\n"])
def test_empty_and_whitespace_only(tmp_path, content):
    message = _refusal(_write(tmp_path / "blank.txt", content))
    assert message.startswith("blank.txt is empty")


def test_empty_html_and_docx(tmp_path):
    import docx

    assert "is empty" in _refusal(_write(tmp_path / "e.html", "<html><body><script>only()</script> </body></html>"))
    docx.Document().save(tmp_path / "e.docx")
    assert "is empty" in _refusal(tmp_path / "e.docx")


def test_binary_and_non_utf8_text(tmp_path):
    message = _refusal(_write(tmp_path / "data.txt", b"abc\x00\x01\x02"))
    assert "data.txt" in message and "binary" in message
    message = _refusal(_write(tmp_path / "latin.txt", "café".encode("latin-1")))
    assert "latin.txt" in message and "UTF-8" in message and "byte 3" in message
    assert "as a .txt file" not in message  # it is one: re-saving it as UTF-8 is the advice


def test_too_large_is_refused_with_sizes_in_mb(tmp_path):
    path = _write(tmp_path / "big.txt", "word " * 1000)
    message = _refusal(path, max_bytes=1024)
    assert "big.txt" in message and "MB" in message and "limit" in message
    assert read_document(path, max_bytes=5000).startswith("word word")


def test_sparse_file_over_the_limit_is_refused_without_reading(tmp_path, monkeypatch):
    path = tmp_path / "huge.pdf"
    with open(path, "wb") as f:
        f.truncate(21 * 1024 * 1024)
    assert path.stat().st_size > MAX_DOCUMENT_BYTES

    def no_reading(*args, **kwargs):
        raise AssertionError("the file was read")

    monkeypatch.setattr(Path, "read_bytes", no_reading)
    monkeypatch.setattr(documents, "_pdf_text", no_reading)
    start = time.perf_counter()
    message = _refusal(path)
    assert time.perf_counter() - start < 1.0
    assert "huge.pdf is 21.0 MB" in message and "limit is 20 MB" in message


@pytest.mark.parametrize("name", ["setup.exe", "photo.png", "data.csv", "README"])
def test_unsupported_extension(tmp_path, name):
    message = _refusal(_write(tmp_path / name, b"MZ\x90\x00 some bytes"))
    assert name in message and "unsupported" in message
    assert all(ext in message for ext in SUPPORTED)


@pytest.mark.parametrize(("name", "head", "said"), [("broken.pdf", b"%PDF-1.7\n", "corrupted"), ("broken.docx", b"", "not a valid .docx")])
def test_corrupted_pdf_and_docx(tmp_path, name, head, said):
    message = _refusal(_write(tmp_path / name, head + os.urandom(4096)))
    assert name in message and said in message


@pytest.mark.parametrize(("head", "said"), [(b"\x89PNG\r\n\x1a\n", "it looks like a PNG image"), (b"\xff\xd8\xff\xe0", "a JPEG image"),
                                           (b"PK\x03\x04", "a ZIP archive"), (b"hello there", "does not begin as PDF files do")])
def test_a_file_that_is_no_pdf_says_what_it_looks_like(tmp_path, head, said):
    """A PNG renamed .pdf was refused quoting the parser ("PdfStreamError: Stream has ended unexpectedly; is it corrupted?")."""
    message = _refusal(_write(tmp_path / "image.pdf", head + os.urandom(2048)))
    assert message.startswith("image.pdf is not a PDF") and said in message and "Error" not in message


@pytest.mark.browser  # the PDFs are printed by chromium
def test_truncated_pdf_and_zip_that_is_not_docx(tmp_path, pdfs):
    import zipfile

    data = pdfs["text"].read_bytes()
    assert "corrupted" in _refusal(_write(tmp_path / "half.pdf", data[: len(data) // 2]))
    with zipfile.ZipFile(tmp_path / "other.docx", "w") as z:
        z.writestr("hello.txt", "not a word document")
    assert "not a valid .docx" in _refusal(tmp_path / "other.docx")


@pytest.mark.browser  # the PDFs are printed by chromium
def test_pdf_without_text_looks_scanned(pdfs):
    message = _refusal(pdfs["blank"])
    assert "blank.pdf has no extractable text" in message and "scanned" in message


@pytest.mark.browser  # the PDFs are printed by chromium
def test_password_protected_pdf(tmp_path, pdfs):
    from pypdf import PdfWriter

    locked = PdfWriter(clone_from=pdfs["text"])
    locked.encrypt(user_password="secret", owner_password="owner", algorithm="RC4-128")
    locked.write(tmp_path / "locked.pdf")
    assert "password" in _refusal(tmp_path / "locked.pdf")
    owner_only = PdfWriter(clone_from=pdfs["text"])
    owner_only.encrypt(user_password="", owner_password="owner", algorithm="RC4-128")
    owner_only.write(tmp_path / "owner.pdf")
    assert "Quarterly notes" in read_document(tmp_path / "owner.pdf")


def test_too_much_extracted_text_is_refused_at_the_callers_limit(tmp_path):
    with pytest.raises(documents.TextTooLong, match="long.md has more than 100 characters of text") as err:
        read_document(_write(tmp_path / "long.md", "x" * 101), max_chars=100)
    assert isinstance(err.value, DocumentError)
    assert read_document(_write(tmp_path / "ok.md", "x" * 100), max_chars=100) == "x" * 100
    assert f"more than {documents.MAX_TEXT_CHARS:,}" in _refusal(_write(tmp_path / "huge.txt", "x" * (documents.MAX_TEXT_CHARS + 1)))


def test_document_error_is_a_value_error():
    assert issubclass(DocumentError, ValueError)
