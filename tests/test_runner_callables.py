"""Callables and user modules in a warm worker."""

from __future__ import annotations


def test_user_modules_reload_when_their_content_changes(tmp_path) -> None:
    import sys

    from tools.runner.callables import call_arguments, load_user_modules, resolve

    first, second = tmp_path / "run1", tmp_path / "run2"
    for d, value in ((first, 1), (second, 2)):
        d.mkdir()
        (d / "opdebug_test_mod.py").write_text(f"def cand(x, scale=1):\n    return x * scale + {value}\n")
    try:
        load_user_modules(str(first), ["opdebug_test_mod.py"])
        assert resolve("opdebug_test_mod.cand")(1) == 2
        load_user_modules(str(second), ["opdebug_test_mod.py"])  # same name, other content
        assert resolve("opdebug_test_mod.cand")(1) == 3
        assert str(first) not in sys.path and str(second) in sys.path
    finally:
        sys.modules.pop("opdebug_test_mod", None)
        while str(second) in sys.path:
            sys.path.remove(str(second))
    args, kwargs = call_arguments({"style": "positional", "order": ["b", "a"]}, {"a": 1, "b": 2}, {"scale": 3})
    assert args == [2, 1] and kwargs == {"scale": 3}
