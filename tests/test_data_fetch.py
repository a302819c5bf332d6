"""`reshuffle data fetch|verify` against a local mirror on 127.0.0.1 (never the internet)."""

import os
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.cli import main
from reshuffle.clients import data as data_mod
from reshuffle.clients.data import DataError, load_dataset
from reshuffle.clients.fetch import (SOURCES, ChecksumError, FetchError, check_base_url, fetch, source,
                                     verify)
from reshuffle.errors import ConfigError

SMALLEST = SOURCES["mnist"].files[0]  # t10k-labels, 4,542 bytes: the first file fetched


class Mirror:
    """What the local server serves: ``files`` maps a URL path to bytes.

    ``truncate``: paths sent half-way with the full Content-Length. ``length``:
    paths whose Content-Length is overridden (None: no header, close-delimited).
    """

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.truncate: set[str] = set()
        self.length: dict[str, int | None] = {}
        self.requests: list[str] = []
        self.url = ""

    def handler(self):
        mirror = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                mirror.requests.append(self.path)
                body = mirror.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                length = mirror.length.get(self.path, len(body))
                if length is not None:
                    self.send_header("Content-Length", str(length))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2] if self.path in mirror.truncate else body)

            def log_message(self, *args):
                pass

        return Handler


@pytest.fixture
def mirror():
    m = Mirror()
    server = ThreadingHTTPServer(("127.0.0.1", 0), m.handler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    m.url = f"http://127.0.0.1:{server.server_address[1]}/"
    yield m
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def mnist_mirror(mirror, dataset_dir):
    """The mirror serving the development copies of MNIST under /mnist/."""
    folder = dataset_dir("mnist")
    for f in SOURCES["mnist"].files:
        mirror.files[f"/mnist/{f.name}"] = (folder / f.name).read_bytes()
    mirror.url += "mnist/"
    return mirror


def files_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_fetch_downloads_verifies_and_is_idempotent(mnist_mirror, dataset_dir, tmp_path):
    # Prepare
    seen: dict[str, int] = {}
    # Execute
    first = fetch("mnist", tmp_path, mnist_mirror.url, on_bytes=lambda f, got: seen.__setitem__(f.name, got))
    requests_after_first = list(mnist_mirror.requests)
    second = fetch("mnist", tmp_path, mnist_mirror.url)
    # Assert
    assert [what for _, what in first] == ["downloaded"] * 4
    assert [what for _, what in second] == ["present"] * 4
    assert mnist_mirror.requests == requests_after_first == [f"/mnist/{f.name}" for f in SOURCES["mnist"].files]
    assert seen == {f.name: f.size for f in SOURCES["mnist"].files}
    for f in SOURCES["mnist"].files:
        assert (tmp_path / "mnist" / f.name).read_bytes() == (dataset_dir("mnist") / f.name).read_bytes()
    assert [c.status for c in verify("mnist", tmp_path)] == ["ok"] * 4
    assert files_in(tmp_path / "mnist") == sorted(f.name for f in SOURCES["mnist"].files)


def test_complete_copy_needs_no_network_nor_write_access(mnist_mirror, dataset_dir):
    # The development copies (read-only, linked into data/) are complete: nothing to do.
    result = fetch("mnist", dataset_dir("mnist").parent, mnist_mirror.url)
    assert [what for _, what in result] == ["present"] * 4 and mnist_mirror.requests == []


def test_interrupted_fetch_keeps_finished_files_only(mnist_mirror, tmp_path):
    # Prepare: Ctrl-C half-way through the second file.
    second = SOURCES["mnist"].files[1]

    def interrupt(f, got):
        if f == second and got > 0:
            raise KeyboardInterrupt

    # Execute
    with pytest.raises(KeyboardInterrupt):
        fetch("mnist", tmp_path, mnist_mirror.url, on_bytes=interrupt)
    # Assert: the first file is complete, the second left no trace; a rerun finishes the job.
    assert files_in(tmp_path / "mnist") == [SMALLEST.name]
    assert [what for _, what in fetch("mnist", tmp_path, mnist_mirror.url)] == ["present"] + ["downloaded"] * 3


def test_corrupted_copy_is_rejected_and_deleted(mnist_mirror, tmp_path):
    # Prepare: one byte flipped, same size, so only the checksum can tell.
    path = f"/mnist/{SMALLEST.name}"
    body = bytearray(mnist_mirror.files[path])
    body[100] ^= 0x01
    mnist_mirror.files[path] = bytes(body)
    # Execute / Assert
    with pytest.raises(ChecksumError, match=rf"{SMALLEST.name}: SHA-256 [0-9a-f]{{64}} differs from the known "
                                            rf"{SMALLEST.sha256}; the downloaded file was deleted"):
        fetch("mnist", tmp_path, mnist_mirror.url)
    assert files_in(tmp_path / "mnist") == []  # neither the file nor its temporary copy
    assert mnist_mirror.requests == [path]  # stops at the first bad file


def test_wrong_file_in_place_is_reported_then_replaced(mnist_mirror, dataset_dir, tmp_path):
    # Prepare: a complete folder in which one file has a flipped byte.
    folder = tmp_path / "mnist"
    folder.mkdir()
    for f in SOURCES["mnist"].files:
        (folder / f.name).write_bytes((dataset_dir("mnist") / f.name).read_bytes())
    bad = SOURCES["mnist"].files[1]
    body = bytearray((folder / bad.name).read_bytes())
    body[-1] ^= 0xFF
    (folder / bad.name).write_bytes(bytes(body))
    # Execute
    before = verify("mnist", tmp_path)
    result = fetch("mnist", tmp_path, mnist_mirror.url)
    # Assert
    assert [c.status for c in before] == ["ok", "mismatch", "ok", "ok"]
    assert before[1].detail.startswith("SHA-256 ") and before[1].detail.endswith(f"expected {bad.sha256}")
    assert [what for _, what in result] == ["present", "replaced", "present", "present"]
    assert mnist_mirror.requests == [f"/mnist/{bad.name}"]
    assert [c.status for c in verify("mnist", tmp_path)] == ["ok"] * 4


def test_truncated_download_leaves_nothing(mnist_mirror, tmp_path):
    mnist_mirror.truncate.add(f"/mnist/{SMALLEST.name}")
    with pytest.raises(FetchError, match=rf"stopped after {SMALLEST.size // 2} of {SMALLEST.size} bytes; "
                                         r"the partial file was deleted"):
        fetch("mnist", tmp_path, mnist_mirror.url)
    assert files_in(tmp_path / "mnist") == []


def test_wrong_announced_size_is_rejected_before_download(mnist_mirror, tmp_path):
    mnist_mirror.length[f"/mnist/{SMALLEST.name}"] = SMALLEST.size + 1
    with pytest.raises(FetchError, match=rf"announces {SMALLEST.size + 1} bytes, expected {SMALLEST.size}"):
        fetch("mnist", tmp_path, mnist_mirror.url)
    assert files_in(tmp_path / "mnist") == []


def test_oversized_answer_without_length_is_cut_off(mnist_mirror, tmp_path):
    # An endless or huge answer must not fill the disk: reading stops one byte past the size.
    path = f"/mnist/{SMALLEST.name}"
    mnist_mirror.files[path] += b"\0" * 10_000
    mnist_mirror.length[path] = None
    with pytest.raises(FetchError, match=rf"more than the expected {SMALLEST.size} bytes; nothing was saved"):
        fetch("mnist", tmp_path, mnist_mirror.url)
    assert files_in(tmp_path / "mnist") == []


def test_http_404_names_the_url(mirror, tmp_path):
    with pytest.raises(FetchError, match=rf"{mirror.url}nowhere/{SMALLEST.name}: HTTP 404"):
        fetch("mnist", tmp_path, mirror.url + "nowhere")
    assert files_in(tmp_path / "mnist") == []


def test_unreachable_server(tmp_path):
    # Prepare: a port nothing listens on.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Execute / Assert
    with pytest.raises(FetchError, match="cannot reach the server"):
        fetch("mnist", tmp_path, f"http://127.0.0.1:{port}/")


@pytest.mark.parametrize("url, why", [
    ("ftp://example.org/mnist/", "scheme must be http or https"),
    ("file:///etc/", "scheme must be http or https"),
    ("example.org/mnist", "scheme must be http or https"),
    ("http:///mnist/", "no host name"),
    ("http://example.org:99999/", "invalid port"),
    ("https://example.org/mnist/?x=1", "no query or fragment"),
])
def test_bad_base_url(url, why, tmp_path):
    with pytest.raises(ConfigError, match=why):
        fetch("mnist", tmp_path, url)
    assert not (tmp_path / "mnist").exists()  # rejected before touching the disk


@given(st.sampled_from(["http", "https"]), st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z]{2,5})?", fullmatch=True),
       st.lists(st.from_regex(r"[A-Za-z0-9._-]{1,10}", fullmatch=True), max_size=3), st.booleans())
@settings(max_examples=50, deadline=None)
def test_base_url_gets_one_trailing_slash(scheme, host, segments, slash):
    url = f"{scheme}://{host}/" + "/".join(segments) + ("/" if slash and segments else "")
    out = check_base_url(url)
    assert out.endswith("/") and not out.endswith("//") and out.rstrip("/") == url.rstrip("/")
    assert check_base_url(out) == out


@pytest.mark.parametrize("name, why", [("cifar", "unknown dataset 'cifar'; the downloadable ones are cifar10, "
                                                 "fashion-mnist, mnist"), ("digits", "embedded"),
                                       ("femnist", "no download: FEMNIST as LEAF's preprocess.sh writes it")])
def test_unknown_dataset(name, why, tmp_path):
    with pytest.raises(ConfigError, match=why):
        fetch(name, tmp_path)
    with pytest.raises(ConfigError, match=why):
        source(name)


def test_dir_not_writable(tmp_path):
    # A file where a folder should be: cannot be created, whoever runs the test.
    (tmp_path / "file").write_text("x")
    with pytest.raises(DataError, match=r"cannot write to .*file/mnist .*choose another folder with --dir"):
        fetch("mnist", tmp_path / "file", "http://127.0.0.1:9/")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits")
def test_read_only_dir(tmp_path):
    (tmp_path / "mnist").mkdir()
    (tmp_path / "mnist").chmod(0o500)
    try:
        with pytest.raises(DataError, match="cannot write to .*Permission denied"):
            fetch("mnist", tmp_path, "http://127.0.0.1:9/")
    finally:
        (tmp_path / "mnist").chmod(0o700)


def test_missing_dataset_error_names_both_ways(tmp_path, monkeypatch):
    # Prepare: an empty default root.
    monkeypatch.setattr(data_mod, "default_data_root", lambda: tmp_path / "data")
    # Execute / Assert: the default folder, then a --data-dir folder lacking files.
    with pytest.raises(DataError, match=r"mnist: data folder .*data/mnist does not exist; get it with "
                                        r"`reshuffle data fetch mnist` or pass --data-dir"):
        load_dataset("mnist")
    (tmp_path / "elsewhere" / "fashion-mnist").mkdir(parents=True)
    with pytest.raises(DataError, match=r"lacks train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
                                        r"t10k-images.*`reshuffle data fetch fashion-mnist --dir .*elsewhere` "
                                        r"or pass --data-dir"):
        load_dataset("fashion-mnist", tmp_path / "elsewhere" / "fashion-mnist")


def test_cli_fetch_then_verify(mnist_mirror, tmp_path, capsys):
    # Execute
    rc_fetch = main(["data", "fetch", "mnist", "--dir", str(tmp_path), "--url", mnist_mirror.url])
    fetched = capsys.readouterr()
    rc_ok = main(["data", "verify", "--dir", str(tmp_path)])
    verified = capsys.readouterr().out
    (tmp_path / "mnist" / SMALLEST.name).write_bytes(b"\x1f\x8b")
    rc_bad = main(["data", "verify", "mnist", "--dir", str(tmp_path)])
    broken = capsys.readouterr().out
    # Assert
    assert rc_fetch == 0 and fetched.out.count("downloaded ") == 4
    assert f"pass --data-dir {tmp_path / 'mnist'}" in fetched.out
    assert all(f.name in fetched.err for f in SOURCES["mnist"].files)  # the progress bar's lines
    assert rc_ok == 0 and verified.count("ok ") == 4 and "fashion-mnist" not in verified
    assert rc_bad == 1 and f"mismatch {tmp_path / 'mnist' / SMALLEST.name} (2 bytes, expected 4542)" in broken


@pytest.mark.parametrize("argv, message", [
    (["data", "fetch", "cifar", "--quiet"], "unknown dataset 'cifar'; the downloadable ones are cifar10, "
                                            "fashion-mnist, mnist"),
    (["data", "fetch", "mnist", "--url", "ftp://x/"], "--url 'ftp://x/': the scheme must be http or https"),
    (["data", "verify"], r"no dataset in .*; get one with `reshuffle data fetch cifar10\|fashion-mnist\|mnist` or "
                         "pass --data-dir"),
])
def test_cli_errors_are_one_line(argv, message, tmp_path, capsys):
    rc = main([*argv, "--dir", str(tmp_path / "empty")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert re.search(message, err), err


def _archive(members: dict[str, bytes], links: dict[str, str] = {}) -> bytes:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
        for name, target in links.items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buf.getvalue()


def test_archive_dataset_is_verified_then_unpacked_member_by_member(mirror, tmp_path):
    # Prepare: a dataset shipped as one archive (as CIFAR-10's binary version is), holding its two members, an
    # entry outside the folder and a link; a plug-in dataset declares the archive's checksum and its members.
    import hashlib

    from data_helpers import cifar10_records
    from reshuffle.clients.data import RemoteFile, Source, register_dataset

    rng = np.random.default_rng(0)
    bins = {f"batches/{n}": cifar10_records(rng.integers(0, 10, 2).astype(np.uint8), rng)[0] for n in ("a", "b")}
    body = _archive({**bins, "../escape.bin": b"x", "batches/extra.bin": b"y"}, links={"batches/link": "/etc/passwd"})
    mirror.files["/arch/data.tar.gz"] = body
    remote = RemoteFile("data.tar.gz", len(body), hashlib.sha256(body).hexdigest())
    register_dataset("test-fetch-archive", classes=10, input_shape=(3, 32, 32), source="an archive",
                     download=Source("test-fetch-archive", mirror.url + "arch/", (remote,), tuple(bins)))(
        lambda folder: None)
    # Execute
    first = fetch("test-fetch-archive", tmp_path)
    second = fetch("test-fetch-archive", tmp_path)
    # Assert: the archive checked, exactly the listed members written, nothing unpacked twice
    folder = tmp_path / "test-fetch-archive"
    assert [w for _, w in first] == ["downloaded", "unpacked", "unpacked"] and [w for _, w in second] == ["present"]
    assert {n: (folder / n).read_bytes() for n in bins} == bins
    assert sorted(p.name for p in (folder / "batches").iterdir()) == ["a", "b"]
    assert not (tmp_path / "escape.bin").exists() and files_in(folder) == ["batches", "data.tar.gz"]
    # A listed member that is a link, or absent, is refused.
    from reshuffle.clients.fetch import unpack

    with pytest.raises(FetchError, match="batches/link is not a regular file in the archive"):
        unpack(folder / "data.tar.gz", tmp_path / "out", ("batches/link",))
    with pytest.raises(FetchError, match="the archive lacks batches/c"):
        unpack(folder / "data.tar.gz", tmp_path / "out", ("batches/c",))
    assert not (tmp_path / "out" / "batches" / "link").exists()
