"""Locks that die with their process, temporaries marked while they are written, their debris removed, and files
created with the user's umask."""

import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import make_tiny_run, subprocess_env

from numforge import atomic, locks
from numforge.data.parallel import ordered_map

pytestmark = pytest.mark.skipif(locks.fcntl is None, reason="no flock on this system: nothing is locked")


def test_a_second_taker_is_refused_at_once_by_name_and_the_lock_is_free_after_release(tmp_path):
    first = locks.DirectoryLock(tmp_path / "run", "run")
    with pytest.raises(locks.InUse, match=rf"^run {tmp_path / 'run'} is in use by process {os.getpid()} \(started 2"):
        locks.DirectoryLock(tmp_path / "run", "run")
    first.release()
    assert not (tmp_path / "run").exists()  # created by the lock, left empty: removed with it
    with locks.DirectoryLock(tmp_path / "runs" / "run-1", "run"):
        pass
    assert list(tmp_path.iterdir()) == []  # its parent too
    (tmp_path / "kept").mkdir()
    with locks.DirectoryLock(tmp_path / "kept"):
        assert (tmp_path / "kept" / locks.LOCK_FILE).read_text().startswith(f'{{"pid": {os.getpid()}, "host": ')
    assert (tmp_path / "kept").is_dir() and list((tmp_path / "kept").iterdir()) == []


HOLDER = """
import sys
from numforge.locks import DirectoryLock
lock = DirectoryLock(sys.argv[1], "run")
print("held", flush=True)
sys.stdin.read()
"""


def test_a_holder_killed_outright_leaves_the_lock_free(tmp_path):
    env = subprocess_env()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path / "run")], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout.readline() == b"held\n"
        with pytest.raises(locks.InUse, match=f"in use by process {holder.pid} "):
            locks.DirectoryLock(tmp_path / "run", "run")
    finally:
        holder.kill()
        holder.wait()
    assert (tmp_path / "run" / locks.LOCK_FILE).exists()  # left behind, unlocked
    with locks.DirectoryLock(tmp_path / "run", "run"):  # taken over
        assert f'"pid": {os.getpid()}' in (tmp_path / "run" / locks.LOCK_FILE).read_text()
    assert not (tmp_path / "run" / locks.LOCK_FILE).exists()


def test_the_message_names_the_host_of_a_holder_on_another_machine(tmp_path):
    with locks.DirectoryLock(tmp_path):
        (tmp_path / locks.LOCK_FILE).write_text('{"pid": 7, "host": "node-12", "started": "2030-01-02 03:04:05"}')
        with pytest.raises(locks.InUse, match=r"in use by process 7 on node-12 \(started 2030-01-02 03:04:05\)$"):
            locks.DirectoryLock(tmp_path)
        assert socket.gethostname() != "node-12"


class LockedInode:
    """In a worker: the inode of the file open as descriptor ``fd``, or None if the worker has it closed."""

    def __init__(self, fd):
        self.fd = fd

    def __call__(self, task):
        try:
            return os.fstat(self.fd).st_ino
        except OSError:
            return None


def test_forked_workers_do_not_share_the_locks_of_their_parent(tmp_path):
    lock = locks.DirectoryLock(tmp_path / "run")
    inode = os.fstat(lock.fd).st_ino
    assert inode not in set(ordered_map(LockedInode, (lock.fd,), range(4), workers=2))
    lock.release()


# ---------------------------------------------------------------- temporaries


def test_stale_temporaries_are_removed_and_live_ones_left_alone(tmp_path):
    (tmp_path / ".ckpt-00000003.0123abcd.tmp").mkdir()  # what writers killed outright leave
    (tmp_path / ".ckpt-00000003.0123abcd.tmp" / "params.npz").write_bytes(b"half")
    (tmp_path / ".loss.csv.89abcdef.tmp").write_text("step,")
    others = [".lock", "loss.csv", ".hidden", "x.tmp", ".x.tmp", ".x.0123abcz.tmp"]  # not numforge's temporaries
    for name in others:
        (tmp_path / name).write_text("kept")
    with atomic.atomic_path(tmp_path / "LATEST") as writing:  # a temporary being written now: locked
        removed = atomic.remove_stale_temporaries(tmp_path)
        assert writing.exists()
    assert sorted(p.name for p in removed) == [".ckpt-00000003.0123abcd.tmp", ".loss.csv.89abcdef.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*others, "LATEST"])


def test_only_the_named_destinations_temporaries_are_removed_when_a_name_is_given(tmp_path):
    for name in (".prepared.0123abcd.tmp", ".prepared.extra.0123abcd.tmp", ".other.0123abcd.tmp"):
        (tmp_path / name).mkdir()
    assert [p.name for p in atomic.remove_stale_temporaries(tmp_path, "prepared")] == [".prepared.0123abcd.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.0123abcd.tmp", ".prepared.extra.0123abcd.tmp"]


def test_a_directory_being_removed_is_never_seen_half_removed(tmp_path, monkeypatch):
    (tmp_path / "ckpt-00000002").mkdir()
    for name in ("params.npz", "optimizer.npz", "state.json"):
        (tmp_path / "ckpt-00000002" / name).write_text(name)

    def killed_midway(path, ignore_errors=False):
        next(Path(path).iterdir()).unlink()  # one file gone, then the process dies
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.shutil, "rmtree", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        atomic.remove_directory(tmp_path / "ckpt-00000002")
    monkeypatch.undo()
    assert not (tmp_path / "ckpt-00000002").exists()  # renamed away whole before any file went
    assert [p.name for p in atomic.remove_stale_temporaries(tmp_path)][0].startswith(".ckpt-00000002.")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- the umask


def modes(root: Path) -> dict[str, set[int]]:
    found = {"files": set(), "directories": set()}
    for path in [root, *root.rglob("*")]:
        found["directories" if path.is_dir() else "files"].add(stat.S_IMODE(path.stat().st_mode))
    return found


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_every_file_of_a_run_and_its_caches_has_the_mode_the_umask_gives(tmp_path, umask):
    previous = os.umask(umask)
    try:
        (tmp_path / "made").mkdir()
        make_tiny_run(tmp_path / "made")  # the run, its checkpoints, loss.csv, loss.png, the token and tokenizer caches
        with atomic.atomic_directory(tmp_path / "made" / "exported") as temp:
            (temp / "weights.bin").write_bytes(b"x")
    finally:
        os.umask(previous)
    assert modes(tmp_path / "made") == {"files": {0o666 & ~umask}, "directories": {0o777 & ~umask}}


def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path):
    atomic.write_text_atomic(tmp_path / "LATEST", "ckpt-00000001\n")
    with pytest.raises(KeyboardInterrupt):
        with atomic.atomic_path(tmp_path / "LATEST") as temp:
            temp.write_text("ckpt-0000")
            signal.raise_signal(signal.SIGINT)
    assert [p.name for p in tmp_path.iterdir()] == ["LATEST"]
    assert (tmp_path / "LATEST").read_text() == "ckpt-00000001\n"
