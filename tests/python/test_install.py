"""The package as installed: pip builds it offline with setuptools alone,
the library folder make install records in fabxfer/_install.py is used,
and a library of another version is refused."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import SRCDIR

LIBRARY = os.environ.get("FABXFER_LIBRARY", "")


def run_python(code, env, cwd):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_pip_install_offline_and_install_path(tmp_path):
    for mod in ("pip", "setuptools"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip("%s cannot import %s" % (sys.executable, mod))
    # Built from a copy, so that nothing is written into the source tree.
    src = tmp_path / "src"
    shutil.copytree(os.path.join(SRCDIR, "python"), src,
                    ignore=shutil.ignore_patterns("__pycache__", "build",
                                                  "*.egg-info", "_install.py"))
    target = tmp_path / "site"
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    out = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation",
         "--no-deps", "--target", str(target), str(src)],
        env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    pkg = target / "fabxfer"
    assert (pkg / "py.typed").exists() and (pkg / "_lib.py").exists()
    # As make install leaves it: the library's folder recorded.
    (pkg / "_install.py").write_text(
        "LIBDIR = %r\n" % os.path.dirname(LIBRARY))
    env = {k: v for k, v in os.environ.items() if k != "FABXFER_LIBRARY"}
    env["PYTHONPATH"] = str(target)
    out = run_python("""
        import fabxfer
        print(fabxfer.__file__)
        print(fabxfer.version(), fabxfer.library_path())
        """, env, str(tmp_path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert lines[0].startswith(str(pkg))
    assert lines[1].split()[1].startswith(os.path.dirname(LIBRARY))


def test_library_of_another_version_is_refused(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a fake library")
    c = tmp_path / "fake.c"
    c.write_text("unsigned fx_version(void) { return (0 << 16) | (3 << 8) "
                 "| 1; }\n")
    so = tmp_path / "libfake.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(c)],
                   check=True, timeout=60)
    env = dict(os.environ, FABXFER_LIBRARY=str(so))
    out = run_python("""
        import fabxfer
        try:
            fabxfer.version()
        except fabxfer.LibraryLoadError as e:
            print(e)
        """, env, str(tmp_path))
    assert "is fabxfer 0.3.1, but this Python package is written for 0.7" \
        in out.stdout, out.stdout + out.stderr
