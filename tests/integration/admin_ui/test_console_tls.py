"""With the platform's certificate (FERRYMAN_TLS_CERT/KEY, what ``ferryman up --tls`` sets)
the console serves HTTPS, as every other listener does: logins carry passwords. A client
checking the platform's CA is answered; plain HTTP gets no page."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from console_app import start_console

from ferryman_server.cli.certs import local_pki
from ferryman_server.kernel.net import free_port
from ferryman_server.registry.db import make_engine
from ferryman_server.registry.migrate import upgrade

# Left out of make test-fast: starts the console as a process.
pytestmark = pytest.mark.slow


def test_the_console_serves_https_with_the_platforms_certificate(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    upgrade(make_engine(url))
    pki = local_pki(tmp_path / "tls")
    env = {
        **os.environ,
        "FERRYMAN_DATABASE_URL": url,
        "FERRYMAN_DATA_DIR": str(tmp_path),
        "FERRYMAN_TLS_CERT": str(pki.cert),
        "FERRYMAN_TLS_KEY": str(pki.key),
    }
    port = free_port()
    proc = start_console(port, env, ca=str(pki.ca))  # answered over TLS, checked with the CA
    try:
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5).read()
    finally:
        proc.terminate()
        proc.wait(10)
