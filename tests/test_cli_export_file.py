"""``engrain export FILE`` writes the file whole or not at all (``cli/files.py``): a disk
that fills up or a store that fails mid-export leaves no truncated file and keeps an
earlier export of that name; a full disk is exit 3, a path the user can fix exit 2."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engrain import Engine
from engrain.errors import StoreError

from .conftest import make_settings
from .test_cli import Invoke, invoke, ok  # noqa: F401  (fixtures)

FACTS = ["I prefer tabs over spaces", "The deploy target is Kubernetes", "My cat is Miso"]


def seed(invoke: Invoke) -> None:  # noqa: F811
    for fact in FACTS:
        ok(invoke("remember", fact))


def test_an_export_that_fails_midway_leaves_the_earlier_file_and_no_other(
    invoke: Invoke,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seed(invoke)
    target = tmp_path / "out.jsonl"
    target.write_text("an earlier export\n", encoding="utf-8")
    real = Engine.export_records

    def failing(self: Engine, user_id: str | None = None) -> Iterator[dict[str, Any]]:
        records = real(self, user_id)
        yield next(records)
        yield next(records)
        raise StoreError("read from x.db failed: disk I/O error")

    monkeypatch.setattr(Engine, "export_records", failing)
    result = invoke("export", "--all-users", str(target))
    assert result.exit_code == 3 and "disk I/O error" in result.stderr
    assert target.read_text(encoding="utf-8") == "an earlier export\n"
    assert sorted(p.name for p in tmp_path.iterdir() if "out" in p.name) == ["out.jsonl"]


def test_an_export_the_disk_refuses_is_exit_3_and_leaves_no_file(
    invoke: Invoke,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seed(invoke)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    target = tmp_path / "out.jsonl"
    result = invoke("export", "--all-users", str(target))
    assert result.exit_code == 3
    assert "No space left on device (nothing written)" in result.stderr
    assert not [p for p in tmp_path.iterdir() if "out" in p.name]


def test_an_export_made_whole_has_every_record_and_the_files_usual_mode(
    invoke: Invoke,  # noqa: F811
    tmp_path: Path,
) -> None:
    seed(invoke)
    target = tmp_path / "out.jsonl"
    ok(invoke("export", "--all-users", str(target)))
    assert target.read_text(encoding="utf-8").count('"type": "memory"') == len(FACTS)
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir() if "out" in p.name) == ["out.jsonl"]


def test_an_export_to_a_really_full_tmpfs(tmp_path: Path) -> None:
    """The same on a tmpfs filled to its last byte (root only)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    mount = tmp_path / "mnt"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
                      capture_output=True, check=False).returncode:  # fmt: skip
        pytest.skip("mounting a tmpfs is not allowed here")
    try:
        env = {**os.environ, "ENGRAIN_EMBEDDER": "hash", "HOME": str(tmp_path),
               "ENGRAIN_DATA_DIR": str(tmp_path / "data")}  # fmt: skip
        url = f"sqlite:///{tmp_path / 'store.db'}"
        engine = Engine(url, settings=make_settings(tmp_path))
        for n in range(40):
            engine.remember(f"fact {n}: the ferry {n} leaves from pier {n % 9} " * 20, "u")
        engine.close()
        with (mount / "filler").open("wb", buffering=0) as filler, pytest.raises(OSError):
            while True:
                filler.write(b"\0" * 4096)
        target = mount / "out.jsonl"
        done = subprocess.run([sys.executable, "-m", "engrain.cli", "--url", url, "export",
                               "--all-users", str(target)],
                              env=env, capture_output=True, text=True, check=False)  # fmt: skip
        assert done.returncode == 3 and "No space left on device" in done.stderr
        assert sorted(p.name for p in mount.iterdir()) == ["filler"]
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_an_export_through_a_link_replaces_its_file_and_a_pipe_is_written_as_is(
    invoke: Invoke,  # noqa: F811
    tmp_path: Path,
) -> None:
    seed(invoke)
    real = tmp_path / "real.jsonl"
    real.write_text("old\n", encoding="utf-8")
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    ok(invoke("export", "--all-users", str(link)))
    assert link.is_symlink() and real.read_text(encoding="utf-8").count('"type"') == len(FACTS)
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    read: list[str] = []
    reader = threading.Thread(target=lambda: read.append(pipe.read_text(encoding="utf-8")))
    reader.start()
    ok(invoke("export", "--all-users", str(pipe)))
    reader.join(30)
    assert read and read[0].count('"type"') == len(FACTS) and pipe.is_fifo()


#: A writer of ``FILE`` (``cli/files.written``) that writes a line and then either kills
#: itself (SIGKILL: no handler runs, its temporary file stays) or, with ``wait``, says
#: "writing" and holds its file open until its stdin closes, then finishes.
WRITER = """
import os, signal, sys
from engrain.cli.files import written
with written(sys.argv[1]) as out:
    out.write("a line\\n")
    out.flush()
    if sys.argv[2] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    print("writing", flush=True)
    sys.stdin.read()
"""


def writer(target: Path, how: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(target), how], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip


def beside(target: Path) -> list[str]:
    return sorted(p.name for p in target.parent.iterdir() if p != target)


def test_the_next_export_removes_a_killed_exports_file_and_keeps_a_live_ones(
    invoke: Invoke,  # noqa: F811
    tmp_path: Path,
) -> None:
    seed(invoke)
    target = tmp_path / "exports" / "out.jsonl"
    target.parent.mkdir()
    other = target.parent / "out.jsonl.bak"  # another file's name that begins like it
    other.write_text("kept\n", encoding="utf-8")
    killed = writer(target, "kill")
    assert killed.wait() == -9
    left = [n for n in beside(target) if n != other.name]
    assert len(left) == 1 and left[0].startswith(".out.jsonl.")  # what SIGKILL leaves
    live = writer(target, "wait")
    assert live.stdout is not None and live.stdout.readline() == "writing\n"
    ok(invoke("export", "--all-users", str(target)))
    assert len(target.read_text(encoding="utf-8").splitlines()) == len(FACTS)
    # the killed export's file is gone; the one still being written is not
    assert len(beside(target)) == 2 and other.name in beside(target)
    live.communicate("")
    assert live.returncode == 0
    assert target.read_text(encoding="utf-8") == "a line\n"  # the live export finished whole
    assert beside(target) == [other.name]
