"""What a hospital node's process imports before it has a message to act on. Flower's deployment
runtime starts one process per message, so every import is paid per message: Opacus (torch.distributed,
scipy.stats) and matplotlib cost ~2 s of CPU together here, and a node's crypto phases and a run
without DP need neither. They load where they are used (the DP-SGD engine, the accountants, the
report), and the packages' façades load their names on first use."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("opacus", "matplotlib", "scipy.stats")


def _imported_after(code: str) -> dict[str, bool]:
    probe = f"import json, sys\n{code}\nprint(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize(
    "code",
    [
        "import secure_fed.launch.client_app",  # the ClientApp every message's process imports
        "import secure_fed.launch.approved_app",  # the site's own flwr-clientapp
        "import secure_fed.audits.log",  # a site appending to its signed log
        "import secure_fed.dp",
        "import secure_fed.audits",
    ],
)
def test_a_node_process_does_not_import_what_it_may_not_use(code: str) -> None:
    assert _imported_after(code) == dict.fromkeys(HEAVY, False)


@pytest.mark.slow
def test_the_facades_still_give_every_name() -> None:
    import secure_fed.audits as audits
    import secure_fed.dp as dp

    for package in (dp, audits):
        for name in package.__all__:
            assert getattr(package, name) is not None, (package.__name__, name)
        with pytest.raises(AttributeError):
            package.no_such_name  # noqa: B018
    # pricing reaches Opacus when there is something to price, not before
    probe = (
        "from secure_fed.dp.accountants import epsilon_rdp\n"
        "from secure_fed.dp.events import PoissonSampledGaussian\n"
    )
    assert _imported_after(probe + "assert epsilon_rdp([], 1e-5) == 0")["opacus"] is False
    priced = probe + "assert round(epsilon_rdp([PoissonSampledGaussian(0.04, 1.5, 2250)], 1e-5), 4) == 7.3291"
    assert _imported_after(priced)["opacus"] is True
    # and the DP-SGD engine's wrapper is Opacus' module, defined on first use
    from secure_fed.dp.dpsgd import ExpandedWeightsModule

    assert ExpandedWeightsModule.__mro__[1].__module__.startswith("opacus.")
