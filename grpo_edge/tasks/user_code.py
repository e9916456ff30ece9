"""The user's own code named as 'module:Name' (an Env class, a Task class, or an id the module registers):
imported from the current folder as `python -m` would, with one-line errors."""
import importlib
import os
import sys

from grpo_edge.errors import ConfigError


def import_user_object(spec):
    """'module:Name' -> the class Name of the user's module, or the string 'module:Name' when Name is not an
    attribute but a gymnasium id that importing the module registered. The current folder is importable
    (as with `python -m`). One line (ConfigError) naming the module or the name otherwise."""
    module, name = spec.split(":", 1)
    current_folder_importable()
    try:
        mod = importlib.import_module(module)
    except Exception as e:  # the user's module: any import-time error is theirs to see, in one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        where = ""
        if isinstance(e, ImportError) and getattr(e, "name", None) == module.split(".")[0]:
            where = " (run where it is importable: the folder holding %s.py, or with its package installed)" % (
                module.split(".")[0])
        raise ConfigError("cannot import module %r for %r: %s: %s%s" % (module, spec, type(e).__name__, first[:200],
                                                                       where))
    if hasattr(mod, name):
        return getattr(mod, name)
    try:
        import gymnasium
        if name in gymnasium.registry:
            return spec
    except ImportError:
        pass
    raise ConfigError("module %s defines no %r (and registers no gymnasium id of that name)" % (module, name))


def current_folder_importable():
    """The current folder on sys.path (as `python -m` puts it there): the user's modules beside them import."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
