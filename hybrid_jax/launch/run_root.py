"""Where a sweep's runs can be written. A run directory needs a POSIX filesystem: its lock
is an ``flock`` (one trainer per run, ever) and every file is replaced by an atomic rename.
Object storage has neither, whether named by URL (``gs://``) or mounted through FUSE
(gcsfuse): a sweep there could train a run twice, so it is refused in one line with what
works instead. The checkpoints, the bulk of a run, can go to a bucket all the same
(``checkpoint.root``, ``hybrid_jax.run.checkpoints``): orbax needs neither lock nor rename."""

import os
from pathlib import Path

from hybrid_jax.errors import UserError

# FUSE filesystems over object storage: no flock across clients, renames copy.
OBJECT_STORE_FS = ("fuse.gcsfuse", "fuse.s3fs", "fuse.goofys", "fuse.rclone", "fuse.blobfuse",
                   "fuse.mountpoint-s3")
ALTERNATIVE = ("put --root on a shared POSIX filesystem mounted at the same path on every node "
               "(NFS, Filestore, Lustre; a local disk for one machine); a GCS bucket can still "
               "hold the checkpoints: --config.checkpoint.root=gs://BUCKET/PREFIX")


def mount_type(path: Path) -> str | None:
  """The filesystem type of the mount holding ``path`` (Linux /proc/mounts), or None."""
  try:
    mounts = [line.split() for line in open("/proc/mounts")]
  except OSError:
    return None
  path = os.path.realpath(path)
  best = None
  for fields in mounts:
    point = fields[1].replace("\\040", " ")
    if (path == point or path.startswith(point.rstrip("/") + "/")) and \
        (best is None or len(point) > len(best[0])):
      best = (point, fields[2])
  return best[1] if best else None


def check(root) -> Path:
  """``root`` as a Path, or one UserError line when runs cannot be written there."""
  text = str(root)
  if "://" in text:
    scheme = text.split("://", 1)[0]
    raise UserError(f"--root {text}: a {scheme}:// bucket cannot hold runs (a run's lock is a "
                    f"file lock and its files are renamed into place; object storage has "
                    f"neither); {ALTERNATIVE}")
  path = Path(root)
  existing = next((p for p in [path.absolute(), *path.absolute().parents] if p.exists()), None)
  kind = mount_type(existing) if existing is not None else None
  if kind in OBJECT_STORE_FS:
    raise UserError(f"--root {text} is on {kind} (object storage: no file locks across "
                    f"nodes, no atomic renames); {ALTERNATIVE}")
  return path
