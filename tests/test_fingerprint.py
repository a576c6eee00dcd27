"""The proposal fingerprint (nni_opevo_bench/fingerprint.py) holds: every catalog tuner proposes on the
synthetic landscapes (and the network of them) exactly what it proposed when the record was made.
The caches' runs are checked by the script itself where the caches are at hand."""
import pytest

from nni_opevo_bench import fingerprint


@pytest.mark.slow(seconds=65)
def test_synthetic_landscapes_propose_as_recorded(capsys):
    assert fingerprint.main(["check", "--only", "SYN", "network", "--seeds", "1", "--hub", "/nonexistent",
                             "--held-out", "/nonexistent"]) == 0
    assert "25 of 25 runs propose as recorded" in capsys.readouterr().out
