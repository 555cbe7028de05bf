"""Triton 3.6's interpreter without its redundant per-call patching (test speed only; same results).

Every call of a ``@triton.jit`` helper inside an interpreted kernel re-runs ``_patch_lang``, which walks
every member of the language modules the helper sees with ``inspect.getmembers`` (about a third of a
fused-QKV test's time on CPU). A walk over a module already patched changes nothing: a patched member is
no longer a builtin, so it is left alone, and the few attributes set unconditionally get equal values.
Modules stay patched for the whole launch that patched them (its scope restores them at the end), and for
good once a helper's call patched them (Triton never restores a helper's scope: ``triton.language.core``,
seen by ``tl.sum`` and ``tl.zeros``, stays patched after the first such call). So a helper call whose
modules are all patched in one of these two ways skips the walk; any other call patches as before.
"""

from __future__ import annotations

import functools
import inspect

import triton


def install() -> bool:
    """Skip the nested re-patching (Triton 3.6.x only; returns whether it did)."""
    if not triton.__version__.startswith("3.6."):
        return False
    from triton.runtime import interpreter

    tl = interpreter.tl
    patch_lang = interpreter._patch_lang
    grid_call = interpreter.GridExecutor.__call__
    launches: list[set | None] = []  # per running launch: the language modules it patched (None: not yet)
    for_good: set = set()  # language modules a helper's call patched (never restored)

    @functools.cache
    def langs(fn) -> frozenset:  # per function: a helper is called many times per launch
        return frozenset(id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core))

    @functools.wraps(patch_lang)
    def patch_lang_once(fn):
        used = langs(fn)
        if launches and launches[-1] is not None and used <= launches[-1] | for_good:
            return interpreter._LangPatchScope()  # an empty scope: a helper's is never restored anyway
        scope = patch_lang(fn)
        if launches and launches[-1] is None:
            launches[-1] = used  # the launch's own patching, restored when it ends
        elif launches:
            for_good.update(used)
        return scope

    @functools.wraps(grid_call)
    def tracked_grid_call(self, *args, **kwargs):
        launches.append(None)
        try:
            return grid_call(self, *args, **kwargs)
        finally:
            launches.pop()

    interpreter._patch_lang = patch_lang_once
    interpreter.GridExecutor.__call__ = tracked_grid_call
    return True
