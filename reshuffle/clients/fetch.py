"""Download and verify the datasets that have a download (``reshuffle data``).

Each dataset's files land in ``<root>/<name>/``, the layout
:func:`reshuffle.clients.data.load_dataset` reads: MNIST's and Fashion-MNIST's
four gzip'd idx files, CIFAR-10's binary archive (unpacked into its six ``.bin``
files once verified). A download streams into a temporary file beside its
destination, is checked against the file's known size and SHA-256 (in
:mod:`reshuffle.clients.data`, computed from the published files, whose md5
sums are the datasets' own), and only then renamed into place: an interrupted or
corrupted download never leaves a file that looks complete. Files already in
place with the right checksum are not downloaded again. An archive is unpacked
member by member, only the regular files its :class:`Source` names, each
through a temporary file: no path from the archive is ever used.

Only the standard library talks to the network (``urllib``); ``rich`` draws the
progress bar.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from reshuffle.clients.data import (
    CIFAR10_SOURCE, FASHION_MNIST_SOURCE, MNIST_SOURCE, DataError, RemoteFile, Source, dataset_names, dataset_spec,
    default_data_root,
)
from reshuffle.errors import ConfigError

CHUNK = 1 << 16
TIMEOUT_S = 60.0


class FetchError(DataError):
    """A download failed: unreachable server, HTTP error, wrong or truncated content."""


class ChecksumError(FetchError):
    """A file's SHA-256 differs from the known one."""


#: The built-in downloads, by dataset.
SOURCES: dict[str, Source] = {s.dataset: s for s in (MNIST_SOURCE, FASHION_MNIST_SOURCE, CIFAR10_SOURCE)}

# (file, bytes received so far) after every chunk.
OnBytes = Callable[[RemoteFile, int], None]


@dataclass(frozen=True)
class FileCheck:
    """One file on disk: ``status`` is ``ok``, ``missing`` or ``mismatch``; ``detail`` says how it differs."""

    path: Path
    status: str
    detail: str = ""


def downloadable() -> list[str]:
    """The registered datasets that have a download."""
    return [n for n in dataset_names() if dataset_spec(n).download is not None]


def source(name: str) -> Source:
    """The download source of dataset ``name``; unknown names and datasets without one raise :class:`ConfigError`."""
    try:
        spec = dataset_spec(name)
    except ConfigError:
        raise ConfigError(f"unknown dataset {name!r}; the downloadable ones are {', '.join(downloadable())}") from None
    if spec.download is None:
        raise ConfigError(f"dataset {name!r} has no download: {spec.source}")
    return spec.download


def check_base_url(url: str) -> str:
    """Validate a base URL (``http``/``https``, a host, no query or fragment); return it ending in ``/``."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"--url {url!r}: the scheme must be http or https")
    if not parts.hostname:
        raise ConfigError(f"--url {url!r}: no host name")
    try:
        parts.port  # noqa: B018 - parsing the port validates it
    except ValueError:
        raise ConfigError(f"--url {url!r}: invalid port") from None
    if parts.query or parts.fragment:
        raise ConfigError(f"--url {url!r}: a base URL takes no query or fragment")
    return url if url.endswith("/") else url + "/"


def sha256_file(path: Path) -> str:
    """SHA-256 (hex) of a file's bytes."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_file(path: Path, expected: RemoteFile) -> FileCheck:
    """Compare one file on disk with its known size and SHA-256."""
    if not path.is_file():
        return FileCheck(path, "missing")
    size = path.stat().st_size
    if size != expected.size:
        return FileCheck(path, "mismatch", f"{size} bytes, expected {expected.size}")
    digest = sha256_file(path)
    if digest != expected.sha256:
        return FileCheck(path, "mismatch", f"SHA-256 {digest}, expected {expected.sha256}")
    return FileCheck(path, "ok")


def verify(name: str, root: str | Path | None = None) -> list[FileCheck]:
    """Check the downloaded files of dataset ``name`` in ``<root>/<name>/`` (default root: ``data/``)."""
    folder = _root(root) / source(name).dataset
    return [check_file(folder / f.name, f) for f in source(name).files]


def fetch(name: str, root: str | Path | None = None, base_url: str | None = None,
          on_bytes: OnBytes | None = None) -> list[tuple[RemoteFile, str]]:
    """Download what is missing or wrong of dataset ``name`` into ``<root>/<name>/``.

    Parameters
    ----------
    name : str
        A dataset with a download (:func:`downloadable`).
    root : str or Path, optional
        Data root; default :func:`~reshuffle.clients.data.default_data_root`.
    base_url : str, optional
        Mirror holding the dataset's files; default the dataset's public source.
    on_bytes : callable, optional
        Called with (file, bytes so far) while downloading (progress display).

    Returns
    -------
    list of (RemoteFile, str)
        Each file with ``"present"`` (already there, checksum ok),
        ``"downloaded"`` or ``"replaced"`` (it was there with a wrong checksum);
        then each member unpacked from an archive, ``"unpacked"`` (a
        :class:`RemoteFile` of size 0 and no checksum: the archive's was checked).

    Raises
    ------
    ConfigError
        Unknown dataset or malformed base URL.
    DataError
        The destination folder cannot be created or written.
    FetchError, ChecksumError
        A download failed or its content is wrong; nothing is left in its place.
    """
    src = source(name)
    base = check_base_url(base_url if base_url is not None else src.base_url)
    folder = _root(root) / src.dataset
    created = _missing_folders(folder)
    try:
        return _fetch(src, base, folder, on_bytes)
    except BaseException:
        # A failed fetch (offline, say) leaves no empty folder behind that it created.
        for d in created:
            try:
                d.rmdir()
            except OSError:
                break  # not empty, or not ours to remove
        raise


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and those of its parents that do not exist yet, innermost first."""
    out = []
    while not folder.exists() and folder != folder.parent:
        out.append(folder)
        folder = folder.parent
    return out


def _fetch(src, base: str, folder: Path, on_bytes: OnBytes | None) -> list[tuple[RemoteFile, str]]:
    before = [check_file(folder / f.name, f) for f in src.files]
    if any(c.status != "ok" for c in before):
        # Only now: a complete copy in a read-only folder is fine as it is.
        _writable_folder(folder)
    done = []
    for f, check in zip(src.files, before):
        if check.status == "ok":
            done.append((f, "present"))
            continue
        download(base + f.name, folder / f.name, f, on_bytes)
        done.append((f, "downloaded" if check.status == "missing" else "replaced"))
    if src.members and (any(what != "present" for _, what in done)
                        or not all((folder / m).is_file() for m in src.members)):
        _writable_folder(folder)
        done += [(RemoteFile(m, 0, ""), "unpacked") for m in unpack(folder / src.files[0].name, folder, src.members)]
    return done


def unpack(archive: Path, folder: Path, members: tuple[str, ...]) -> list[str]:
    """Extract the regular files ``members`` of a ``.tar.gz`` archive to ``folder / member``, atomically each.

    Only the names listed are read, and only as regular files: links, devices and
    unlisted entries are never written, and no path from the archive is used.
    """
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for name in members:
                try:
                    entry = tar.getmember(name)
                except KeyError:
                    raise FetchError(f"{archive}: the archive lacks {name}") from None
                if not entry.isfile():
                    raise FetchError(f"{archive}: {name} is not a regular file in the archive")
                dest = folder / name
                dest.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(entry) as src, _temp_beside(dest) as (tmp, out):
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
                    out.close()
                    os.replace(tmp, dest)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise FetchError(f"{archive}: cannot unpack it ({exc})") from None
    return list(members)


def download(url: str, dest: Path, expected: RemoteFile, on_bytes: OnBytes | None = None) -> None:
    """Fetch ``url`` into ``dest``, atomically, only if it has ``expected``'s size and SHA-256."""
    with _temp_beside(dest) as (tmp, out):
        h, got = hashlib.sha256(), 0
        with _open(url, expected) as response:
            # One byte past the expected size is enough to reject an oversized answer.
            while chunk := response.read(min(CHUNK, expected.size + 1 - got)):
                out.write(chunk)
                h.update(chunk)
                got += len(chunk)
                if on_bytes is not None:
                    on_bytes(expected, got)
                if got > expected.size:
                    raise FetchError(f"{url}: the server sent more than the expected {expected.size} bytes; "
                                     f"nothing was saved")
        if got < expected.size:
            raise FetchError(f"{url}: the download stopped after {got} of {expected.size} bytes; "
                             f"the partial file was deleted")
        if h.hexdigest() != expected.sha256:
            raise ChecksumError(f"{url}: SHA-256 {h.hexdigest()} differs from the known {expected.sha256}; "
                                f"the downloaded file was deleted")
        out.close()
        os.replace(tmp, dest)


@contextmanager
def _open(url: str, expected: RemoteFile) -> Iterator[http.client.HTTPResponse]:
    """An HTTP response for ``url``, with every failure as a :class:`FetchError` naming it."""
    try:
        response = urllib.request.urlopen(url, timeout=TIMEOUT_S)  # noqa: S310 - scheme checked
    except urllib.error.HTTPError as exc:
        raise FetchError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise FetchError(f"{url}: cannot reach the server ({exc.reason})") from None
    except (OSError, http.client.HTTPException) as exc:
        raise FetchError(f"{url}: {exc}") from None
    with response:
        announced = response.headers.get("Content-Length")
        if announced is not None and announced.isdigit() and int(announced) != expected.size:
            raise FetchError(f"{url}: the server announces {announced} bytes, expected {expected.size}; "
                             f"wrong file or mirror")
        try:
            yield response
        except (OSError, http.client.HTTPException) as exc:
            raise FetchError(f"{url}: the download failed ({exc}); the partial file was deleted") from None


@contextmanager
def _temp_beside(dest: Path):
    """A temporary file in ``dest``'s folder, removed unless it was renamed to ``dest``."""
    fd, name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            yield tmp, out
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def progress_bar(console=None) -> Iterator[OnBytes]:
    """A rich progress bar, one line per file; yields the ``on_bytes`` callback for :func:`fetch`.

    The bar starts with the first byte received, so a fetch that finds every file
    in place, or fails before downloading, draws nothing.
    """
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                               TransferSpeedColumn)

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
               TimeRemainingColumn())
    bar = Progress(*columns, console=console)
    tasks: dict[str, int] = {}

    def on_bytes(f: RemoteFile, got: int) -> None:
        if not tasks:
            bar.start()
        if f.name not in tasks:
            tasks[f.name] = bar.add_task(f.name, total=f.size)
        bar.update(tasks[f.name], completed=got)

    try:
        yield on_bytes
    finally:
        if tasks:
            bar.stop()


def _root(root: str | Path | None) -> Path:
    return default_data_root() if root is None else Path(root)


def _writable_folder(folder: Path) -> Path:
    """Create ``folder`` if needed and check that a file can be created in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        raise DataError(f"cannot write to {folder} ({reason}); choose another folder with --dir") from None
    return folder
