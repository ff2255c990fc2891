"""The on-disk cache (numbasparse.disk): location, atomic entries, bad files read as missing."""
import multiprocessing
import os
import subprocess
import sys

import pytest

from numbasparse import disk


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBASPARSE_CACHE", str(tmp_path))
    return tmp_path


def test_location_follows_numbasparse_cache_then_xdg_then_home(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBASPARSE_CACHE", str(tmp_path / "mine"))
    assert disk.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("NUMBASPARSE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert disk.cache_dir() == tmp_path / "xdg" / "numbasparse"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert disk.cache_dir() == tmp_path / "home" / ".cache" / "numbasparse"


def test_entry_round_trips_and_is_written_whole(cache):
    assert disk.load("kernels", "k", "key 1") is None
    assert disk.store("kernels", "k", "key 1", b"payload one")
    assert disk.load("kernels", "k", "key 1") == b"payload one"
    assert disk.load("kernels", "k", "key 2") is None
    assert [p.name for p in (cache / "kernels").iterdir() if p.name.endswith(".tmp")] == []


def test_cache_off_stores_and_loads_nothing(cache, monkeypatch):
    monkeypatch.setenv("NUMBASPARSE_CACHE", "off")
    assert disk.cache_dir() is None
    assert not disk.store("kernels", "k", "key", b"x")
    assert disk.load("kernels", "k", "key") is None
    assert list(cache.iterdir()) == []


@pytest.mark.parametrize("damage", ["truncate", "flip a byte", "empty", "other format", "garbage"])
def test_corrupt_file_reads_as_missing_and_is_rewritten(cache, damage):
    disk.store("kernels", "k", "key", b"payload" * 100)
    path = disk.entry_path("kernels", "k", "key")
    data = path.read_bytes()
    damaged = {"truncate": data[:-10], "flip a byte": data[:-5] + bytes([data[-5] ^ 1]) + data[-4:], "empty": b"",
               "other format": data.replace(b"entry 1", b"entry 9", 1), "garbage": os.urandom(500)}[damage]
    path.write_bytes(damaged)
    assert disk.load("kernels", "k", "key") is None
    assert disk.store("kernels", "k", "key", b"new")
    assert disk.load("kernels", "k", "key") == b"new"


def test_file_of_another_key_reads_as_missing(cache):
    disk.store("kernels", "k", "key A", b"A")
    disk.entry_path("kernels", "k", "key B").write_bytes(disk.entry_path("kernels", "k", "key A").read_bytes())
    assert disk.load("kernels", "k", "key B") is None


def test_unwritable_directory_is_not_an_error(tmp_path, monkeypatch):
    blocker = tmp_path / "a file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("NUMBASPARSE_CACHE", str(blocker))
    assert not disk.store("kernels", "k", "key", b"x")
    assert disk.load("kernels", "k", "key") is None


def test_entry_written_by_one_process_is_read_by_another(cache):
    code = "from numbasparse import disk; import sys; sys.exit(0 if disk.store('kernels', 'k', 'key', b'from a child') else 1)"
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ, NUMBASPARSE_CACHE=str(cache)))
    assert disk.load("kernels", "k", "key") == b"from a child"


def _write_many(directory, tag, rounds):
    os.environ["NUMBASPARSE_CACHE"] = directory
    for i in range(rounds):
        disk.store("kernels", "k", "shared key", tag * (1000 + i))


def test_concurrent_writers_never_leave_a_torn_entry(cache):
    tags = [bytes([65 + i]) for i in range(4)]
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_write_many, args=(str(cache), tag, 200)) for tag in tags]
    for w in writers:
        w.start()
    seen = set()
    while any(w.is_alive() for w in writers):
        payload = disk.load("kernels", "k", "shared key")
        if payload is not None:
            assert len(set(payload)) == 1 and payload[:1] in tags  # one writer's whole entry
            seen.add(payload[:1])
    for w in writers:
        w.join()
        assert w.exitcode == 0
    final = disk.load("kernels", "k", "shared key")
    assert final is not None and len(set(final)) == 1
    assert [p.name for p in (cache / "kernels").iterdir()] == [disk.entry_path("kernels", "k", "shared key").name]


def test_a_tuner_file_path_in_numbasparse_cache_means_its_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBASPARSE_CACHE", str(tmp_path / "tuned.json"))
    assert disk.cache_dir() == tmp_path


def test_no_home_directory_turns_the_cache_off(monkeypatch):
    from pathlib import Path

    monkeypatch.delenv("NUMBASPARSE_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert disk.cache_dir() is None
    assert disk.load("kernels", "k", "key") is None
