r"""One ledger for every process of a job: :class:`PersistentPrivacyAccountant`, kept in a SQLite file.

.. code-block:: python

    acct = PersistentPrivacyAccountant("ledger.sqlite", budget={"local": 1.0})
    transform = LaplaceFeaturePerturb(1.0, feature_range=(0, 1), accountant=acct)
    loader = DataLoader(dataset, num_workers=2)   # the workers open the same file
    print(acct.report())                          # what every process spent, read from the file

An in-memory :class:`~pyg_private.accounting.PrivacyAccountant` belongs to one process, and a copy
in a ``DataLoader`` worker, a forked child or a spawned rank refuses to charge
(:class:`~pyg_private.accounting.LedgerProcessError`). This accountant is shared for real: it
pickles as its path, and every process that receives it (``DataLoader`` workers, ``fork`` and
``spawn`` children, ``torch.multiprocessing.spawn`` ranks) opens the same file. It keeps every
guarantee of the in-memory one (it *is* one, kept equal to the file), and adds:

* **every registration is one transaction** (``BEGIN IMMEDIATE``, SQLite in WAL mode): the
  events other processes committed are read, the budget is checked against all of them, and
  the event is inserted, under the database's write lock. Two processes can therefore never
  both pass a budget check that only one of them fits;
* **durable**: a registration returns only once committed (``synchronous=FULL``: the commit is
  on disk). A process killed at any instant (``kill -9``) leaves every committed registration in
  the file and no partial one; reopening the file resumes the ledger exactly;
* **readable at any time**: :meth:`report`, :meth:`epsilon`, :attr:`events`, :meth:`state_dict`
  first read what other processes committed (WAL readers never block the writer);
* **only grows**: nothing removes an event. :meth:`load_state_dict` imports a saved ledger into
  an empty file, and accepts one that the file already holds (a checkpoint being resumed);
* **re-release guards across processes**: the noisy transforms record, with each release, a
  keyed fingerprint of the input they released (:class:`ReleaseClaim`), in the same transaction;
  a copy of the transform in another process is then refused a second release of the same input.
  The fingerprints' key lives in a separate file, ``<path>.guard-key`` (mode 0600), so that the
  ledger file reveals nothing about the data; keep the key file with the data. Without it the
  fingerprints cannot be checked (the ledger then refuses new guarded releases rather than
  forget them).

The file is for the processes of **one machine** (SQLite's WAL needs shared memory; network file
systems are not supported). Across machines, let ``torch.distributed`` rank 0 own the ledger, as
the layers of :mod:`pyg_private.distributed` do.

Reading a file written by others replays its new events one by one, exactly as
:meth:`PrivacyAccountant.from_state_dict` does; events are stored once each, as the JSON of
:meth:`PrivacyEvent.to_dict`, the same serialisation as :meth:`PrivacyAccountant.state_dict`.
Each registration is one row (which event, its parallel part, the process id and the time).
A registration costs one fsync (a few milliseconds on a local disk).

The parallel groups are shared through the file, but the members announced to their parts
(``part(i, batch)``) stay in the memory of the process that announced them (they can reveal
edges): the overlap check compares the parts announced in one process.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import sqlite3
import threading
import time
import weakref
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, NamedTuple, Optional

import numpy as np

from .accountant import PrivacyAccountant, _check_budget, _Run
from .errors import LedgerProcessError
from .events import PrivacyEvent
from .local_ledger import LocalLedger
from .parallel import ParallelGroup, check_group_name, check_part_key
from .units import Unit, as_unit

__all__ = ["PersistentPrivacyAccountant", "ReleaseClaim"]

_FORMAT = "pyg_private.PersistentPrivacyAccountant"
_VERSION = 1
_KEY_BYTES = 32
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, digest TEXT NOT NULL UNIQUE, event TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ledger (seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id INTEGER NOT NULL REFERENCES events(id), count INTEGER NOT NULL, grp TEXT, part TEXT,
    pid INTEGER NOT NULL, time REAL NOT NULL);
CREATE TABLE IF NOT EXISTS parallel_groups (name TEXT PRIMARY KEY, closed INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS releases (scope TEXT NOT NULL, digest BLOB NOT NULL, num_nodes INTEGER NOT NULL,
    nodes BLOB NOT NULL, PRIMARY KEY (scope, digest));
"""

#: open accountants, so that a forked child drops the connections and locks it inherited
_OPEN: "weakref.WeakSet[PersistentPrivacyAccountant]" = weakref.WeakSet()
#: connections inherited through fork: never used and never closed in the child (closing one
#: could checkpoint or remove the WAL under the parent's feet; SQLite forbids using them)
_INHERITED: list[sqlite3.Connection] = []


def _after_fork_in_child() -> None:
    for acct in list(_OPEN):
        acct._forget_connection()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class ReleaseClaim(NamedTuple):
    """What a re-release guard records with a release in a shared ledger (see
    :meth:`PersistentPrivacyAccountant.register`).

    Attributes:
        scope (str): whose guard: a random id of one noisy transform, shared by its copies
            (pickled into workers, deep-copied).
        parts (tuple): what identifies the released input: public shapes and a checksum of the
            private data. Only a keyed BLAKE2b digest of them is stored.
        nodes (numpy.ndarray): boolean, one entry per row of the input: the rows released.
        enforce (bool): refuse when one of ``nodes`` was released before under the same digest
            (``False``: record only, e.g. for ``allow_recompose=True``).
        message (str): the refusal's text; ``{count}`` is replaced by the number of rows
            released before.
    """

    scope: str
    parts: tuple
    nodes: np.ndarray
    enforce: bool = True
    message: str = "this input was already released ({count} rows)"


def _canonical(event: PrivacyEvent) -> tuple[str, str]:
    """The event's JSON (as in ``state_dict``) and its SHA-256."""
    text = json.dumps(event.to_dict(), sort_keys=True)
    return text, hashlib.sha256(text.encode()).hexdigest()


def _encode_part(part: Any) -> Optional[str]:
    return None if part is None else json.dumps(part)


def _decode_part(text: Optional[str]) -> Any:
    return None if text is None else check_part_key(json.loads(text))


def _reopen(path: str, timeout: float) -> "PersistentPrivacyAccountant":
    return PersistentPrivacyAccountant(path, create=False, timeout=timeout)


class PersistentPrivacyAccountant(PrivacyAccountant):
    r"""A :class:`PrivacyAccountant` kept in a SQLite file that every process of a job opens.

    Args:
        path (str or os.PathLike): the ledger file (created when missing, with its ``-wal`` and
            ``-shm`` companions). Stored as an absolute path: a worker with another working
            directory opens the same file.
        budget (Mapping, optional): as for :class:`PrivacyAccountant`. Stored in the file when it
            is created; opening an existing file with a different budget raises (change it with
            :meth:`set_budget`). ``None`` takes the file's.
        conversion (str, optional), pld (bool, optional): as for :class:`PrivacyAccountant`; fixed
            when the file is created (``None``: the file's, or the defaults for a new file).
        create (bool, optional): create the file when it does not exist. (default: :obj:`True`;
            the copies that workers unpickle use :obj:`False`)
        timeout (float, optional): seconds to wait for another process's transaction.
            (default: ``60``)

    It pickles, deep-copies and ``torch.save``\ s as its path; every copy is another handle on
    the same file, in any process. Budgets are enforced before noise, across processes. See
    :mod:`pyg_private.accounting.persistent_ledger` for the guarantees and the file layout.
    """

    #: registrations may carry a :class:`ReleaseClaim` (checked in the same transaction)
    records_releases = True

    def __init__(self, path: str | os.PathLike, budget: Mapping[str | Unit, Any] | None = None, *,
                 conversion: Optional[str] = None, pld: Optional[bool] = None, create: bool = True,
                 timeout: float = 60.0) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"`path` must be a file path; got {type(path).__name__}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"`timeout` must be a positive number of seconds; got {timeout!r}")
        if not isinstance(create, bool):
            raise TypeError(f"`create` must be True or False; got {create!r}")
        super().__init__(budget=budget, conversion=conversion or "balle", pld=True if pld is None else pld)
        wanted = {"budget": self._budget if budget is not None else None,
                  "conversion": conversion, "pld": pld}
        self.path = os.path.abspath(os.fspath(path))
        self._timeout = float(timeout)
        self._conn: Optional[sqlite3.Connection] = None
        self._conn_pid = -1
        self._key: Optional[bytes] = None
        self._events_by_id: dict[int, PrivacyEvent] = {}
        self._digest_of_id: dict[int, str] = {}
        self._id_of_digest: dict[str, int] = {}
        self._recent: Optional[tuple[PrivacyEvent, int]] = None
        self._reset_memory()
        if not create and not os.path.exists(self.path):
            raise FileNotFoundError(f"no privacy ledger at {self.path!r} (it was opened elsewhere and has been "
                                    "removed since); refusing to start an empty one in its place")
        self._open(wanted)
        _OPEN.add(self)

    # ------------------------------------------------------------------ file
    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False)
            deadline = time.monotonic() + self._timeout
            while True:
                try:
                    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                    break
                except sqlite3.OperationalError as e:  # another process is switching a new file to WAL
                    if "locked" not in str(e) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)
            if str(mode).lower() != "wal":
                conn.close()
                raise ValueError(f"the privacy ledger {self.path!r} cannot use SQLite's WAL mode (journal mode "
                                 f"{mode!r}; network file systems are not supported): put it on a local disk")
            conn.execute("PRAGMA synchronous=FULL")  # a returned registration is on disk
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.DatabaseError as e:
            raise ValueError(f"{self.path!r} is not a usable privacy ledger ({e})") from e
        return conn

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None or self._conn_pid != os.getpid():
            if self._conn is not None:  # inherited: leave it alone (see _INHERITED)
                _INHERITED.append(self._conn)
            self._conn = self._connect()
            self._conn_pid = os.getpid()
        return self._conn

    def _forget_connection(self) -> None:
        """In a forked child: a fresh lock and connection, and the ledger re-read from the file
        (the parent's threads may have been half-way through anything)."""
        self._lock = threading.RLock()
        if self._conn is not None:
            _INHERITED.append(self._conn)
        self._conn = None
        self._reset_memory()

    def close(self) -> None:
        """Close this handle's connection (another call reopens it)."""
        with self._lock:
            if self._conn is not None and self._conn_pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __enter__(self) -> "PersistentPrivacyAccountant":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @contextmanager
    def _transaction(self, write: bool) -> Iterator[sqlite3.Connection]:
        """One transaction, holding the in-process lock; a read inside another transaction of
        this handle joins it. Rolled back on any error."""
        with self._lock:
            conn = self._connection()
            if conn.in_transaction:
                if write:  # pragma: no cover - every writer is outermost
                    raise RuntimeError("nested write transaction on a privacy ledger")
                yield conn
                return
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def _open(self, wanted: dict[str, Any]) -> None:
        with self._transaction(write=True) as conn:
            for statement in filter(str.strip, _SCHEMA.split(";")):
                conn.execute(statement)
            fresh = {"format": _FORMAT, "version": str(_VERSION), "conversion": self.conversion,
                     "pld": json.dumps(self.pld), "budget": json.dumps(self._budget_json(self._budget)),
                     "generation": "0"}
            for key, value in fresh.items():
                conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES (?, ?)", (key, value))
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            if meta.get("format") != _FORMAT:
                raise ValueError(f"{self.path!r} is an SQLite file but not a pyg_private privacy ledger")
            if int(meta["version"]) != _VERSION:
                raise ValueError(f"the privacy ledger {self.path!r} has version {meta['version']}; this pyg_private "
                                 f"reads version {_VERSION}")
            stored = self._budget_of_json(meta["budget"])
            if wanted["budget"] is not None and wanted["budget"] != stored:
                raise ValueError(
                    f"the privacy ledger {self.path!r} has the budget {self._budget_json(stored)}, not "
                    f"{self._budget_json(wanted['budget'])}. Open it without `budget=` to use the file's, or change "
                    "it for every process with set_budget()")
            for key in ("conversion", "pld"):
                if wanted[key] is not None and json.dumps(wanted[key]) != json.dumps(json.loads(
                        meta[key]) if key == "pld" else meta[key]):
                    raise ValueError(f"the privacy ledger {self.path!r} was created with {key}={meta[key]}; got "
                                     f"{key}={wanted[key]!r}")
            self.conversion = meta["conversion"]
            self.pld = bool(json.loads(meta["pld"]))
            self._pull(conn)

    @staticmethod
    def _budget_json(budget: Mapping[Unit, tuple[float, float]]) -> dict[str, list[float]]:
        return {u.value: [float(b[0]), float(b[1])] for u, b in sorted(budget.items(), key=lambda kv: kv[0].value)}

    @staticmethod
    def _budget_of_json(text: str) -> dict[Unit, tuple[float, float]]:
        out = {}
        for key, (eps, delta) in json.loads(text).items():
            unit = as_unit(key, argument="budget key")
            out[unit] = _check_budget(unit, (eps, delta))
        return out

    # ------------------------------------------------------------ the memory
    def _reset_memory(self) -> None:
        self._runs = []
        self._num_events = 0
        self._central = {}
        self._local = LocalLedger()
        self._groups = {}
        self._members = {}  # the parts' announced members: this process's, in memory only
        self._candidates = {}
        self._generation = -1
        self._last_seq = 0

    def _event_of_id(self, conn: sqlite3.Connection, event_id: int) -> PrivacyEvent:
        event = self._events_by_id.get(event_id)
        if event is None:
            row = conn.execute("SELECT digest, event FROM events WHERE id = ?", (event_id,)).fetchone()
            if row is None:
                raise ValueError(f"the privacy ledger {self.path!r} names event {event_id}, which it does not hold")
            event = PrivacyEvent.from_dict(json.loads(row[1]))
            self._events_by_id[event_id] = event
            self._digest_of_id[event_id] = row[0]
            self._id_of_digest[row[0]] = event_id
        return event

    def _pull(self, conn: sqlite3.Connection) -> None:
        """Bring the memory up to the file (inside a transaction): budget, groups, new events."""
        generation = int(conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
        if generation == self._generation:
            return
        budget = self._budget_of_json(conn.execute("SELECT value FROM meta WHERE key = 'budget'").fetchone()[0])
        groups = conn.execute("SELECT name, closed FROM parallel_groups ORDER BY rowid").fetchall()
        names = {name for name, _ in groups}
        runs: list[_Run] = []
        last = self._last_seq
        for seq, event_id, count, grp, part in conn.execute(
                "SELECT seq, event_id, count, grp, part FROM ledger WHERE seq > ? ORDER BY seq", (self._last_seq,)):
            event, part = self._event_of_id(conn, event_id), _decode_part(part)
            if grp is not None and grp not in names:
                raise ValueError(f"the privacy ledger {self.path!r} charges parallel group {grp!r}, which it does not "
                                 "list")
            if runs and runs[-1].event is event and runs[-1].group == grp and runs[-1].part == part:
                runs[-1] = runs[-1]._replace(count=runs[-1].count + count)
            else:
                runs.append(_Run(event, count, grp, part))
            last = seq
        # everything is read and checked: now change the memory (nothing below can fail)
        self._budget = budget
        for name in [n for n in self._groups if n not in names]:  # closed empty elsewhere: no trace left
            del self._groups[name]
        for name, _ in groups:
            if name not in self._groups:
                self._groups[name] = ParallelGroup(check_group_name(name))
        before = len(self._runs)
        self._replay(runs)
        if before and len(self._runs) > before:  # one run across the boundary, as _commit would keep it
            a, b = self._runs[before - 1], self._runs[before]
            if a.event is b.event and a.group == b.group and a.part == b.part:
                self._runs[before - 1:before + 1] = [a._replace(count=a.count + b.count)]
        for name, closed in groups:
            if closed and not self._groups[name].closed:
                self._groups[name] = self._groups[name].close()
        self._candidates = {}
        self._last_seq = last
        self._generation = generation

    @staticmethod
    def _bump(conn: sqlite3.Connection) -> int:
        conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")
        return int(conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])

    def _store_event(self, conn: sqlite3.Connection, event: PrivacyEvent) -> tuple[int, Optional[tuple[str, int]]]:
        """The event's id in the file (inserted when new); the second item is the digest to cache
        after the commit."""
        if self._recent is not None and (self._recent[0] is event or self._recent[0] == event):
            return self._recent[1], None
        text, digest = _canonical(event)
        event_id = self._id_of_digest.get(digest)
        if event_id is None:
            row = conn.execute("SELECT id FROM events WHERE digest = ?", (digest,)).fetchone()
            event_id = row[0] if row is not None else conn.execute(
                "INSERT INTO events(digest, event) VALUES (?, ?)", (digest, text)).lastrowid
        return event_id, (digest, event_id)

    def _remember(self, event: PrivacyEvent, event_id: int, new: Optional[tuple[str, int]]) -> None:
        if new is not None:
            digest, _ = new
            self._id_of_digest[digest] = event_id
            self._digest_of_id[event_id] = digest
            self._events_by_id.setdefault(event_id, event)
        self._recent = (event, event_id)

    # ----------------------------------------------------------- ownership
    def _ownership_error(self) -> LedgerProcessError | None:
        return None  # every process that opens the file shares it

    def adopt(self, *, any_rank: bool = False) -> "PersistentPrivacyAccountant":
        """Nothing to do: every process that opens the file owns the ledger together."""
        return self

    # ----------------------------------------------------------- recording
    def register(self, event: PrivacyEvent, *, partition: tuple[str, Any] | None = None,
                 claim: Optional[ReleaseClaim] = None) -> PrivacyEvent:
        """Record one release in the file, in one transaction; call it **before** drawing noise.

        As :meth:`PrivacyAccountant.register`, and checked against every event any process has
        committed. ``claim`` (a :class:`ReleaseClaim`, from a re-release guard) is checked and
        recorded in the same transaction: a release of rows the same guard already released of
        the same input raises ``ValueError`` (when ``claim.enforce``), before the budget is
        checked and before anything is recorded.
        """
        if not isinstance(event, PrivacyEvent):
            raise TypeError(f"expected a PrivacyEvent; got {type(event).__name__}")
        nodes = None if claim is None else self._check_claim(claim)
        target = self._resolve_partition(partition)
        # one lock across the transaction and the memory's update: a parallel part's membership check and its
        # record (in memory) cannot interleave with another thread's
        with self._lock:
            with self._transaction(write=True) as conn:
                self._pull(conn)
                if claim is not None:
                    digest, merged = self._claim(conn, claim, nodes)
                change, _ = self._prospective(event, target, charging=True)  # overlapping parts refused here
                stored = None if event.unit is Unit.LOCAL else target
                event_id, new = self._store_event(conn, event)
                seq = conn.execute(
                    "INSERT INTO ledger(event_id, count, grp, part, pid, time) VALUES (?, 1, ?, ?, ?, ?)",
                    (event_id, None if stored is None else stored[0],
                     None if stored is None else _encode_part(stored[1]), os.getpid(), time.time())).lastrowid
                if claim is not None:
                    conn.execute("INSERT OR REPLACE INTO releases(scope, digest, num_nodes, nodes) VALUES (?, ?, ?, ?)",
                                 (claim.scope, digest, int(merged.size), np.packbits(merged).tobytes()))
                generation = self._bump(conn)
            # committed: the memory follows (nothing here can fail)
            self._commit(event, change, stored)
            self._remember(event, event_id, new)
            self._last_seq, self._generation = seq, generation
        return event

    @staticmethod
    def _check_claim(claim: Any) -> np.ndarray:
        if not isinstance(claim, ReleaseClaim):
            raise TypeError(f"`claim` must be a ReleaseClaim or None; got {type(claim).__name__}")
        nodes = np.asarray(claim.nodes)
        if nodes.dtype != np.bool_ or nodes.ndim != 1:
            raise ValueError("`claim.nodes` must be a 1-D boolean array (one entry per row of the input)")
        if not isinstance(claim.scope, str) or not claim.scope:
            raise ValueError("`claim.scope` must be a non-empty string")
        return nodes

    def _guard_key(self, conn: sqlite3.Connection) -> bytes:
        """The key of the fingerprints, from ``<path>.guard-key``; created (inside the write
        transaction, so by one process only) when the file holds no fingerprint yet."""
        if self._key is not None:
            return self._key
        key_path = self.path + ".guard-key"
        try:
            with open(key_path, "rb") as f:
                key = f.read()
        except FileNotFoundError:
            if conn.execute("SELECT 1 FROM releases LIMIT 1").fetchone() is not None:
                raise ValueError(
                    f"the key of the re-release fingerprints, {key_path!r}, is missing, but the ledger holds "
                    "fingerprints made with it: without it they cannot be checked, and a release they would refuse "
                    "could pass. Restore the key file next to the ledger (or release with allow_recompose=True, "
                    "charged again)") from None
            key = secrets.token_bytes(_KEY_BYTES)
            fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, key)
                os.fsync(fd)
            finally:
                os.close(fd)
        if len(key) != _KEY_BYTES:
            raise ValueError(f"{key_path!r} is not a key of the re-release fingerprints ({len(key)} bytes)")
        self._key = key
        return key

    def _claim(self, conn: sqlite3.Connection, claim: ReleaseClaim, nodes: np.ndarray) -> tuple[bytes, np.ndarray]:
        """Check ``claim`` against the file; the digest and the rows released after it."""
        key = self._guard_key(conn)
        digest = hashlib.blake2b(repr((claim.scope, claim.parts)).encode(), key=key, digest_size=16).digest()
        row = conn.execute("SELECT num_nodes, nodes FROM releases WHERE scope = ? AND digest = ?",
                           (claim.scope, digest)).fetchone()
        if row is None:
            return digest, nodes
        prev = np.unpackbits(np.frombuffer(row[1], dtype=np.uint8), count=row[0]).astype(bool)
        if prev.size != nodes.size:  # the digest covers the shape: only a collision gets here
            raise ValueError("a re-release fingerprint of a different size matched; refusing")
        count = int((prev & nodes).sum())
        if count and claim.enforce:
            raise ValueError(claim.message.format(count=count)
                             + f" (recorded in the shared privacy ledger {self.path!r})")
        return digest, prev | nodes

    def check(self, event: PrivacyEvent, *, partition: tuple[str, Any] | None = None) -> float | None:
        target = self._resolve_partition(partition)
        with self._transaction(write=False) as conn:
            self._pull(conn)
            return self._prospective(event, target)[1]

    check.__doc__ = PrivacyAccountant.check.__doc__

    def set_budget(self, unit: str | Unit, budget: tuple[float, float] | float | None) -> None:
        """Set (or with ``None`` remove) the budget of ``unit`` in the file, for every process.
        Past spending is not refunded."""
        unit = as_unit(unit)
        checked = None if budget is None else _check_budget(unit, budget)
        with self._transaction(write=True) as conn:
            self._pull(conn)
            new = dict(self._budget)
            if checked is None:
                new.pop(unit, None)
            else:
                new[unit] = checked
            conn.execute("UPDATE meta SET value = ? WHERE key = 'budget'", (json.dumps(self._budget_json(new)),))
            generation = self._bump(conn)
        self._budget, self._generation = new, generation

    # ----------------------------------------------------- parallel groups
    def _open_group(self, name: str | None) -> str:
        with self._transaction(write=True) as conn:
            self._pull(conn)
            name = PrivacyAccountant._open_group(self, name)  # validates against the file's groups
            try:
                conn.execute("INSERT INTO parallel_groups(name, closed) VALUES (?, 0)", (name,))
                generation = self._bump(conn)
            except BaseException:
                del self._groups[name]
                raise
        self._generation = generation
        return name

    def _close_group(self, name: str) -> None:
        with self._transaction(write=True) as conn:
            self._pull(conn)
            group = self._groups.get(name)
            if group is None or group.closed:
                return
            if group.num_events == 0:
                conn.execute("DELETE FROM parallel_groups WHERE name = ?", (name,))
            else:
                conn.execute("UPDATE parallel_groups SET closed = 1 WHERE name = ?", (name,))
            generation = self._bump(conn)
        PrivacyAccountant._close_group(self, name)
        self._generation = generation

    # -------------------------------------------------------------- queries
    def _read(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        with self._transaction(write=False) as conn:
            self._pull(conn)
            return method(self, *args, **kwargs)

    @property
    def budget(self) -> dict[str, tuple[float, float]]:
        """The budgets, ``{unit: (epsilon, delta)}``, as the file holds them."""
        return self._read(PrivacyAccountant.budget.fget)

    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        """All events the file holds, in order."""
        return self._read(PrivacyAccountant.events.fget)

    @property
    def parallel_groups(self) -> dict[str, dict[str, Any]]:
        return self._read(PrivacyAccountant.parallel_groups.fget)

    def events_of(self, unit: str | Unit) -> tuple[PrivacyEvent, ...]:
        return self._read(PrivacyAccountant.events_of, unit)

    def __len__(self) -> int:
        return self._read(PrivacyAccountant.__len__)

    def epsilon(self, unit: str | Unit, delta: float | None = None) -> float:
        return self._read(PrivacyAccountant.epsilon, unit, delta)

    def get_epsilon(self, delta: float, *args: Any, unit: str | Unit | None = None) -> float:
        return self._read(PrivacyAccountant.get_epsilon, delta, *args, unit=unit)

    def pure_epsilon(self, unit: str | Unit) -> float:
        return self._read(PrivacyAccountant.pure_epsilon, unit)

    def node_epsilons(self, delta: float = 0.0):
        return self._read(PrivacyAccountant.node_epsilons, delta)

    def composition(self, unit: str | Unit, delta: float | None = None):
        return self._read(PrivacyAccountant.composition, unit, delta)

    def report(self, delta: float | Mapping[str, float] | None = None):
        return self._read(PrivacyAccountant.report, delta)

    def state_dict(self) -> dict[str, Any]:
        """The file's whole ledger in :meth:`PrivacyAccountant.state_dict`'s format (load it into an
        in-memory accountant with :meth:`PrivacyAccountant.from_state_dict`)."""
        return self._read(PrivacyAccountant.state_dict)

    def _planned_epsilon(self, *args: Any, **kwargs: Any) -> float:
        return self._read(PrivacyAccountant._planned_epsilon, *args, **kwargs)

    def _partition_floor(self, *args: Any, **kwargs: Any) -> float:
        return self._read(PrivacyAccountant._partition_floor, *args, **kwargs)

    def _check_group_open(self, name: str) -> ParallelGroup:
        return self._read(PrivacyAccountant._check_group_open, name)

    def _group_parts(self, name: str) -> list[Any]:
        return self._read(PrivacyAccountant._group_parts, name)

    # ------------------------------------------------------------ persistence
    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> "PrivacyAccountant":
        raise TypeError("a persistent ledger lives in a file: open it with PersistentPrivacyAccountant(path) and "
                        "import a saved ledger with .load_state_dict(state)")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Import a ledger saved by :meth:`PrivacyAccountant.state_dict` into the file.

        A persistent ledger only grows: the state is imported when the file holds no event yet
        (with its budget, unless the file has a different one: that raises), and accepted
        unchanged when the file's ledger already begins with it (a checkpoint being resumed:
        the file keeps what was spent since, the safe side). Anything else raises
        ``ValueError`` and changes nothing. The file's ``conversion`` and ``pld`` stay.
        """
        self._adopt(PrivacyAccountant.from_state_dict(state))

    def _adopt(self, other: PrivacyAccountant) -> None:
        if isinstance(other, PersistentPrivacyAccountant):
            other = PrivacyAccountant.from_state_dict(other.state_dict())
        runs, groups = list(other._runs), dict(other._groups)
        texts: dict[int, tuple[str, str]] = {}
        theirs = []
        for run in runs:
            text, digest = texts.setdefault(id(run.event), _canonical(run.event))
            theirs += [(digest, run.group, run.part)] * run.count
        with self._transaction(write=True) as conn:
            self._pull(conn)
            known = {id(e): self._digest_of_id[i] for i, e in self._events_by_id.items()}
            mine = []
            for run in self._runs:
                digest = known.get(id(run.event)) or _canonical(run.event)[1]
                mine += [(digest, run.group, run.part)] * run.count
            if mine and mine[:len(theirs)] == theirs:
                return  # the file already holds this ledger (and perhaps what was spent since)
            if mine:
                raise ValueError(f"the privacy ledger {self.path!r} holds {len(mine)} events that the state does not "
                                 "begin with; a persistent ledger only grows and cannot be replaced. Import into a "
                                 "new file")
            if other._budget and self._budget and other._budget != self._budget:
                raise ValueError(f"the state's budget {self._budget_json(other._budget)} differs from the ledger "
                                 f"file's {self._budget_json(self._budget)}")
            if other._budget:
                conn.execute("UPDATE meta SET value = ? WHERE key = 'budget'",
                             (json.dumps(self._budget_json(other._budget)),))
            for name, group in groups.items():
                conn.execute("INSERT INTO parallel_groups(name, closed) VALUES (?, ?)", (name, int(group.closed)))
            now = time.time()
            for run in runs:
                digest_text = texts[id(run.event)]
                row = conn.execute("SELECT id FROM events WHERE digest = ?", (digest_text[1],)).fetchone()
                event_id = row[0] if row is not None else conn.execute(
                    "INSERT INTO events(digest, event) VALUES (?, ?)", (digest_text[1], digest_text[0])).lastrowid
                conn.execute("INSERT INTO ledger(event_id, count, grp, part, pid, time) VALUES (?, ?, ?, ?, ?, ?)",
                             (event_id, run.count, run.group, _encode_part(run.part), os.getpid(), now))
            self._bump(conn)
            self._reset_memory()
            self._pull(conn)

    def __reduce__(self):
        return (_reopen, (self.path, self._timeout))

    def __getstate__(self) -> dict[str, Any]:  # pragma: no cover - __reduce__ is used
        raise TypeError("PersistentPrivacyAccountant pickles as its path")

    def __repr__(self) -> str:
        with self._transaction(write=False) as conn:
            self._pull(conn)
            budget = ", ".join(f"{u.value}={b}" for u, b in self._budget.items())
            n = self._num_events
        return (f"PersistentPrivacyAccountant({self.path!r}, events={n}" + (f", budget={{{budget}}}" if budget else "")
                + ")")


for _name in ("events_of", "epsilon", "get_epsilon", "pure_epsilon", "node_epsilons", "composition", "report",
              "parallel_groups"):
    getattr(PersistentPrivacyAccountant, _name).__doc__ = getattr(PrivacyAccountant, _name).__doc__
del _name
