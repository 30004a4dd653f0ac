"""tests/official's import stubs: a package that is installed but fails to import is stubbed too."""

from __future__ import annotations

import sys

import pytest

from tests.official import install_import_stubs


def test_an_installed_package_that_fails_to_import_is_stubbed(tmp_path, monkeypatch):
    broken = tmp_path / "sox"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('built for another torch')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "sox", raising=False)
    try:
        with pytest.warns(UserWarning, match="sox is installed but fails to import .*built for another torch"):
            install_import_stubs()
        sox = sys.modules["sox"]
        assert sox.__cadence_stub__
        with pytest.raises(RuntimeError, match="stubbed"):
            sox.Transformer()
    finally:
        sys.modules.pop("sox", None)
