"""Where the datasets live: an explicit ``root``, an offline copy, or a download cache.

Resolution rules:

1. An explicit ``root`` is used as is, exactly as PyG would use it: if it already
   holds the raw files, PyG processes them offline; otherwise PyG downloads them.
2. With ``root=None`` and the environment variable :obj:`PYG_PRIVATE_DATA` set to a
   folder of offline raw files (laid out as PyG expects, e.g.
   ``$PYG_PRIVATE_DATA/Planetoid/Cora/raw``), the raw files of the requested dataset
   are **copied** into the writable cache (:obj:`PYG_PRIVATE_CACHE`, default
   ``~/.cache/pyg_private``) and PyG loads them from there. Nothing is ever written
   into :obj:`PYG_PRIVATE_DATA`.
3. With ``root=None`` and :obj:`PYG_PRIVATE_DATA` unset, the cache is the root and
   PyG downloads into it.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path

__all__ = ["DATA_ENV_VAR", "CACHE_ENV_VAR", "cache_dir", "data_dir", "resolve_root"]

#: Environment variable naming a read-only folder of offline raw files.
DATA_ENV_VAR = "PYG_PRIVATE_DATA"
#: Environment variable naming the writable cache (default ``~/.cache/pyg_private``).
CACHE_ENV_VAR = "PYG_PRIVATE_CACHE"

_DEFAULT_CACHE = "~/.cache/pyg_private"


def data_dir() -> Path | None:
    r"""Returns the offline data folder named by :obj:`PYG_PRIVATE_DATA`.

    Returns:
        pathlib.Path or None: The folder, or :obj:`None` if the variable is unset
        or empty.
    """
    value = os.environ.get(DATA_ENV_VAR, "")
    return Path(value).expanduser().resolve() if value else None


def cache_dir() -> Path:
    r"""Returns the writable cache folder.

    Returns:
        pathlib.Path: :obj:`PYG_PRIVATE_CACHE` if set and non-empty, else
        ``~/.cache/pyg_private``.
    """
    value = os.environ.get(CACHE_ENV_VAR, "") or _DEFAULT_CACHE
    return Path(value).expanduser().resolve()


def _is_within(path: Path, parent: Path) -> bool:
    path, parent = path.resolve(), parent.resolve()
    return path == parent or parent in path.parents


def _copy_raw_files(src: Path, dst: Path) -> bool:
    """Copies the plain files of ``src`` into ``dst``; returns whether any changed."""
    dst.mkdir(parents=True, exist_ok=True)
    changed = False
    for file in sorted(src.iterdir()):
        if not file.is_file():
            continue
        target = dst / file.name
        if target.is_file() and target.stat().st_size == file.stat().st_size:
            continue
        # Copy the bytes only (not the read-only mode of the shared files), through a
        # temporary name, so that a concurrent reader never sees a partial file.
        fd, tmp = tempfile.mkstemp(dir=dst, prefix=f".{file.name}.")
        os.close(fd)
        try:
            shutil.copyfile(file, tmp)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        changed = True
    return changed


def resolve_root(
    root: str | os.PathLike | None,
    *,
    collection: str,
    raw_subdir: str,
) -> str:
    r"""Returns the :obj:`root` to hand to a PyG dataset class.

    Args:
        root (str or os.PathLike, optional): An explicit root, returned unchanged. It
            must not lie inside :obj:`PYG_PRIVATE_DATA` (PyG would write its
            ``processed/`` folder there).
        collection (str): The folder, relative to :obj:`PYG_PRIVATE_DATA` and to the
            cache, that the PyG class takes as its root (e.g. :obj:`"Planetoid"`).
        raw_subdir (str): The raw folder relative to :obj:`collection` (e.g.
            :obj:`"Cora/raw"`).

    Returns:
        str: The root folder for the PyG dataset class.
    """
    offline = data_dir()
    if root is not None:
        root_path = Path(root).expanduser()
        if offline is not None and _is_within(root_path, offline):
            raise ValueError(
                f"`root` must not lie inside {DATA_ENV_VAR}={str(offline)!r}, which is "
                f"read-only shared data; got {str(root)!r}. Pass root=None to load a "
                "cached copy, or copy the folder elsewhere first")
        return str(root_path)

    cache = cache_dir()
    target_root = cache / collection
    if offline is None:
        return str(target_root)  # PyG downloads into the cache.

    if _is_within(cache, offline):
        raise ValueError(
            f"{CACHE_ENV_VAR}={str(cache)!r} must not lie inside "
            f"{DATA_ENV_VAR}={str(offline)!r}: nothing may be written into the data folder")
    src = offline / collection / raw_subdir
    if not src.is_dir():
        warnings.warn(
            f"{DATA_ENV_VAR} is set but {str(src)!r} does not exist; falling back to "
            f"PyG's download into {str(target_root)!r}", stacklevel=3)
        return str(target_root)

    dst = target_root / raw_subdir
    if _copy_raw_files(src, dst):
        # The raw files changed: whatever PyG processed from older ones is stale.
        processed = dst.parent / "processed"
        if processed.is_dir():
            shutil.rmtree(processed)
    return str(target_root)
