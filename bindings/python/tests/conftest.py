# SPDX-License-Identifier: Apache-2.0
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
PACKAGE = HERE.parent
REPO = PACKAGE.parent.parent
sys.path.insert(0, str(PACKAGE))


@pytest.fixture
def ns(tmp_path, monkeypatch):
    """A private namespace directory, also set as TOPDECK_DIR."""
    d = tmp_path / "ns"
    d.mkdir(mode=0o700)
    monkeypatch.setenv("TOPDECK_DIR", str(d))
    return d


@pytest.fixture(scope="session")
def topdeck_bin():
    """The Rust CLI (`cargo build --workspace --bins` makes it)."""
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    b = Path(os.environ.get("TOPDECK_BIN", target / "debug" / "topdeck"))
    if not b.exists():
        why = f"{b} not built; run `cargo build --workspace --bins` (or set TOPDECK_BIN)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(f"SKIPPED: {why}")
    return b


@pytest.fixture
def cli(topdeck_bin):
    """Runs the Rust CLI on a namespace and returns its JSON."""
    def run(ns, *args):
        out = subprocess.run([str(topdeck_bin), *args], env={**os.environ, "TOPDECK_DIR": str(ns)},
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, f"topdeck {args}: {out.stderr}"
        return json.loads(out.stdout) if "--json" in args else out.stdout
    return run
