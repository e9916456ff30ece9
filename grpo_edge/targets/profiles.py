"""Device profiles: `targets/<name>.yaml`, data only, shipped inside the package.

A profile is a dict parsed from YAML::

    name, display_name, family (rpi | jetson | esp32), runtime, aliases
    figures: {key: {value, unit, source, label}}   label: datasheet | measured-by-others | estimate

Every figure carries its source; `label: estimate` marks our own assumptions. The source checkout keeps
the files in the top-level `targets/` folder; `grpo_edge/profiles` is a symlink to it, which the
package-data glob `profiles/*.yaml` in pyproject.toml picks up, so a wheel holds them too.

    >>> p = load_profile("rpi4"); figure(p, "clock_hz")
    1800000000.0
"""
from pathlib import Path
from typing import Dict, List, Optional

from grpo_edge.errors import TargetError

LABELS = ("datasheet", "measured-by-others", "estimate")
REQUIRED = ("clock_hz", "cores", "idle_power_w", "active_power_w", "fp32_macs_per_s", "int8_macs_per_s",
            "call_overhead_s")


def profiles_dir() -> Path:
    """The folder holding the YAML files: the package copy if installed, else the source checkout's."""
    here = Path(__file__).resolve().parent.parent          # grpo_edge/
    for d in (here / "profiles", here.parent / "targets"):
        if d.is_dir() and any(d.glob("*.yaml")):
            return d
    raise TargetError("no device profiles found (looked in %s and %s)" % (here / "profiles", here.parent / "targets"))


def list_profiles() -> List[str]:
    """Names of all known device profiles, sorted."""
    return sorted(p.stem for p in profiles_dir().glob("*.yaml"))


def _aliases() -> Dict[str, str]:
    out = {}
    for name in list_profiles():
        for a in _read(name).get("aliases", []) or []:
            out[str(a).lower()] = name
    return out


def _read(name: str) -> dict:
    import yaml
    path = profiles_dir() / (name + ".yaml")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise TargetError("profile %s is not valid YAML (%s)" % (path, str(e).splitlines()[0]))
    if not isinstance(data, dict) or not isinstance(data.get("figures"), dict):
        raise TargetError("profile %s has no 'figures' mapping" % path)
    return data


def resolve_name(name: str) -> str:
    """Canonical profile name for `name` or one of its aliases (case-insensitive)."""
    key = str(name).strip().lower()
    known = list_profiles()
    if key in known:
        return key
    alias = _aliases().get(key)
    if alias:
        return alias
    raise TargetError("unknown target %r; known targets: %s" % (name, ", ".join(known)))


def load_profile(name: str) -> dict:
    """Load a device profile by name or alias; raises TargetError listing the known ones."""
    canon = resolve_name(name)
    data = _read(canon)
    problems = check_profile(data)
    if problems:
        raise TargetError("profile %s: %s" % (canon, "; ".join(problems)))
    data["name"] = canon
    return data


def check_profile(data: dict) -> List[str]:
    """Problems with a profile dict: missing required figures, figures without a source or label."""
    problems = []
    figs = data.get("figures", {})
    for key in REQUIRED:
        if key not in figs:
            problems.append("missing figure %r" % key)
    for key, f in figs.items():
        if not isinstance(f, dict) or "value" not in f:
            problems.append("figure %r is not {value, unit, source, label}" % key)
            continue
        if not str(f.get("source", "")).strip():
            problems.append("figure %r has no source" % key)
        if f.get("label") not in LABELS:
            problems.append("figure %r label must be one of %s" % (key, "|".join(LABELS)))
    return problems


def figure(profile: dict, key: str, default=None):
    """The value of one figure (None if the figure is absent and no default is given)."""
    f = profile["figures"].get(key)
    return default if f is None or f.get("value") is None else f["value"]


def figure_source(profile: dict, key: str) -> str:
    f = profile["figures"][key]
    return "%s: %s (%s)" % (profile["name"], f["source"], f["label"])


def estimate_latency(profile: dict, macs: int, dtype: str = "fp32") -> dict:
    """Estimated device latency of one inference: call overhead + MACs / effective MAC rate.

    A first-order model for small batch-1 models (no memory-bandwidth term); returns
    {"value": seconds, "source": how it was computed and from which profile figures}.
    """
    if dtype not in ("fp32", "int8"):
        raise TargetError("estimate_latency: dtype must be fp32 or int8, got %r" % dtype)
    rate_key = dtype + "_macs_per_s"
    rate = float(figure(profile, rate_key))
    overhead = float(figure(profile, "call_overhead_s"))
    value = overhead + float(macs) / rate
    src = ("%s: call_overhead_s %.3g s + %d MACs / %s %.3g MAC/s (profile estimates)"
           % (profile["name"], overhead, int(macs), rate_key, rate))
    return {"value": value, "source": src}


def estimate_energy(profile: dict, latency_s: float, latency_source: Optional[str] = None) -> dict:
    """Estimated energy of one inference: active_power_w x estimated latency (whole-chip/board power)."""
    p = float(figure(profile, "active_power_w"))
    f = profile["figures"]["active_power_w"]
    src = ("%s: active_power_w %.3g W (%s) x estimated latency" % (profile["name"], p, f["label"]))
    if latency_source:
        src += " [%s]" % latency_source
    return {"value": p * float(latency_s), "source": src}
