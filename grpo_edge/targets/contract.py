"""The deploy contract every target shares: options, profiles, output folders.

    from grpo_edge.targets.contract import deploy_into_folder
    report = deploy_into_folder(build, "rpi4", checkpoint="best.pt", out_dir="out/rpi4", options={})

- Options: each family module (``grpo_edge.targets.<family>``) lists the keys it takes in ``OPTIONS``;
  an unknown key fails before any work, naming the key and the allowed ones.
- Profiles: a target is found from its profile's data (``family: jetson``), never from its name.
- Output folders: a deploy builds into a staging folder next to ``--out`` and publishes it at the end
  (``os.replace``), so a failed deploy leaves nothing half-written. The published folder holds
  ``MANIFEST.sha256`` (``sha256sum -c`` format) listing what deploy generated. A later deploy into the
  same folder replaces a generated file only when it still matches the manifest; a file the user edited
  is kept and the new version is written next to it as ``NAME.new``. A non-empty folder without a
  manifest is refused unless ``force``. Files are readable by everyone (0644; scripts 0755).
"""
import hashlib
import importlib
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Dict, List

from grpo_edge.errors import GrpoEdgeError, TargetError

MANIFEST = "MANIFEST.sha256"
SCRIPT_SUFFIXES = (".sh", ".py")
TEXT_SUFFIXES = (".json", ".md", ".txt")


# --- profiles and options -------------------------------------------------------------------------------

def family_module(profile: dict):
    """The module that deploys a profile's family (``grpo_edge.targets.<family>``)."""
    family = str(profile.get("family", ""))
    if not re.match(r"^[a-z][a-z0-9_]*$", family):
        raise TargetError("target %s has no deploy pipeline (family %r)" % (profile.get("name"), family))
    try:
        return importlib.import_module("grpo_edge.targets." + family)
    except ModuleNotFoundError as e:
        if e.name != "grpo_edge.targets." + family:
            raise
        raise TargetError("target %s has no deploy pipeline (family %r)" % (profile.get("name"), family))


def family_profile(profile, family: str, what: str) -> dict:
    """A profile name (or a load_profile() dict) -> the profile dict, which must be of `family`; the error
    names the family in words (`what`, e.g. "a Raspberry Pi") and the profiles that are of it."""
    from grpo_edge.targets.profiles import list_profiles, load_profile
    if not isinstance(profile, dict):
        profile = load_profile(profile)            # unknown target -> lists the known ones
    if profile.get("family") != family:
        names = [n for n in list_profiles() if load_profile(n).get("family") == family]
        raise TargetError("target %s is not %s (%s)" % (profile.get("name"), what, ", ".join(names)))
    return profile


def check_options(profile: dict, options: dict, allowed) -> None:
    """Unknown option keys fail, naming the key(s), the target and the allowed keys."""
    unknown = sorted(str(k) for k in options if k not in allowed)
    if unknown:
        raise TargetError("unknown option%s %s for target %s (allowed: %s)" % (
            "s" if len(unknown) > 1 else "", ", ".join(unknown), profile["name"], ", ".join(sorted(allowed))))


def check_calibration(data, source) -> None:
    """Calibration values must be finite (an inf gives infinite scales and a broken int8 model)."""
    import numpy as np
    arrays = data.values() if isinstance(data, dict) else (data if isinstance(data, list) else [data])
    for a in arrays:
        for v in (a.values() if isinstance(a, dict) else [a]):
            v = np.asarray(v)
            if v.dtype.kind in "fc" and not np.all(np.isfinite(v)):
                raise TargetError("calibration set %s holds %d non-finite values (NaN or inf)"
                                  % (source, int(np.sum(~np.isfinite(v)))))


# --- file modes -----------------------------------------------------------------------------------------

def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def file_mode(path, executable=None) -> int:
    """0644 for data, 0755 for scripts (.sh, .py or an executable file), less the process umask."""
    p = Path(path)
    if executable is None:
        executable = p.suffix in SCRIPT_SUFFIXES or bool(p.exists() and p.stat().st_mode & stat.S_IXUSR)
    return (0o755 if executable else 0o644) & ~_umask()


def fix_modes(folder) -> None:
    """Folders 0755, files 0644 (scripts 0755): a deploy folder is meant to be copied and read by others."""
    for root, dirs, files in os.walk(str(folder)):
        os.chmod(root, 0o755 & ~_umask())
        for f in files:
            p = os.path.join(root, f)
            os.chmod(p, file_mode(p))


# --- manifest -------------------------------------------------------------------------------------------

def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(str(path), "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(folder) -> Dict[str, str]:
    """{relative path: sha256} from FOLDER/MANIFEST.sha256, or None when there is none."""
    p = Path(folder) / MANIFEST
    if not p.is_file():
        return None
    out = {}
    for line in p.read_text(errors="replace").splitlines():
        m = re.match(r"^([0-9a-f]{64}) [ *](.+)$", line.strip())
        if m and not os.path.isabs(m.group(2)) and ".." not in m.group(2).split("/"):
            out[m.group(2)] = m.group(1)
    return out


def manifest_text(entries: Dict[str, str]) -> str:
    return "".join("%s  %s\n" % (h, rel) for rel, h in sorted(entries.items()))


def _files(folder) -> List[str]:
    out = []
    for root, _, files in os.walk(str(folder)):
        for f in files:
            out.append(os.path.relpath(os.path.join(root, f), str(folder)).replace(os.sep, "/"))
    return sorted(out)


# --- output folders -------------------------------------------------------------------------------------

def check_out_dir(out_dir, force=False) -> Path:
    """Fail early (before any work) on an --out that cannot take a deploy folder."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise TargetError("--out %s is an existing file, not a folder" % out)
    if out.is_dir() and any(out.iterdir()) and read_manifest(out) is None and not force:
        raise TargetError("--out %s is not empty and was not written by grpo-edge deploy (no %s): choose another "
                          "folder, or pass --force to overwrite files there" % (out, MANIFEST))
    return out


def make_staging(out: Path) -> Path:
    """A fresh folder next to `out` (same file system, so publishing is a rename)."""
    parent = out.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=str(parent), prefix=".%s.staging-" % out.name))


def publish(stage: Path, out: Path, force=False) -> List[str]:
    """Move the staged files into `out` (see the module doc); returns the files kept because the user
    edited them (their new versions are NAME.new). `stage` is gone afterwards."""
    from grpo_edge.report import atomic_write_text
    check_out_dir(out, force)
    new = {rel: sha256_file(stage / rel) for rel in _files(stage)}
    fix_modes(stage)
    if not out.exists() and not out.is_symlink():  # a new folder: one rename publishes all of it
        atomic_write_text(stage / MANIFEST, manifest_text(new))
        os.chmod(str(stage / MANIFEST), file_mode(MANIFEST, False))
        os.replace(str(stage), str(out))
        return []
    old = read_manifest(out) or {}
    kept, entries = [], dict(new)
    for rel, h in new.items():
        dest = out / rel
        if dest.is_dir():
            raise TargetError("%s is a folder; deploy needs to write a file there" % dest)
        if dest.exists() and not force and sha256_file(dest) not in (old.get(rel), h):
            kept.append(rel)                  # the user changed it (or made it): keep theirs
            dest = out / (rel + ".new")
            entries[rel + ".new"] = h
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(str(stage / rel), str(dest))
    for rel, h in old.items():                # generated last time, not this time, and unchanged: stale
        p = out / rel
        if rel not in entries and p.is_file() and sha256_file(p) == h:
            p.unlink()
    atomic_write_text(out / MANIFEST, manifest_text(entries))
    os.chmod(str(out / MANIFEST), file_mode(MANIFEST, False))
    shutil.rmtree(str(stage), ignore_errors=True)
    return kept


def _relocate_text_files(stage: Path, out: Path) -> None:
    """Generated reports name the staging folder; make them name the published one."""
    old, new = str(stage).encode(), str(out.absolute()).encode()
    for rel in _files(stage):
        p = stage / rel
        if p.suffix in TEXT_SUFFIXES:
            data = p.read_bytes()
            if old in data:
                p.write_bytes(data.replace(old, new))


def _relocate(obj, old: str, new: str):
    if isinstance(obj, str):
        return obj.replace(old, new)
    if isinstance(obj, dict):
        return {k: _relocate(v, old, new) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_relocate(v, old, new) for v in obj)
    return obj


def _relocate_report(report, old: str, new: str) -> None:
    if report is None or not hasattr(report, "figures"):
        return
    for f in report.figures.values():
        f.source = _relocate(f.source, old, new)
        f.value = _relocate(f.value, old, new)
    report.title = _relocate(report.title, old, new)
    report.sections = _relocate(report.sections, old, new)
    report.notes = _relocate(report.notes, old, new)


def _reason(e: OSError) -> str:
    import errno
    if isinstance(e, shutil.Error) and e.args and isinstance(e.args[0], list) and e.args[0]:
        return " ".join(str(e.args[0][0][-1]).split())     # copytree: the first file's reason
    what = {errno.ENOSPC: "disk full", errno.EROFS: "read-only file system",
            errno.EEXIST: "a path component is a file"}.get(e.errno)
    return "%s (%s)" % (what, e.strerror) if what else str(e.strerror or e)


def _disk_full(folder, margin=64 * 1024) -> bool:
    try:
        st = os.statvfs(str(folder))
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < margin


def deploy_into_folder(build, target, checkpoint=None, onnx=None, out_dir="deploy", options=None, force=False):
    """Check the options and the output folder, run `build(target, checkpoint, onnx, stage, options)` into a
    staging folder, then publish it to `out_dir`. Returns build's Report, with `report.kept` (files the
    user edited, whose new versions are NAME.new)."""
    from grpo_edge.targets.profiles import load_profile
    profile = load_profile(target)                 # unknown target -> lists the known ones
    options = dict(options or {})
    check_options(profile, options, getattr(family_module(profile), "OPTIONS"))
    if options.get("calibration") is not None and isinstance(options["calibration"], (str, Path)):
        if not Path(options["calibration"]).is_file():
            raise TargetError("calibration file not found: %s" % options["calibration"])
    out = check_out_dir(out_dir, force)
    try:
        stage = make_staging(out)
    except OSError as e:
        raise TargetError("cannot write the deploy folder %s: %s" % (out, _reason(e))) from None
    old, new = str(stage), str(out.absolute())
    try:
        try:
            report = build(target, checkpoint, onnx, str(stage), options)
        except GrpoEdgeError as e:
            msg = str(e)
            if old not in msg:
                raise
            reports = [rel for rel in _files(stage) if rel.startswith("report.")]
            if reports:                            # the error points at the staged report: publish the report
                for rel in _files(stage):
                    if rel not in reports:
                        (stage / rel).unlink()
                _relocate_text_files(stage, out)
                publish(stage, out, force)
            else:                                  # a staged file that will not exist: name it by its file name
                msg = msg.replace(old + os.sep, "")
            raise type(e)(msg.replace(old, new)) from None
        except OSError as e:                      # disk full, read-only, permissions: name the folder, one line
            reason = "disk full (No space left on device)" if _disk_full(stage) else _reason(e)
            raise TargetError("cannot write the deploy folder %s: %s; nothing was published" % (out, reason)) \
                from None
        except Exception:
            if _disk_full(stage):                 # some writers (torch, onnx) wrap ENOSPC in their own errors
                raise TargetError("cannot write the deploy folder %s: disk full; nothing was published" % out) \
                    from None
            raise
        _relocate_text_files(stage, out)
        _relocate_report(report, old, new)
        try:
            kept = publish(stage, out, force)
        except OSError as e:
            raise TargetError("cannot publish the deploy folder %s: %s" % (out, _reason(e))) from None
        if report is not None:
            report.kept = kept
        return report
    finally:
        if stage.exists():
            shutil.rmtree(str(stage), ignore_errors=True)
