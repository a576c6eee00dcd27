"""The harness's subcommands of ``nni-opevo``. The command line lives a layer below the harness,
so it cannot import it: it finds this table through the ``nni_opevo.commands`` entry point
(setup.py) instead. Each: name -> (module whose ``main(argv)`` runs it, what it does)."""

COMMANDS = {
    "benchmark": ("nni_opevo_bench.__main__", "compare tuners and draw the figures and tables"),
    "profile": ("nni_opevo_bench.network_profile", "time a network run's final kernels alone and in the built network"),
    "overhead": ("nni_opevo_bench.overhead", "time and memory of each tuner's calls against history size"),
    "fingerprint": ("nni_opevo_bench.fingerprint", "record or check the hash of every tuner's proposals"),
    "campaign": ("nni_opevo_bench.campaign", "the GPU campaign: correctness, vendor anchors, comparison, throughput"),
    "hub": ("nni_opevo_bench.hub", "every tuner on the brute-forced spaces: 1 and 8 in flight, constrained and free"),
    "change": ("nni_opevo_bench.change", "a search change's effect: one tuner's runs in two hub fractions.csv.gz, paired"),
    "vendor-ratio": ("nni_opevo_bench.vendor_ratio", "an exported kernel against its vendor library, again and again"),
    "registers": ("nni_opevo_bench.registers", "a CUDA template's register estimate against ptxas (nvcc, no GPU)"),
    "recheck": ("nni_opevo_bench.recheck", "recorded trials against the static check as it is now, by rule"),
    "operators": ("nni_opevo_bench.operators", "users' operators on the CPU against MetaSchedule and their libraries"),
}
