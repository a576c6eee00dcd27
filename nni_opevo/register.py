"""Register this package's tuners with nnictl, so experiment configs can say ``tuner: {name: OpEvo}``.

``python -m nni_opevo.register`` (``nni-opevo register``) runs ``nnictl algo register --meta`` on the
packaged ``registration.yml``, which ``registry.registration_yaml`` generates (NNI keeps the
registry under its config directory, ``NNI_CONFIG_DIR`` when set, else the active virtual
environment's ``nni/`` folder)."""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

META = Path(__file__).with_name("registration.yml")


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="nni-opevo register", description=__doc__.splitlines()[0]).parse_args(argv)
    cmd = [sys.executable, "-m", "nni.tools.nnictl.nnictl", "algo", "register", "--meta", str(META)]
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
