"""OS errors (disk full, read-only file system, a path that is a file) as the CLI's one-line message."""
import errno
import re

_WHAT = {errno.ENOSPC: "disk full", errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
         errno.EEXIST: "exists and is not a folder", errno.ENOTDIR: "a path component is a file, not a folder",
         errno.EISDIR: "is a folder, not a file", errno.EDQUOT: "disk quota exceeded"}


def _untemp(name) -> str:
    """'DIR/.model.onnx.ab12cd34.tmp' (an atomic writer's temp file) -> 'DIR/model.onnx'."""
    return re.sub(r"(^|/)\.([^/]+)\.[A-Za-z0-9_]{8}\.tmp$", r"\1\2", str(name))


def oserror2line(e: OSError) -> str:
    """'cannot write PATH: disk full (No space left on device)' -- the path and the reason, one line."""
    what = _WHAT.get(e.errno)
    reason = e.strerror or str(e)
    if what and what.lower() != reason.lower():
        reason = "%s (%s)" % (what, reason)
    path = _untemp(e.filename) if e.filename is not None else ""
    if getattr(e, "filename2", None):
        path = str(e.filename2)           # a rename of our temp file onto the path at fault
    return ("%s: %s" % (path, reason) if path else reason).replace("\n", " ")


def usage2line(e) -> str:
    """A click usage error ('Missing option', 'Invalid value for --n') as one line naming the option and
    the command's --help."""
    msg = " ".join((e.format_message() if hasattr(e, "format_message") else str(e)).split())
    param = getattr(e, "param", None)
    name = "/".join(getattr(param, "opts", None) or []) or getattr(param, "name", None)
    opts = list(getattr(param, "opts", None) or [])
    if name and not any(o in msg for o in opts + [str(name)]):
        msg = "%s: %s" % (name, msg)
    ctx = getattr(e, "ctx", None)
    return msg + (" (see %s --help)" % ctx.command_path if ctx is not None else "")
