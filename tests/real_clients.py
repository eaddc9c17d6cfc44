"""Run a script under the real clients' venv (.venv/clients: tritonclient, openai, made by
`make test`) against a running platform; the script prints one JSON document."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CLIENTS_PYTHON = Path(
    os.environ.get("FERRYMAN_TEST_CLIENTS_PYTHON", REPO / ".venv" / "clients" / "bin" / "python")
)
RUN_TIMEOUT_S = 120.0


def run_client(script: str, **env: Any) -> Any:
    """The JSON the script printed last; its keyword arguments arrive as ARGS (a dict)."""
    if not CLIENTS_PYTHON.exists():
        raise RuntimeError(f"{CLIENTS_PYTHON} is missing: `make test` creates the clients' venv")
    prologue = "import json, os\nARGS = json.loads(os.environ['FERRYMAN_CLIENT_ARGS'])\n"
    done = subprocess.run(
        [str(CLIENTS_PYTHON), "-c", prologue + script],
        env={**os.environ, "FERRYMAN_CLIENT_ARGS": json.dumps(env)},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"client script failed:\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])
