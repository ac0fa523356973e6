"""Which file system a directory is on, from the kernel's mount table
(``/proc/self/mountinfo``): an SQLite store must not live on a network file system,
where its locks and WAL's shared memory do not hold (SQLite's documentation: "How To
Corrupt An SQLite Database File", and "WAL does not work over a network filesystem").
"""

from __future__ import annotations

import os
from pathlib import Path

MOUNTINFO = "/proc/self/mountinfo"
#: file-system types (as the mount table names them) that are network file systems
NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "ceph", "glusterfs",
              "fuse.glusterfs", "fuse.sshfs", "9p", "afs", "gpfs", "beegfs")


def _unescape(field: str) -> str:
    """Mount points escape space, tab, newline and backslash as octal (``\\040``)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mounts(mountinfo: str | os.PathLike | None = None) -> list[tuple[str, str]]:
    """``(mount point, file-system type)`` of every mount in ``mountinfo``'s format
    (proc(5); default :data:`MOUNTINFO`); empty where it cannot be read."""
    try:
        text = Path(mountinfo or MOUNTINFO).read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        if after:
            out.append((_unescape(fields[4]), after[0]))
    return out


def fs_type(directory: str | os.PathLike,
            mountinfo: str | os.PathLike | None = None) -> str | None:
    """The file-system type of the mount that holds ``directory`` (the longest mount
    point above it), None where the table cannot be read."""
    d = os.path.realpath(directory)
    best: tuple[int, str] | None = None
    for point, kind in mounts(mountinfo):
        if d == point or d.startswith(point.rstrip("/") + "/") or point == "/":
            if best is None or len(point) >= best[0]:
                best = (len(point), kind)
    return best[1] if best else None


def network_fs(directory: str | os.PathLike,
               mountinfo: str | os.PathLike | None = None) -> str | None:
    """The network file system's type if ``directory`` is on one (``nfs4``), else None."""
    kind = fs_type(directory, mountinfo)
    return kind if kind in NETWORK_FS else None
