"""A CUDA template's register estimate against ptxas, built here (nvcc, no GPU).

The static check refuses a configuration whose estimated registers per thread exceed what
ptxas gives a block of its threads, so that no admitted kernel spills to local memory; an
estimate too high loses space instead. For each workload this draws configurations the check
admits and configurations it refuses by that rule alone with an estimate at most ``--near``
times the limit (the refusals that might be wrong), compiles each for an H100 with
``nvcc -cubin -Xptxas -v`` and reads the registers and local memory (spills and stack frame)
that ptxas reports. Prints figures; it asserts nothing.

    python -m nni_opevo_bench.registers --workloads MM1 MM2 MM3 BMM1 BMM2 BMM3 --draws 40
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from trial_code import kernel, targets, workloads
from trial_code.cli import add_number, description
from trial_code.constraint import draw

H100 = targets.h100()
RULE = "estimated registers per thread"
SEED_STRIDE = 100_000
"""Seeds of one draw's search for a refusal near the limit: draw ``d`` tries seeds
``d * SEED_STRIDE`` on, so no two draws share one."""


def _refused_near(workload: workloads.Workload, draw_index: int, near: float) -> tuple[dict[str, Any] | None, str]:
    """A configuration the check refuses by the register rule alone, with an estimate at most
    ``near`` times the limit (None when 1,000 seeds find none)."""
    for seed in range(draw_index * SEED_STRIDE, draw_index * SEED_STRIDE + 1000):
        params, message = draw(workload, H100, seed, refused_by=(RULE,))
        if params is None:
            return None, ""
        estimate, most = (int(number) for number in re.findall(r"\d+", message)[-2:])
        if estimate <= near * most:
            return params, message
    return None, ""


def ptxas_report(params: dict[str, Any], workload: workloads.Workload) -> dict[str, int]:
    """Registers (the most of any of the kernels), what ptxas may give (the budget of the
    largest block, from ``__launch_bounds__``) and bytes of local memory ptxas reports. Local
    memory below the budget is ptxas's own trade (fewer registers for more blocks an SM), not a
    tile that ran out of registers."""
    source = kernel.source(kernel.build(kernel.scheduled(workload, params, H100), H100), H100)
    threads = max(int(n) for n in re.findall(r"__launch_bounds__\((\d+)\)", source))
    with tempfile.TemporaryDirectory() as folder:
        cu = Path(folder) / "kernel.cu"
        cu.write_text(source)
        report = subprocess.run(["nvcc", "-cubin", f"-arch={H100.arch}", "-Xptxas", "-v", "-o",
                                 str(Path(folder) / "kernel.cubin"), str(cu)],
                                capture_output=True, text=True, check=True).stderr
    return {"registers": max(int(n) for n in re.findall(r"Used (\d+) registers", report)),
            "budget": targets.registers_per_thread(threads),
            "local": sum(int(n) for n in re.findall(r"(\d+) bytes (?:spill stores|spill loads|stack frame)", report))}


def measure(name: str, draw_index: int, near: float) -> list[dict[str, Any]]:
    """One admitted and one refused-near-the-limit draw of a workload, each compiled; a draw
    whose build fails is a row with its error."""
    workload = workloads.lookup(name)
    rows = []
    admitted, _ = draw(workload, H100, draw_index)
    refused, message = _refused_near(workload, draw_index, near)
    for kind, params in (("admitted", admitted), ("refused", refused)):
        if params is None:
            continue
        row: dict[str, Any] = {"workload": name, "draw": draw_index, "kind": kind, "params": params,
                               "rule": message if kind == "refused" else ""}
        try:
            row.update(ptxas_report(params, workload))
        except Exception as error:  # noqa: BLE001 (a failed build is a finding, reported in its row)
            row["error"] = str(error).splitlines()[0][:200]
        rows.append(row)
    return rows


def table(rows: list[dict[str, Any]], names: list[str]) -> str:
    """One line per workload: admitted draws, those with local memory and of those the ones
    that used every register the budget allows (the estimate's misses); refusals near the limit
    and those that ptxas keeps free of local memory (space the estimate loses)."""
    lines = ["| workload | admitted | with local memory (most bytes) | of which at the register budget "
             "| failed to build | refused near the limit | of which free of local memory |",
             "|---|---|---|---|---|---|---|"]
    for name in names:
        mine = [row for row in rows if row["workload"] == name]
        admitted = [row for row in mine if row["kind"] == "admitted"]
        refused = [row for row in mine if row["kind"] == "refused" and "error" not in row]
        spilled = [row for row in admitted if row.get("local")]
        most = max((row["local"] for row in spilled), default=0)
        exhausted = sum(row["registers"] >= row["budget"] for row in spilled)
        failed = sum("error" in row for row in admitted)
        lines.append(f"| {name} | {len(admitted)} | {len(spilled)} ({most}) | {exhausted} | {failed} "
                     f"| {len(refused)} | {sum(row['local'] == 0 for row in refused)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="nni-opevo registers", description=description(__doc__))
    parser.add_argument("--workloads", nargs="+", default=["MM1", "MM2", "MM3", "BMM1", "BMM2", "BMM3"],
                        help="named CUDA workloads (trial_code.workloads)")
    add_number(parser, "--draws", int, 1, 10_000, help="admitted and refused draws per workload", default=20)
    add_number(parser, "--near", float, 1.0, 100.0, help="refusals drawn up to this many times the limit",
               default=2.0)
    add_number(parser, "--workers", int, 1, 256, help="compiles at once", default=2)
    parser.add_argument("--out", type=Path, help="also write every row as JSON lines here")
    args = parser.parse_args(argv)
    if shutil.which("nvcc") is None:
        sys.exit("registers: nvcc (the CUDA toolkit) is not on PATH")
    for name in args.workloads:
        if workloads.lookup(name).family not in ("matmul", "batch_matmul", "conv2d"):
            sys.exit(f"registers: --workloads {name} is not a GEMM or convolution workload")
    jobs = [(name, index) for name in args.workloads for index in range(args.draws)]
    with ProcessPoolExecutor(args.workers) as pool:
        rows = [row for found in pool.map(measure, *zip(*jobs), [args.near] * len(jobs)) for row in found]
    if args.out:
        args.out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    print(f"{args.draws} draws a workload, refusals up to {args.near:g} times the limit, "
          f"built for {H100.arch} by nvcc -Xptxas -v")
    print(table(rows, args.workloads))


if __name__ == "__main__":
    main()
