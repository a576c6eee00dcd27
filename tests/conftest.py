import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # test helpers (nni_experiment, analytic_trial)
sys.path.insert(0, str(Path(__file__).parent.parent))  # trial_code, which NNI runs from the checkout
