"""numbasparse's on-disk cache: where it lives, and entries written atomically and read back checked.

Location: ``$NUMBASPARSE_CACHE`` (a directory; ``off`` turns the cache off), else
``$XDG_CACHE_HOME/numbasparse``, else ``~/.cache/numbasparse``.  It holds the compiled CUDA
kernels (``kernels/``, see :mod:`numbasparse.cuda.launch`) and the tuner's schedules
(``tuned.json``, :mod:`numbasparse.select.tuner`).  Deleting the directory is always safe.

An entry is one file: a magic line, the SHA-256 of the rest, the entry's full key and its payload.
A file is written under a unique temporary name and renamed into place, so a reader sees a whole
entry or none, and two processes writing the same entry at once leave one of them.  A file that
several processes update (the tuner's JSON) is read, changed and written under a lock
(:func:`locked`), so no process's entry is lost.  A file that is
truncated, corrupt, of another format version or of another key (a hash collision, a foreign
file) reads as missing and is overwritten by the next write; nothing here raises on bad files or an
unwritable directory (the cache is then simply not used).

The CPU kernels use Numba's own cache (``numba.njit(cache=True)``: ``__pycache__`` beside the
sources, or Numba's user-wide directory where that is read-only; ``NUMBA_CACHE_DIR`` moves it).
"""
import contextlib
import hashlib
import logging
import os
import uuid
from pathlib import Path

#: First line of every entry file; a new format gets a new number (old files then read as missing).
MAGIC = b"numbasparse-cache-entry 1\n"
#: The value of ``$NUMBASPARSE_CACHE`` that turns the cache off.
OFF = "off"

log = logging.getLogger("numbasparse.disk")


def cache_dir():
    """The cache directory (a Path, maybe not yet created), or None when the cache is off (or no
    home directory can be found).  A ``$NUMBASPARSE_CACHE`` naming a ``.json`` file (its meaning
    before the kernel cache: the tuner's file) stands for the directory holding it."""
    configured = os.environ.get("NUMBASPARSE_CACHE", "")
    if configured.strip().lower() == OFF:
        return None
    if configured:
        path = Path(configured).expanduser()
        return path.parent if path.suffix == ".json" else path
    try:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    except (RuntimeError, KeyError):  # no $HOME and no passwd entry
        return None
    return Path(base) / "numbasparse"


def write_atomic(path, data):
    """Write the bytes ``data`` to ``path`` through a unique temporary file renamed into place.
    Returns False (and logs why) where it cannot be written; never raises OSError."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return True
    except OSError as exc:
        log.debug("cannot write %s: %s", path, exc)
        try:
            tmp.unlink()
        except OSError:
            pass
        return False


@contextlib.contextmanager
def locked(path):
    """Hold an exclusive lock on ``path``'s sibling lock file for a read-modify-write of ``path``
    (other processes doing the same wait); without a lock (no fcntl, an unwritable directory)
    the block runs unlocked, and a concurrent update may then be lost, never torn."""
    handle = None
    try:
        import fcntl

        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path.with_name(path.name + ".lock"), "a")
        fcntl.flock(handle, fcntl.LOCK_EX)
    except (ImportError, OSError) as exc:
        log.debug("no lock for %s: %s", path, exc)
    try:
        yield
    finally:
        if handle is not None:
            handle.close()  # (releases the lock)


def entry_path(section, name, key):
    """The file of entry ``key`` (a str) in ``section`` (a subdirectory), its file name readable
    from ``name``; None when the cache is off."""
    root = cache_dir()
    if root is None:
        return None
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    return root / section / f"{name}-{digest}.bin"


def store(section, name, key, payload):
    """Store the bytes ``payload`` as entry ``key`` of ``section``; False if not stored."""
    path = entry_path(section, name, key)
    if path is None:
        return False
    body = _frame(key, payload)
    return write_atomic(path, MAGIC + hashlib.sha256(body).digest() + body)


def load(section, name, key):
    """The payload stored as entry ``key`` of ``section``, or None (no entry, the cache off, or
    a file that is not a whole, intact entry of this key)."""
    path = entry_path(section, name, key)
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    head = len(MAGIC)
    if data[:head] != MAGIC or hashlib.sha256(data[head + 32:]).digest() != data[head:head + 32]:
        log.debug("ignoring corrupt cache file %s", path)
        return None
    body = data[head + 32:]
    key_bytes = key.encode()
    if body[:8] != len(key_bytes).to_bytes(8, "little") or body[8:8 + len(key_bytes)] != key_bytes:
        log.debug("ignoring cache file %s of another key", path)
        return None
    return body[8 + len(key_bytes):]


def _frame(key, payload):
    key_bytes = key.encode()
    return len(key_bytes).to_bytes(8, "little") + key_bytes + bytes(payload)
