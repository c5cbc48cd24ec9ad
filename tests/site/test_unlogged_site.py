"""A hospital's node never acts unlogged: without its signing key (or with the audit log switched
off in its policy) it refuses to start a run, where a simulation would make ephemeral keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from secure_fed.launch import client_app as app
from secure_fed.protocol.keyring import audit_keys_dir
from secure_fed.site.guard import Refusal


@pytest.mark.parametrize("audit", [True, False])
def test_a_deployed_site_without_audit_keys_refuses(make_config, audit: bool, tmp_path: Path) -> None:
    cfg = make_config(audit__enabled=audit)
    keys = None if audit else audit_keys_dir(cfg, ["site0"])
    with pytest.raises(Refusal, match="no audit log to sign") as refused:
        app._runtime(cfg, "site0", keys, "run-x", deployed=True)
    assert refused.value.code == "unlogged"
    assert not (Path(cfg.out) / "runs" / "run-x").exists()  # refused before anything was written
