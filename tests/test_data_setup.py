"""scripts/setup.sh --data: development datasets linked into data/, the default path."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from reshuffle.clients.data import default_data_root

REPO = Path(__file__).resolve().parents[1]
SETUP = REPO / "scripts" / "setup.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def layout(tmp: Path, datasets=("mnist", "fashion-mnist")) -> Path:
    """A clone at tmp/repo with the development data beside it at tmp/shared/data."""
    (tmp / "repo" / "scripts").mkdir(parents=True)
    shutil.copy(SETUP, tmp / "repo" / "scripts" / "setup.sh")
    for name in datasets:
        (tmp / "shared" / "data" / name).mkdir(parents=True)
        (tmp / "shared" / "data" / name / "marker").write_text(name)
    return tmp / "repo"


def link_data(repo: Path, cwd: Path) -> str:
    done = subprocess.run(["bash", str(repo / "scripts" / "setup.sh"), "--data"], cwd=cwd, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_links_each_dataset_from_any_working_directory(tmp_path):
    # Prepare
    repo = layout(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # Execute: run from another folder, then again (idempotent).
    first = link_data(repo, cwd=elsewhere)
    second = link_data(repo, cwd=repo)
    # Assert: data/ is a real folder of per-dataset links that resolve.
    assert (repo / "data").is_dir() and not (repo / "data").is_symlink()
    for name in ("mnist", "fashion-mnist"):
        assert (repo / "data" / name).is_symlink()
        assert (repo / "data" / name / "marker").read_text() == name
    assert first.count("linked") == 2 and second == ""


def test_links_are_relative_and_survive_a_move(tmp_path):
    repo = layout(tmp_path / "a")
    link_data(repo, cwd=tmp_path)
    (tmp_path / "a").rename(tmp_path / "b")
    assert os.readlink(tmp_path / "b" / "repo" / "data" / "mnist") == "../../shared/data/mnist"
    assert (tmp_path / "b" / "repo" / "data" / "mnist" / "marker").read_text() == "mnist"


def test_a_users_download_is_left_alone_and_fetch_can_add_beside(tmp_path):
    # Prepare: the user already fetched fashion-mnist into data/; only mnist exists beside the repo.
    repo = layout(tmp_path, datasets=("mnist",))
    (repo / "data" / "fashion-mnist").mkdir(parents=True)
    (repo / "data" / "fashion-mnist" / "mine").write_text("user")
    # Execute
    link_data(repo, cwd=repo)
    # Assert
    assert not (repo / "data" / "fashion-mnist").is_symlink()
    assert (repo / "data" / "fashion-mnist" / "mine").read_text() == "user"
    assert (repo / "data" / "mnist").is_symlink()


def test_no_development_data_means_no_links(tmp_path):
    repo = layout(tmp_path, datasets=())
    assert link_data(repo, cwd=repo) == ""
    assert (repo / "data").is_dir() and list((repo / "data").iterdir()) == []


def test_default_path_is_the_repositorys_ignored_data_folder():
    assert default_data_root() == REPO / "data"
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(["git", "check-ignore", "-q", "data/mnist"], cwd=REPO)
    assert ignored.returncode == 0
